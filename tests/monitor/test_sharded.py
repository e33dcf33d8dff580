"""The staircase monitor inside sharded training: FSDP2 (``fully_shard``), FSDP1
(``FullyShardedDataParallel``) and DeepSpeed ZeRO-3 in a two-process gloo job on the CPU
(tests/helpers/monitor_sharded_worker.py); which parameters ZeRO-3 is asked to gather, through a stand-in of
``deepspeed.zero.GatheredParameters`` that records its calls; and the two callbacks in sharded runs
that the CPU allows — a Hugging Face Trainer under DeepSpeed ZeRO-3 and Lightning's FSDP2
(``ModelParallelStrategy``) — (tests/helpers/monitor_callback_worker.py; the Trainer's FSDP and Lightning's
FSDPStrategy need a GPU and run with ``CTXSTAIR_TEST_DEVICE=cuda``). Every rank calls ``measure``;
rank 0 gets numbers equal to the unsharded model's, the other rank ``{}``; measuring between
optimizer steps leaves the trained weights bit for bit as without it. With
``CTXSTAIR_TEST_DEVICE=cuda`` the same runs go to the GPU, in a one-process NCCL group
(benchmarks/device_check.sh)."""

import contextlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from family_models import family_model
from repo_paths import HELPERS, SRC

from ctxstair.monitor import StaircaseMonitor

ON_CUDA = os.environ.get("CTXSTAIR_TEST_DEVICE") == "cuda"
WORLD = 1 if ON_CUDA else 2


def torchrun(worker: str, how: str, out: Path) -> list[dict]:
    """Each rank's record (``<how>.rank<r>.json``) of ``worker`` run for ``how`` in ``WORLD`` processes."""
    if ON_CUDA and not torch.cuda.is_available():
        pytest.skip("CTXSTAIR_TEST_DEVICE=cuda, but torch sees no CUDA device")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), str(HELPERS)])}
    if not ON_CUDA:
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU back end (it compiles a small C++ op on first use)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}", "--standalone",
                             str(HELPERS / worker), str(out), how],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"{how}.rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module", params=["fsdp2", "fsdp1", "zero3"])
def run(request, tmp_path_factory) -> dict:
    """Each rank's record of the worker for one wrapper."""
    return {"how": request.param,
            "ranks": torchrun("monitor_sharded_worker.py", request.param, tmp_path_factory.mktemp(request.param))}


