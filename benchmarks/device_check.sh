#!/usr/bin/env bash
# The GPU check, one script of at most 12 minutes, for a machine with one CUDA GPU:
#
#   bash benchmarks/device_check.sh [OUTPUT_DIR]      # default: $OUT when set, else ./device-check
#
# It runs, each under its own time limit so that one hang cannot take the rest:
#   1. the CUDA tests (tests/lm/test_cuda.py; the CUDA variants of the sharded monitor tests);
#   2. lm train's tokens/s and MFU at d 768 x 12 layers, bf16, without and with torch.compile
#      (benchmarks/lm_train_speed.py: vocabulary 50,304, window 1024, batch 16; a transformers llama);
#   2b. `ctxstair lm train` itself, tiny (the default d 64 x 2 layers, 40 steps on the synthetic corpus,
#      no analysis: nothing is downloaded), for model.family llama and gpt_neox, each with
#      train.precision=bf16 and train.compile=true;
#   3. the staircase monitor under FSDP2, FSDP1 and DeepSpeed ZeRO-3, alone and through the Trainer
#      and Lightning callbacks (tests/monitor/test_sharded.py with CTXSTAIR_TEST_DEVICE=cuda: one
#      process over NCCL, including the Trainer's FSDP and Lightning's FSDPStrategy, which need a GPU);
#   4. the K = 1024 ensemble (benchmarks/ensemble.py --K 1024 --device cuda).
# and writes OUTPUT_DIR/device_check.json: every step's exit status, seconds and numbers, with each
# step's log beside it. The Python is $PYTHON (default python3) with this checkout's src/ first on
# its path: the packages come from that Python's environment, nothing is installed.
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-check}}
mkdir -p "$out"
scratch=$(mktemp -d)  # run directories the check needs only while it runs (its folder keeps the logs)
trap 'rm -rf "$scratch"' EXIT
python=${PYTHON:-python3}
export PYTHONPATH="$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: > "$out/steps.jsonl"

# step NAME SECONDS COMMAND...: run COMMAND with its output in NAME.log; one line of steps.jsonl.
step() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    printf '{"step": "%s", "rc": %d, "seconds": %d, "limit": %d}\n' "$name" "$rc" "$(( $(date +%s) - start ))" \
        "$limit" >> "$out/steps.jsonl"
    echo "$name: exit $rc"
}

"$python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" \
    > "$out/gpu.log" 2>&1 || { cat "$out/gpu.log"; exit 2; }

step cuda_tests 90 "$python" -m pytest -q -p no:cacheprovider -rs tests/lm/test_cuda.py
step lm_bf16 70 "$python" benchmarks/lm_train_speed.py --device cuda --precision bf16 --json "$out/lm_bf16.json"
step lm_bf16_compile 130 "$python" benchmarks/lm_train_speed.py --device cuda --precision bf16 --compile \
    --json "$out/lm_bf16_compile.json"
for family in llama gpt_neox; do
    step "lm_train_${family}_bf16_compile" 100 "$python" -m ctxstair lm train --out "$scratch/$family" --no-analysis \
        --device cuda --set model.family="$family" --set train.precision=bf16 --set train.compile=true \
        --set train.steps=40
done
CTXSTAIR_TEST_DEVICE=cuda step monitor_sharded 110 "$python" -m pytest -q -p no:cacheprovider -rs \
    tests/monitor/test_sharded.py
step ensemble_k1024 70 "$python" benchmarks/ensemble.py --K 1024 --device cuda

"$python" benchmarks/device_check_summary.py "$out"
