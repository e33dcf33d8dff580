"""What `ctxstair.monitor` adds to the wall time of a Hugging Face `Trainer` run, at its default cadence.

    python benchmarks/monitor.py       # about 2 min on 2 quiet cores; prints a Markdown table

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
time spent inside the monitor (``staircase/seconds``). The headline is the wall time with the
monitor over the wall time without, median of the rounds' ratios: it counts everything the
monitor costs, also outside its own calls — numpy's BLAS threads that kept spinning after a
measurement once made the next training step twice as slow, a cost the time inside the callback
does not see. The time inside the callback over the rest of the run is printed next to it. On a
machine shared with other jobs identical runs differ by tens of percent, so the wall-time ratio
means something only on a quiet machine: the load average is printed before and after. Building
the monitor (the signatures, once before training) is timed on its own.
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
ROUNDS = 5
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
    monitor), the seconds and count of the measurements (0 without the monitor), and the median
    duration of the training steps right after a step of the cadence over that of the other steps
    (measured or not, the same steps), which shows a cost the measurements leave behind them."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from ctxstair.monitor import Cadence

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)

    start = time.perf_counter()
    trainer, callback = module.build_trainer(args, tokenizer, windows, monitored=monitored)
    build = time.perf_counter() - start
    trainer.remove_callback(PrinterCallback)  # its prints are not part of anyone's training
    timer = StepTimer()
    trainer.callback_handler.callbacks.insert(0, timer)  # its on_step_end comes before the measurement
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    seconds = [row["staircase/seconds"] for row in callback.history] if callback else []
    cadence = set(Cadence(args.steps).steps)  # step s lasted timer.seconds[s - 1]
    after = [t for s, t in enumerate(timer.seconds, 1) if s - 1 in cadence and s > 1]
    others = [t for s, t in enumerate(timer.seconds, 1) if s - 1 not in cadence and s not in cadence]
    return {"wall": wall, "cpu": cpu, "build": build, "inside": sum(seconds), "measurements": len(seconds),
            "after": statistics.median(after) / statistics.median(others)}


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
          "with / without | measurements | inside the monitor (s) | monitor set-up (s) | "
          "step after a cadence step / other steps, without | with |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (plain, monitored) in enumerate(pairs, 1):
        print(f"| {i} | {plain['wall']:.1f} | {monitored['wall']:.1f} | {monitored['wall'] / plain['wall']:.3f} | "
              f"{plain['cpu']:.1f} | {monitored['cpu']:.1f} | {monitored['cpu'] / plain['cpu']:.3f} | "
              f"{monitored['measurements']} | {monitored['inside']:.2f} | {monitored['build'] - plain['build']:.2f} | "
              f"{plain['after']:.2f} | {monitored['after']:.2f} |")

    def total(key: str, side: int) -> float:
        return sum(pair[side][key] for pair in pairs)

    wall, cpu = total("wall", 1) / total("wall", 0), total("cpu", 1) / total("cpu", 0)
    ratio = statistics.median(with_["wall"] / plain["wall"] for plain, with_ in pairs)
    inside = statistics.median(m["inside"] / (m["wall"] - m["inside"]) for _, m in pairs)
    per_round = ", ".join(f"{100 * (with_['wall'] / plain['wall'] - 1):+.1f} %" for plain, with_ in pairs)
    after = statistics.median(m["after"] for _, m in pairs)
    print(f"\nmonitor overhead: {100 * (ratio - 1):+.1f} % wall time (target at most 5 %: "
          f"{'met' if ratio <= 1.05 else 'not met'}; median over {ROUNDS} rounds of with / without: {per_round}); "
          f"all rounds together: wall {100 * (wall - 1):+.1f} %, CPU {100 * (cpu - 1):+.1f} %; "
          f"time inside the callback {100 * inside:.1f} % of the rest of the run; the training step right "
          f"after a measurement took {after:.2f}× the other steps (median); median run without "
          f"{1000 * statistics.median(p['wall'] for p, _ in pairs) / STEPS:.0f} ms per step")

if __name__ == "__main__":
    main()
