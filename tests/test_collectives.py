"""What the library's collectives do before their tensors are dropped, and how a job ends its process
group (``ctxstair.collectives``), in a one-process gloo group. That a two-process job then exits
cleanly, fifty times, is tests/reliability/test_reliability_exit.py (`make stress`)."""

import weakref

import torch
import torch.distributed as dist

from ctxstair.collectives import end_process_group, let_go


def test_after_let_go_the_caller_holds_the_last_reference_of_a_collectives_tensor(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        total = torch.arange(4.0)
        dist.all_reduce(total)
        let_go(total)
        assert total._use_count() == 1 and torch.equal(total, torch.arange(4.0))
    finally:
        end_process_group()


def test_ending_the_group_frees_what_holds_it_in_reference_cycles(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        model(torch.ones(2, 4)).sum().backward()
        model.holder = {"model": model}  # a cycle, as a training loop's objects can make one
        alive = weakref.ref(model)
        del model
        assert alive() is not None
    finally:
        end_process_group()
    assert alive() is None and not dist.is_initialized()
