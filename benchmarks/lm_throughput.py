"""Training throughput of ``ctxstair lm train`` on the CPU, side by side: against the trainer before
the move to ``transformers`` models, and against a plain Hugging Face loop over the same model.

    python benchmarks/lm_throughput.py                      # about 18 minutes on 2 quiet cores; Markdown tables
    python benchmarks/lm_throughput.py --quick              # a tiny model, one round (smoke test)
    python benchmarks/lm_throughput.py --before /tmp/base   # the old trainer from an existing checkout

Two measures per setting (d = 64 × 2 layers, V = 4,000, 32 windows × 64 tokens; d = 256 × 4 layers,
V = 8,000, 16 × 128), float32, no analysis, snapshots at the first and the last step only, on token
shards of random ids (so each step reads its batch from the shard file, as a pretraining run does):

(a) ``lm train`` now (a ``transformers`` ``llama``, the default ``model.family``) against ``lm train``
    before (the ``DecoderLM`` trainer of commit 3518bd1). The two cannot share one process (both are
    the package ``ctxstair``), so each round runs them as two subprocesses of this Python, one with
    this checkout's ``src/`` on ``PYTHONPATH`` and one with the old checkout's, in alternating order
    (before, now; then now, before; ...) so that load on the machine hits both alike. The old
    checkout is ``--before``; when that path does not exist (or none is given) it is made with ``git
    worktree add`` at 3518bd1 and removed afterwards. Ratio: tokens/s now over tokens/s before.
    Target ≥ 1.0×.
(b) for each family ``llama``, ``gpt_neox``, ``gpt2``, ``qwen2``, ``olmo2``: the step of ``lm train``
    (:func:`ctxstair.lm.train.train_lm`) against a plain loop over the same model holding the
    trainer's initial weights (checked against the run's step-0 snapshot): ``zero_grad``,
    ``model(input_ids=x).logits``, ``next_token_loss``, backward, ``torch.optim.AdamW`` with the
    trainer's betas (0.9, 0.95), learning rate and weight decay, ``loss.item()`` (the trainer reads
    every step's loss too); its batches come from memory. The plain step runs inside the trainer's
    per-step hook, so the two alternate step by step in the same process state (the trainer's thread
    count, deterministic algorithms, denormals flushed). Ratio: the plain loop's step time over the
    trainer's (< 1: the trainer is slower). Target ≥ 0.98×.

Steps are timed between the trainer's hook calls; step 0 (which writes the first snapshot) and the
warm-up steps are not timed. Each ratio is computed from median step times in each of ``--rounds``
rounds; the tables give the tokens/s of the median round and the ratio's median and range over
rounds. A target is judged on the ratio as shown (3 decimals).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose ``lm train`` trained ``DecoderLM``.
BEFORE_COMMIT = "3518bd1"
FAMILIES = ("llama", "gpt_neox", "gpt2", "qwen2", "olmo2")
TARGET_A, TARGET_B = 1.0, 0.98
#: (label, model sizes, vocabulary, windows per batch, window length); ``lm train`` sets these keys
#: the same way before and now.
SETTINGS = (
    ("d = 64, 2 layers, V = 4,000, 32 × 64 tokens",
     dict(d_model=64, n_layers=2, n_heads=4, head_dim=16, d_mlp=256), 4000, 32, 64),
    ("d = 256, 4 layers, V = 8,000, 16 × 128 tokens",
     dict(d_model=256, n_layers=4, n_heads=4, head_dim=64, d_mlp=1024), 8000, 16, 128),
)
QUICK = (("d = 64, 2 layers, V = 512, 4 × 32 tokens (quick)",
          dict(d_model=64, n_layers=2, n_heads=4, head_dim=16, d_mlp=256), 512, 4, 32),)


# ------------------------------------------------------------------------------------ shared data

def write_corpus(folder: Path, vocab: int, n: int, T: int) -> np.ndarray:
    """A word-level ``tokenizer.json`` of ``vocab`` tokens and one shard of random ids (64 batches'
    worth) in ``folder``; returns the ids as windows (m, T) for the plain loop."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "shards").mkdir()
    ids = np.random.default_rng(0).integers(0, vocab, T * n * 64, dtype=np.int64)
    ids.astype(np.uint32).tofile(folder / "shards" / "tokens.bin")
    return ids.reshape(-1, T)


