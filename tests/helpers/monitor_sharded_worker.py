"""One process of the sharded monitor runs of tests/monitor/test_sharded.py (started by torchrun).

For each wrapper named on the command line (``fsdp2``, ``fsdp1``, ``zero3``: DeepSpeed ZeRO-3 with
every parameter partitioned, however small) and each model (a Llama and a GPT-NeoX, Pythia's
architecture, each measured through its own view): the monitor's numbers of the
sharded model, measured on every rank, next to those of the same model whole (each rank measures its
own unsharded copy); and the final weights of a few AdamW steps with and without measuring between
the steps. Every rank writes ``<wrapper>.rank<r>.json``: what its own ``measure`` returned, the
reference numbers, the parts ``measure`` timed, how many parameter entries it holds, whether the
trained weights are bitwise equal. ``CTXSTAIR_TEST_DEVICE=cuda`` runs on the GPU over NCCL."""

import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from family_models import family_model

from ctxstair.models import next_token_loss
from ctxstair.monitor import StaircaseMonitor

#: V = 51 is odd, so the two shards of the embedding differ in size (26 and 25 rows).
VOCAB = 51
#: Tracked tokens on both sides of the shard boundary at row 26, out of order.
TOKENS = [40, 0, 25, 26, 3, 50, 27, 11, 33]
STEPS = 3


def layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return list(model.gpt_neox.layers if model.config.model_type == "gpt_neox" else model.model.layers)


#: The models measured sharded and whole, and trained.
MODELS = {family: lambda family=family: family_model(family, dtype=torch.float32, vocab_size=VOCAB)
          for family in ("llama", "gpt_neox")}


def wrap(model: torch.nn.Module, how: str, device: torch.device) -> torch.nn.Module:
    """``model`` sharded over the world: FSDP2 per layer and the root, FSDP1 with each layer wrapped, or
    a DeepSpeed ZeRO-3 engine (its AdamW, lr 1e-2)."""
    model = model.to(device)
    if how == "zero3":
        import deepspeed

        config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}}}
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        return engine
    if how == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for layer in layers(model):
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    layer_type = type(layers(model)[0])
    return FullyShardedDataParallel(model, device_id=device, auto_wrap_policy=ModuleWrapPolicy({layer_type}))


def full_weights(model: torch.nn.Module, how: str) -> dict[str, torch.Tensor]:
    """Every parameter whole on the CPU (a collective)."""
    if how == "fsdp2":
        return {name: p.full_tensor().cpu() for name, p in model.named_parameters()}
    if how == "zero3":
        import deepspeed

        parameters = dict(model.module.named_parameters())
        with deepspeed.zero.GatheredParameters(list(parameters.values()), modifier_rank=None):
            return {name: p.detach().cpu().clone() for name, p in parameters.items()}
    from torch.distributed.fsdp import FullyShardedDataParallel

    with FullyShardedDataParallel.summon_full_params(model, writeback=False):
        return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}


def local_numel(model: torch.nn.Module, how: str) -> int:
    """How many parameter entries this rank holds: about a world's share of the model when sharded."""
    if how == "fsdp2":
        return sum(p.to_local().numel() for p in model.parameters())
    if how == "zero3":
        return sum(p.ds_tensor.numel() for p in model.module.parameters())  # this rank's partition
    return sum(p.numel() for p in model.parameters())  # FSDP1's flat parameters hold this rank's shard


def train(model: torch.nn.Module, how: str, device: torch.device, batches: torch.Tensor,
          monitor: StaircaseMonitor | None) -> dict[str, torch.Tensor]:
    """``STEPS`` AdamW steps of the sharded ``model``; with a monitor, a full measurement after each."""
    net = wrap(model, how, device)
    optimizer = None if how == "zero3" else torch.optim.AdamW(net.parameters(), lr=1e-2)
    for batch in batches:
        batch = batch.to(device)
        loss = next_token_loss(net(input_ids=batch).logits, batch)
        if optimizer is None:  # the engine zeroes the gradients after its step
            net.backward(loss)
            net.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if monitor is not None:
            monitor.measure(net)
    return full_weights(net, how)


def host_memory_of_a_measurement(monitor: StaircaseMonitor, device: torch.device) -> dict:
    """How much this process's peak resident memory grows while the monitor measures every part of a
    GPT-NeoX of 16 layers of width 384 (113 MB of float32 weights) sharded by FSDP2, next to one full
    copy of its weights; and whether every parameter is a shard again afterwards.

    The second measurement is the one counted (the first imports and allocates what any measurement
    needs once). glibc's malloc is told to return every freed block of 128 KiB or more to the system
    at once (``M_MMAP_THRESHOLD``; by default the threshold rises with the blocks freed, and a freed
    block kept in the heap would still count as resident), so the peak counts what was held at once."""
    import ctypes

    from torch.distributed.tensor import DTensor
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    M_MMAP_THRESHOLD = -3
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=384, num_hidden_layers=16, num_attention_heads=6,
                           intermediate_size=1536, max_position_embeddings=64)
    whole = GPTNeoXForCausalLM(config)
    full_bytes = sum(p.numel() * p.element_size() for p in whole.parameters())
    net = wrap(whole, "fsdp2", device)
    monitor.measure(net)
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident size (VmHWM) starts again from now
    before = resident_kib("VmRSS")
    values = monitor.measure(net)
    growth = (resident_kib("VmHWM") - before) * 1024
    return {"peak_growth_bytes": growth, "full_bytes": full_bytes,
            "path_keys": sum(k.startswith("path_share/") for k in values),
            "all_shards_after": all(isinstance(p, DTensor) for p in net.parameters())}


def resident_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS: resident now; VmHWM: the peak since the last reset)."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1])


def main() -> None:
    out, wrappers = Path(sys.argv[1]), sys.argv[2:]
    on_cuda = os.environ.get("CTXSTAIR_TEST_DEVICE") == "cuda"
    if on_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_cuda else "gloo")
    device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
    rank = dist.get_rank()
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(0, VOCAB, (64, 16), generator=generator)
    batches = torch.randint(0, VOCAB, (STEPS, 4, 16), generator=generator)
    monitor = StaircaseMonitor(windows, TOKENS, vocab_size=VOCAB, probe=False, attention_windows=8, path_windows=2)
    for how in wrappers:
        record = {"world_size": dist.get_world_size(), "models": {}}
        for name, build in MODELS.items():
            whole = build()
            reference = monitor.measure(whole)
            net = wrap(copy.deepcopy(whole), how, device)
            sharded = monitor.measure(net)
            record["models"][name] = {"reference": reference, "sharded": sharded, "skipped": monitor.skipped,
                                      "seconds": sorted(monitor.seconds), "local_numel": local_numel(net, how),
                                      "full_numel": sum(p.numel() for p in whole.parameters())}
        record["trained"] = {}
        for name in MODELS:  # measured through a copy and, under FSDP2, in place
            plain = train(MODELS[name](), how, device, batches, None)
            measured = train(MODELS[name](), how, device, batches, monitor)
            initial = dict(MODELS[name]().named_parameters())
            equal = plain.keys() == measured.keys() and all(torch.equal(plain[k], measured[k]) for k in plain)
            record["trained"][name] = {"bitwise_equal": equal,
                                       "changed": any(not torch.equal(plain[k], initial[k].detach()) for k in plain)}
        if how == "fsdp2" and not on_cuda:
            record["memory"] = host_memory_of_a_measurement(monitor, device)
        (out / f"{how}.rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