@pytest.mark.extended  # two-process jobs (the module fixture)
def test_the_models_are_really_sharded(run):
    for record in run["ranks"]:
        assert record["world_size"] == WORLD
        for model in record["models"].values():
            assert model["local_numel"] <= -(-model["full_numel"] // WORLD) + 64  # a share, FSDP1's padding at most


@pytest.mark.extended
def test_rank_0_measures_what_the_unsharded_model_gives(run):
    assert set(run["ranks"][0]["models"]) == {"llama", "gpt_neox"}
    for name, model in run["ranks"][0]["models"].items():
        reference, sharded = model["reference"], model["sharded"]
        assert model["skipped"] is None, name
        assert sharded.keys() == reference.keys(), name
        assert any(k.startswith("path_share/") for k in reference) and "rho_next" in reference
        for key, value in reference.items():
            assert sharded[key] == pytest.approx(value, rel=0, abs=1e-6), (name, key)


@pytest.mark.extended
def test_the_other_ranks_take_part_and_get_nothing(run):
    for record in run["ranks"][1:]:
        assert all(model["sharded"] == {} for model in record["models"].values())


@pytest.mark.extended
def test_every_rank_counts_a_share_of_the_attention_paths_where_it_holds_the_network(run):
    # FSDP2 and ZeRO-3 gather the whole network onto every rank, so each counts its share of the
    # windows; FSDP1's full state dict goes to rank 0 alone, which counts them all.
    for record in run["ranks"]:
        for model in record["models"].values():
            assert ("paths" in model["seconds"]) == (run["how"] != "fsdp1" or record is run["ranks"][0])


@pytest.mark.extended
def test_measuring_between_steps_leaves_the_trained_weights_bitwise_equal(run):
    for record in run["ranks"]:
        assert set(record["trained"]) == {"llama", "gpt_neox"}
        for trained in record["trained"].values():
            assert trained["changed"] is True  # the steps trained something
            assert trained["bitwise_equal"] is True


@pytest.mark.extended
@pytest.mark.skipif(ON_CUDA, reason="host memory is measured in the two-process CPU job")
def test_fsdp2_is_measured_in_place_within_less_host_memory_than_one_copy_of_the_weights(run):
    if run["how"] != "fsdp2":
        pytest.skip("the in-place measurement is FSDP2's")
    memory = run["ranks"][0]["memory"]
    assert memory["path_keys"] == 33  # embed, attn.ℓ and mlp.ℓ of 16 layers: the paths were measured
    assert memory["peak_growth_bytes"] < memory["full_bytes"], memory
    for record in run["ranks"]:
        assert record["memory"]["all_shards_after"] is True


class StandInZero3:
    """A stand-in for ``deepspeed``: ``zero.GatheredParameters`` fills the size-0 placeholders of the
    parameters it is given from the whole tensors kept aside, and empties them again on exit, as
    ZeRO-3 does; it records what it was asked to gather."""

    def __init__(self, model: torch.nn.Module):
        self.whole = {}
        for i, p in enumerate(model.parameters()):
            p.ds_id = i
            self.whole[i] = p.data.clone()
            p.data = torch.empty(0, dtype=p.dtype)
        self.calls: list[tuple[list[int], object]] = []
        self.module = types.SimpleNamespace(zero=types.SimpleNamespace(GatheredParameters=self.gathered))

    @contextlib.contextmanager
    def gathered(self, params, modifier_rank=-1):
        params = list(params)
        self.calls.append(([p.ds_id for p in params], modifier_rank))
        for p in params:
            p.data = self.whole[p.ds_id]
        try:
            yield
        finally:
            for p in params:
                p.data = torch.empty(0, dtype=p.dtype)


@pytest.mark.skipif(ON_CUDA, reason="the ZeRO-3 stand-in runs on the CPU only")
def test_zero3_parameters_are_read_inside_gathered_parameters(monkeypatch):
    model = family_model("llama", seed=1, dtype=torch.float32, vocab_size=40)
    windows = torch.randint(0, 40, (32, 16), generator=torch.Generator().manual_seed(0))
    monitor = StaircaseMonitor(windows, [3, 9, 1, 30, 17, 22], vocab_size=40, probe=False, attention_windows=4,
                               path_windows=1)
    reference = monitor.measure(model)
    standin = StandInZero3(model)
    monkeypatch.setitem(sys.modules, "deepspeed", standin.module)
    embedding_only = monitor.measure(model, paths=False)
    assert standin.calls[0] == ([0], None)  # W_E alone, read-only
    everything = monitor.measure(model)
    assert all(modifier is None for _, modifier in standin.calls)
    gathered = sorted(i for ids, _ in standin.calls[1:] for i in ids)
    assert gathered[-len(standin.whole):] == sorted(standin.whole)  # every parameter, for the paths
    assert all(p.numel() == 0 for p in model.parameters())  # placeholders again afterwards
    for key in ("rho_next", "rho_next_spearman"):
        assert embedding_only[key] == reference[key]
    assert everything.keys() == reference.keys()
    np.testing.assert_array_equal([everything[k] for k in reference], [reference[k] for k in reference])


CALLBACK_RUNS = ["trainer-zero3", "lightning-fsdp2"] + (["trainer-fsdp1", "trainer-fsdp2", "lightning-fsdp1"]
                                                       if ON_CUDA else [])


@pytest.mark.extended  # two-process jobs
@pytest.mark.parametrize("how", CALLBACK_RUNS)
def test_the_callbacks_measure_a_sharded_training_on_every_rank_and_log_on_rank_0(how, tmp_path):
    ranks = torchrun("monitor_callback_worker.py", how, tmp_path)
    for record in ranks:
        assert record["world_size"] == WORLD
        assert record["held"] <= -(-record["full"] // WORLD) + 64  # really sharded
        assert record["weights_changed"] is True
        assert record["weights_bitwise_equal"] is True  # the callback changed nothing in the training
    assert ranks[0]["measured_steps"] == [1, 2, 4]  # the cadence: log-spaced, every 2, and the last step
    assert all(record["measured_steps"] == [] for record in ranks[1:])
    # The last measurement is taken after the last optimizer step: the numbers of the final weights.
    last, final = ranks[0]["last"], ranks[0]["final_whole"]
    assert {key.removeprefix("staircase/") for key in last} - {"seconds", "step"} == final.keys()
    assert any(key.startswith("path_share/") for key in final)
    for key, value in final.items():
        assert last["staircase/" + key] == pytest.approx(value, rel=0, abs=1e-6), key
