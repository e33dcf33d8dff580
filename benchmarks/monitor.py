"""What `ctxstair.monitor` adds to the wall time of a Hugging Face `Trainer` run, at its default cadence.

    python benchmarks/monitor.py       # about 5 min on 2 busy cores; prints a Markdown table

The run of ``examples/trainer_staircase.py``, smaller: a ``LlamaForCausalLM`` drawn by γ-init
(d = 64, 2 layers, 4 heads of 16, MLP 256; γ = 1 for the embeddings, 1.5 for the blocks) trained
by ``Trainer`` on Shakespeare (``ctxstair data fetch shakespeare``; a byte-level BPE of 2,000 tokens,
the first 1 M tokens in windows of 128), batch 16, AdamW 3e-3, ``STEPS`` = 150 steps, logging every
50, a checkpoint at the end. The monitor: 2,000 of the windows, the 200 most frequent word-like
tokens, the default cadence (ρ_next at 24 log-spaced steps up to 250 and every 250; attention paths
and path shares every 1,000 steps and at the last; no probe) — over 150 steps that is the densest
stretch of the cadence: 19 measurements, the path measures once; a longer run adds one ρ_next per
250 steps and one path measurement per 1,000. After an untimed warm-up run, the same steps run
without and with the callback, alternating, ``ROUNDS`` times, so that the machine's changing load
falls on both. Per run: the wall time and the process's CPU time of ``trainer.train()``, and the
time spent inside the monitor (``staircase/seconds``). The callback works synchronously — training
waits while it measures — so what it adds to a run is that time (and the Trainer's log calls at the
cadence's steps, microseconds each); the headline is that time over the rest of the same run
(median over the rounds), which the changing load of other jobs does not move. The wall-time ratio
of the paired runs is printed too: on a shared 2-core machine identical runs differ by tens of
percent, so it cannot resolve a few percent there. Building the monitor (the signatures, once
before training) is timed on its own.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

STEPS = 150
ROUNDS = 3
#: Steps of an untimed first run: the first Trainer run of a process pays for lazy set-up and fresh memory.
WARMUP_STEPS = 20
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trainer_staircase.py"
SETTINGS = ["--vocab-size", "2000", "--window", "128", "--max-tokens", "1000000", "--d-model", "64",
            "--n-layers", "2", "--steps", str(STEPS), "--batch-size", "16", "--logging-steps", "50",
            "--save-steps", str(10 * STEPS), "--report-to", "none"]


def _example():
    spec = importlib.util.spec_from_file_location("trainer_staircase", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(module, args, tokenizer, windows, monitored: bool) -> dict:
    """One run: wall and CPU seconds of ``trainer.train()``, seconds to build the Trainer (and the
    monitor), and the seconds and count of the measurements (0 without the monitor)."""
    from transformers.trainer_callback import PrinterCallback

    start = time.perf_counter()
    trainer, callback = module.build_trainer(args, tokenizer, windows, monitored=monitored)
    build = time.perf_counter() - start
    trainer.remove_callback(PrinterCallback)  # its prints are not part of anyone's training
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    seconds = [row["staircase/seconds"] for row in callback.history] if callback else []
    return {"wall": wall, "cpu": cpu, "build": build, "inside": sum(seconds), "measurements": len(seconds)}


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    module = _example()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; CPU; load average before: {os.getloadavg()[0]:.1f}\n")
    tokenizer, windows = module.corpus_windows(module.load_text("shakespeare"), 2000, 128, 1_000_000)
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        warmup = module.parser().parse_args([*SETTINGS, "--out", str(Path(tmp) / "warmup"),
                                             "--steps", str(WARMUP_STEPS)])
        _train(module, warmup, tokenizer, windows, monitored=True)
        args = module.parser().parse_args([*SETTINGS, "--out", str(Path(tmp) / "run")])
        for _ in range(ROUNDS):
            pairs.append((_train(module, args, tokenizer, windows, monitored=False),
                          _train(module, args, tokenizer, windows, monitored=True)))
    print(f"{STEPS} steps of a d = 64, 2-layer Llama (batch 16 × 128 tokens) on Shakespeare, "
          f"V = {tokenizer.vocab_size}; load average after: {os.getloadavg()[0]:.1f}\n")
    print("| round | wall without (s) | wall with (s) | with / without | CPU without (s) | CPU with (s) | "
          "with / without | measurements | inside the monitor (s) | monitor set-up (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, (plain, monitored) in enumerate(pairs, 1):
        print(f"| {i} | {plain['wall']:.1f} | {monitored['wall']:.1f} | {monitored['wall'] / plain['wall']:.3f} | "
              f"{plain['cpu']:.1f} | {monitored['cpu']:.1f} | {monitored['cpu'] / plain['cpu']:.3f} | "
              f"{monitored['measurements']} | {monitored['inside']:.2f} | {monitored['build'] - plain['build']:.2f} |")

    def total(key: str, side: int) -> float:
        return sum(pair[side][key] for pair in pairs)

    wall, cpu = total("wall", 1) / total("wall", 0), total("cpu", 1) / total("cpu", 0)
    # What the callback adds, measured inside each monitored run: its time over the rest of that run,
    # so the load of other jobs, which moves identical runs by tens of percent here, cancels.
    overhead = statistics.median(m["inside"] / (m["wall"] - m["inside"]) for _, m in pairs)
    per_round = ", ".join(f"{100 * (with_['wall'] / plain['wall'] - 1):+.1f} %" for plain, with_ in pairs)
    print(f"\nmonitor overhead: {100 * overhead:.1f} % of training (target at most 5 %: "
          f"{'met' if overhead <= 0.05 else 'not met'}; time inside the callback over the rest of the same run, "
          f"median of {ROUNDS}); wall time with / without: {100 * (wall - 1):+.1f} % (per round {per_round}); "
          f"CPU time {100 * (cpu - 1):+.1f} %; median step without "
          f"{1000 * statistics.median(p['wall'] for p, _ in pairs) / STEPS:.0f} ms")

if __name__ == "__main__":
    main()
