"""One rank of a two-process FSDP2 job (gloo, CPU), started by tests/test_monitor_sharded.py: a
small DecoderLM sharded with ``fully_shard`` per layer and at the root; the monitor measures it on
every rank, then trains a few steps measuring between them, beside a copy trained without the
monitor. Rank 0 writes what it saw (argv[1], JSON) for the test to judge."""

import json
import os
import sys

import torch
import torch.distributed as dist

from ctxstair.lm import sharding
from ctxstair.models import DecoderLM
from ctxstair.models.decoder import DecoderConfig, next_token_loss
from ctxstair.monitor import StaircaseMonitor


def build() -> DecoderLM:
    return DecoderLM(DecoderConfig(vocab_size=301, d_model=16, n_layers=2, n_heads=2, head_dim=8, d_mlp=32,
                                   max_seq_len=16, seed=3))


def train(model: DecoderLM, windows: torch.Tensor, monitor: StaircaseMonitor | None) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(4):
        batch = windows[8 * step: 8 * step + 8][rank::world]
        optimizer.zero_grad()
        next_token_loss(model(batch), batch).backward()
        optimizer.step()
        if monitor is not None:
            monitor.measure(model)


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 301, (64, 16), generator=generator)
    tokens = torch.arange(20, 60)
    monitor = StaircaseMonitor(windows, tokens, vocab_size=301, probe=True, paths=True)
    reference = monitor.measure(build())
    sharded = sharding.shard(build(), torch.device("cpu"))
    measured = monitor.measure(sharded)
    with_monitor, without = sharding.shard(build(), torch.device("cpu")), sharding.shard(build(), torch.device("cpu"))
    train(with_monitor, windows, monitor)
    train(without, windows, None)
    a, b = sharding.full_state(with_monitor), sharding.full_state(without)
    if dist.get_rank() == 0:
        result = {"reference": reference, "sharded": measured,
                  "weights_equal": all(torch.equal(a[name], b[name]) for name in a),
                  "local_rows": sharded.W_E.to_local().shape[0], "pid": os.getpid()}
        with open(out, "w") as file:
            json.dump(result, file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