def overrides(folder: Path, sizes: dict, n: int, T: int, total: int) -> dict:
    """``--set`` overrides of a timing run that both trainers read alike (no ``model.family``: the
    old config has none, and now it defaults to ``llama``)."""
    return {"corpus.shards": str(folder / "shards"), "corpus.dtype": "uint32",
            "corpus.tokenizer": str(folder / "tokenizer.json"), "corpus.window": T,
            **{f"model.{name}": value for name, value in sizes.items()},
            "train.steps": total, "train.batch_size": n, "train.device": "cpu", "train.val_windows": 8,
            "snapshots.log_points": 0, "snapshots.every": total, "analysis.enabled": False}


def timed_steps(left: dict[int, float], reached: dict[int, float], warmup: int, total: int) -> list[float]:
    """Seconds of the trainer's steps warmup + 1 .. total - 1: step s runs from ``left[s]`` (the
    hook of step s returned) to ``reached[s + 1]`` (the hook of step s + 1 was called). Step 0 holds
    the first snapshot and the last hook call comes before the last one, so no timed step writes files."""
    return [reached[s + 1] - left[s] for s in range(warmup + 1, total)]


# ------------------------------------------------------------------------------------ (a)

def worker(spec: dict) -> None:
    """In a subprocess: train one timing run with whichever ``ctxstair`` ``PYTHONPATH`` holds and
    print its step times as one JSON line."""
    import ctxstair

    if not Path(ctxstair.__file__).resolve().is_relative_to(Path(spec["src"]).resolve()):
        raise SystemExit(f"imported ctxstair from {ctxstair.__file__}, not from {spec['src']}")
    from ctxstair.config import apply_overrides
    from ctxstair.config.lm import LMConfig
    from ctxstair.lm.train import build_model, train_lm

    cfg = apply_overrides(LMConfig(), spec["overrides"])
    marks: dict[int, float] = {}
    train_lm(cfg, spec["run"], hook=lambda step: marks.__setitem__(step, time.perf_counter()))
    model = build_model(cfg, spec["vocab"])
    print(json.dumps({"seconds": timed_steps(marks, marks, spec["warmup"], cfg.train.steps),
                      "model": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())}))


