"""One rank of the exit test (test_reliability_exit.py): a tiny GPT-NeoX sharded by FSDP2 over two
gloo processes, one staircase measurement (with the path measures, in place, unless ``PATHS=0``),
then ``destroy_process_group()`` and exit — the end of a monitored job."""

import os

import torch
import torch.distributed as dist
from family_models import family_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ctxstair.monitor import StaircaseMonitor

VOCAB = 51


def main() -> None:
    dist.init_process_group("gloo")
    model = family_model("gpt_neox", dtype=torch.float32, vocab_size=VOCAB)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.gpt_neox.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    windows = torch.randint(0, VOCAB, (64, 16), generator=torch.Generator().manual_seed(0))
    monitor = StaircaseMonitor(windows, [40, 0, 25, 26, 3, 50, 27, 11, 33], vocab_size=VOCAB, probe=False,
                               attention_windows=8, path_windows=2, paths=os.environ.get("PATHS", "1") == "1")
    values = monitor.measure(model)
    assert (dist.get_rank() == 0) == bool(values)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
