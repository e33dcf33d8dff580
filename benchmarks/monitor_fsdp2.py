"""What the staircase monitor adds to the wall time of FSDP2 training, at its default cadence.

    python -m torch.distributed.run --nproc_per_node=2 --standalone benchmarks/monitor_fsdp2.py [--steps N] [--rounds R]

Two gloo processes on the CPU train a ``transformers`` Llama as ``lm train`` builds it (γ = 1 for every
role; d 64, 2 layers, 4 heads of 16, MLP 256, V = 2,000; :mod:`ctxstair.models.causal_lm`) sharded
by FSDP2 (:func:`ctxstair.lm.fsdp.shard`: each layer, then the root), AdamW 3e-3, batch 16 windows of
128 tokens (8 per rank), ``--steps`` (default 150) steps, on windows of random ids. The monitor (200 tokens,
2,000 windows, no probe) measures at its default cadence (:class:`~ctxstair.monitor.staircase.Cadence`:
ρ_next at 19 of the first 150 steps and one per 250 after, the path measures every 1,000 steps and at the
last) on every rank, as FSDP2 requires. After an untimed warm-up run, runs without and with the monitor
alternate ``--rounds`` (default 5) times (the same seed, so the same steps); the headline is the median over
rounds of wall time with over wall time without, as in ``benchmarks/monitor.py``, next to the seconds rank 0
spent inside the monitor (ρ_next at every measurement, the path measures with the gather of the whole
network at the last step). The last column, rank 0's seconds inside over the wall time without, is what the
monitor must cost while the other ranks wait for rank 0 to measure. Rank 0 prints a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ctxstair.lm import fsdp  # noqa: E402
from ctxstair.models import causal_lm  # noqa: E402
from ctxstair.models.loss import next_token_loss  # noqa: E402
from ctxstair.monitor import StaircaseMonitor  # noqa: E402
from ctxstair.monitor.staircase import Cadence  # noqa: E402

VOCAB, WINDOW, BATCH = 2000, 128, 16
SIZES = {"d_model": 64, "n_layers": 2, "n_heads": 4, "head_dim": 16, "d_mlp": 256}


def run(windows: torch.Tensor, monitor: StaircaseMonitor | None, steps: int,
        inside: collections.Counter | None = None) -> float:
    """Seconds of ``steps`` FSDP2 training steps (the ranks synchronised at both ends); ``inside``
    adds up this rank's seconds within the monitor per part (``monitor.seconds``)."""
    config = causal_lm.family_config("llama", VOCAB, WINDOW, SIZES)
    model = causal_lm.build(config, dict.fromkeys(causal_lm.ROLES, 1.0), seed=0)
    model = fsdp.shard(model, torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    cadence, rank, world = Cadence(steps), dist.get_rank(), dist.get_world_size()
    order = torch.Generator().manual_seed(1)
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        batch = windows[torch.randint(len(windows), (BATCH,), generator=order)][rank::world]
        optimizer.zero_grad()
        next_token_loss(model(input_ids=batch).logits, batch).backward()
        optimizer.step()
        if monitor is not None and monitor.measure_at(model, step + 1, cadence) is not None and inside is not None:
            inside.update(monitor.seconds)
    dist.barrier()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="paired runs without and with the monitor")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    windows = torch.randint(0, VOCAB, (4000, WINDOW), generator=torch.Generator().manual_seed(0))
    monitor = StaircaseMonitor(windows[:2000], torch.arange(100, 300), vocab_size=VOCAB, probe=False)
    run(windows, monitor, steps=20)  # warm-up: lazy set-up and first allocations
    if dist.get_rank() == 0:
        print(f"{args.steps} steps; load average before {os.getloadavg()[0]:.2f}")
        print("| round | wall without (s) | wall with (s) | with / without | rank 0 inside ρ_next (s) | "
              "rank 0 inside the paths (s) | inside / wall without |")
        print("|---|---|---|---|---|---|---|")
    ratios = []
    for round_ in range(1, args.rounds + 1):
        inside = collections.Counter()
        plain = run(windows, None, args.steps)
        monitored = run(windows, monitor, args.steps, inside=inside)
        ratios.append(monitored / plain)
        if dist.get_rank() == 0:
            print(f"| {round_} | {plain:.2f} | {monitored:.2f} | {ratios[-1]:.3f} | {inside['embeddings']:.3f} | "
                  f"{inside['paths']:.3f} | {sum(inside.values()) / plain:.3f} |")
    if dist.get_rank() == 0:
        print(f"median with / without {statistics.median(ratios):.3f} (range {min(ratios):.3f}–{max(ratios):.3f}); "
              f"load average after {os.getloadavg()[0]:.2f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