def run_worker(src: Path, spec: dict) -> dict:
    """:func:`worker` in a subprocess importing ``ctxstair`` from ``src`` only."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps({**spec, "src": str(src)})],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the timing run with {src} failed:\n{done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def before_checkout(path: Path | None):
    """The ``src/`` of the old trainer: ``path``'s when it exists, else a ``git worktree`` of
    :data:`BEFORE_COMMIT` made at ``path`` (or in a temporary folder) and removed on exit."""
    if path is not None and path.exists():
        yield path / "src"
        return
    scratch = None
    if path is None:
        scratch = Path(tempfile.mkdtemp(prefix="ctxstair-before-"))
        path = scratch / "checkout"
    made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), BEFORE_COMMIT],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise SystemExit(f"cannot check out {BEFORE_COMMIT} with git worktree ({made.stderr.strip()}); "
                         "pass --before with a checkout of it")
    try:
        yield path / "src"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)
        if scratch is not None:  # whatever git left there, so a failed removal does not stop the benchmark
            shutil.rmtree(scratch, ignore_errors=True)


def measure_a(settings, before_src: Path, warmup: int, steps: int, rounds: int) -> list[dict]:
    """Per setting: (seconds per step now, before) of each round, the two trainers in subprocesses,
    their order alternating round by round."""
    sides = {"now": ROOT / "src", "before": before_src}
    results = [{"label": s[0], "tokens": s[3] * s[4], "rounds": [], "models": {}} for s in settings]
    with tempfile.TemporaryDirectory() as scratch:
        folders = []
        for i, (_, _, vocab, n, T) in enumerate(settings):
            folders.append(Path(scratch) / f"setting{i}")
            folders[-1].mkdir()
            write_corpus(folders[-1], vocab, n, T)
        for round_ in range(rounds):
            order = ("before", "now") if round_ % 2 == 0 else ("now", "before")
            for folder, result, (_, sizes, vocab, n, T) in zip(folders, results, settings, strict=True):
                median = {}
                for side in order:
                    spec = {"overrides": overrides(folder, sizes, n, T, warmup + steps + 1), "warmup": warmup,
                            "vocab": vocab, "run": str(folder / f"run-{side}-{round_}")}
                    found = run_worker(sides[side], spec)
                    median[side] = statistics.median(found["seconds"])
                    result["models"][side] = (found["model"], found["parameters"])
                result["rounds"].append((median["now"], median["before"]))
    return results


# ------------------------------------------------------------------------------------ (b)

def trainer_and_loop(corpus: Path, run: Path, windows: np.ndarray, sizes: dict, family: str, vocab: int, n: int,
                     T: int, warmup: int, steps: int) -> tuple[float, float]:
    """Median seconds per step of ``lm train`` and of the plain loop (module docstring (b)),
    alternating step by step; one training run of ``family`` on the shards in ``corpus``, into ``run``."""
    import torch

    from ctxstair.config import apply_overrides
    from ctxstair.config.lm import LMConfig
    from ctxstair.lm.train import build_model, train_lm
    from ctxstair.models import causal_lm
    from ctxstair.models.loss import next_token_loss
    from ctxstair.run import Run

    total = warmup + steps + 1
    cfg = apply_overrides(LMConfig(), {**overrides(corpus, sizes, n, T, total), "model.family": family})
    model = build_model(cfg, vocab)  # the weights train_lm starts from (checked below)
    initial = {name: tensor.detach().clone() for name, tensor in causal_lm.state_of(model).items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.train.weight_decay)
    data = torch.from_numpy(windows)
    draws = torch.Generator().manual_seed(1)
    reached: dict[int, float] = {}
    left: dict[int, float] = {}
    loop_times = []

    def hook(step: int) -> None:
        reached[step] = time.perf_counter()
        if step < total:
            x = data[torch.randint(len(data), (n,), generator=draws)]
            started = time.perf_counter()
            optimizer.zero_grad()
            loss = next_token_loss(model(input_ids=x).logits, x)
            loss.backward()
            optimizer.step()
            loss.item()
            if step > warmup:
                loop_times.append(time.perf_counter() - started)
        left[step] = time.perf_counter()

    train_lm(cfg, run, hook=hook)
    start = Run(run).snapshot(0)
    if start.keys() != initial.keys() or not all(torch.equal(start[k], initial[k]) for k in initial):
        raise RuntimeError(f"{family}: train_lm started from other weights than the plain loop's copy")
    return statistics.median(timed_steps(left, reached, warmup, total)), statistics.median(loop_times)


def measure_b(settings, warmup: int, steps: int, rounds: int) -> list[dict]:
    """Per setting and family: (seconds per step of the trainer, of the plain loop) of each round,
    settings and families interleaved within each round."""
    results = {(s[0], family): {"label": s[0], "family": family, "tokens": s[3] * s[4], "rounds": []}
               for s in settings for family in FAMILIES}
    with tempfile.TemporaryDirectory() as scratch:
        corpora = []
        for i, (_, _, vocab, n, T) in enumerate(settings):
            folder = Path(scratch) / f"setting{i}"
            folder.mkdir()
            corpora.append((folder, write_corpus(folder, vocab, n, T)))
        for round_ in range(rounds):
            for (folder, windows), (label, sizes, vocab, n, T) in zip(corpora, settings, strict=True):
                for family in FAMILIES:
                    times = trainer_and_loop(folder, folder / f"run-{family}-{round_}", windows, sizes, family,
                                             vocab, n, T, warmup, steps)
                    results[label, family]["rounds"].append(times)
    return list(results.values())


# ------------------------------------------------------------------------------------ report

def median_round(rounds: list[tuple[float, float]]) -> tuple[float, float, float, float, float]:
    """(seconds per step of the first side, of the second, their ratio second / first) of the round
    whose ratio is the median (the lower one of an even count), and the ratio's range over rounds."""
    ratios = [second / first for first, second in rounds]
    first, second = sorted(rounds, key=lambda pair: pair[1] / pair[0])[(len(rounds) - 1) // 2]
    return first, second, second / first, min(ratios), max(ratios)


def ratio_cell(ratio: float, low: float, high: float, rounds: int, target: float) -> str:
    """``**r×** (low–high): met`` — judged on the ratio as shown."""
    span = f" ({low:.3f}–{high:.3f})" if rounds > 1 else ""
    return f"**{ratio:.3f}×**{span}: {'met' if round(ratio, 3) >= target else 'not met'}"


def ratio_table(header: list[str], results: list[dict], leading, target: float) -> str:
    """A markdown table: the ``leading`` cells of each result, the tokens/s of the two sides of its
    median round (pairs of step times, first and second) and the second's time over the first's."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        first, second, ratio, low, high = median_round(result["rounds"])
        cells = [*leading(result), f"{result['tokens'] / first:,.0f}", f"{result['tokens'] / second:,.0f}",
                 ratio_cell(ratio, low, high, len(result["rounds"]), target)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_a(results: list[dict]) -> str:
    """tokens/s now and before (the median round), now / before: pairs are (now, before) step times,
    so before / now is tokens/s now over tokens/s before."""
    return ratio_table(["setting", "`lm train` now, transformers llama (tokens/s)",
                        "`lm train` before, DecoderLM (tokens/s)", f"(a) now / before, target ≥ {TARGET_A}×"],
                       results, lambda result: [result["label"]], TARGET_A)


def table_b(results: list[dict]) -> str:
    """tokens/s of the trainer and of the plain loop (the median round), loop time / trainer time."""
    return ratio_table(["setting", "family", "`lm train` (tokens/s)", "plain loop (tokens/s)",
                        f"(b) loop step / trainer step, target ≥ {TARGET_B}×"],
                       results, lambda result: [result["label"], result["family"]], TARGET_B)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after step 0")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds; (a) needs several: its two sides run one after the other")
    parser.add_argument("--before", type=Path, default=None,
                        help=f"a checkout of {BEFORE_COMMIT} (made with git worktree, and removed after, when missing)")
    parser.add_argument("--quick", action="store_true", help="a tiny model, one round of a few steps (smoke test)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    sys.path.insert(0, str(ROOT / "src"))  # (b) runs this checkout's trainer in this process
    import torch
    import transformers

    settings = SETTINGS
    if args.quick:
        settings, args.warmup, args.steps, args.rounds = QUICK, 1, 2, 1
    started, load = time.perf_counter(), os.getloadavg()[0]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, transformers "
          f"{transformers.__version__}; float32, CPU; {args.rounds} rounds of {args.steps} timed steps after "
          f"{args.warmup} warm-up steps; load average before {load:.2f}\n")
    with before_checkout(args.before) as before_src:
        found_a = measure_a(settings, before_src, args.warmup, args.steps, args.rounds)
    models = "; ".join(f"{side}: {name}, {count:,} parameters"
                       for side, (name, count) in found_a[-1]["models"].items())
    print(f"(a) `lm train` now against `lm train` before ({BEFORE_COMMIT}, {before_src.parent}), two subprocesses "
          f"in alternating order per round; tokens/s now over before (largest setting's models: {models})\n")
    print(table_a(found_a), flush=True)
    found_b = measure_b(settings, args.warmup, args.steps, args.rounds)
    print("\n(b) `lm train`'s step against a plain Hugging Face loop over the same model (the trainer's "
          "initial weights), alternating step by step in the trainer's hook; the loop's step time over "
          "the trainer's\n")
    print(table_b(found_b))
    print(f"\nthreads: {torch.get_num_threads()} (the trainer's); {time.perf_counter() - started:.0f} s; "
          f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
