"""One process of the sharded callback runs of tests/monitor/test_sharded.py (started by torchrun:
two gloo processes on the CPU, or one process on a GPU with ``CTXSTAIR_TEST_DEVICE=cuda``): a small
Llama trained for ``STEPS`` steps by

* ``trainer-zero3``: a Hugging Face ``Trainer`` with DeepSpeed ZeRO-3 (every parameter partitioned),
  the monitor added with :func:`ctxstair.monitor.attach`;
* ``trainer-fsdp1``, ``trainer-fsdp2`` (GPU only: accelerate's FSDP plugin needs one): the Trainer
  with FSDP, each decoder layer wrapped;
* ``lightning-fsdp2``: Lightning's ``ModelParallelStrategy``, the module sharded with ``fully_shard``
  per layer and at the root, with :class:`~ctxstair.monitor.StaircaseLightningCallback`;
* ``lightning-fsdp1`` (GPU only: Lightning's ``FSDPStrategy`` needs one): each decoder layer wrapped;

once with the callback and once without, from the same weights. Each rank writes
``<how>.rank<r>.json``: the steps its callback measured, its last measurement, the monitor's numbers
for the final weights gathered whole into an unsharded copy, how many parameter entries this rank
held, and whether the two runs' final weights are bitwise equal."""

import copy
import functools
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from family_models import lm_train_model

from ctxstair.models import next_token_loss
from ctxstair.monitor import StaircaseMonitor

VOCAB, WINDOW, STEPS = 51, 16, 4
TOKENS = [40, 0, 25, 26, 3, 50, 27, 11, 33]
CADENCE = {"log_points": 2, "every": 2, "paths_every": 4}
ON_CUDA = os.environ.get("CTXSTAIR_TEST_DEVICE") == "cuda"


@functools.cache
def _first_llama():
    return lm_train_model(VOCAB, positions=WINDOW)


def llama():
    """A copy of one small Llama as ``ctxstair lm train`` builds it (γ-initialised, untied), drawn once,
    before any Trainer exists: while a Trainer's DeepSpeed ZeRO-3 config is alive, transformers builds a
    model from its config already partitioned (``deepspeed.zero.Init``), with nothing to draw into."""
    return copy.deepcopy(_first_llama())


class Windows(torch.utils.data.Dataset):
    def __init__(self, windows: torch.Tensor):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.windows[i], "labels": self.windows[i]}


def whole(module: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """The full state of an FSDP1 root or an FSDP2 module on the CPU, its keys without ``prefix``."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
    return {key[len(prefix):]: value.detach().cpu().clone() for key, value in state.items() if key.startswith(prefix)}


def held_here(module: torch.nn.Module) -> int:
    """Parameter entries this process holds (FSDP1's flat parameters are this rank's shard)."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in module.parameters())


def trainer(how: str):
    def run(windows: torch.Tensor, monitor: StaircaseMonitor | None, out: Path):
        """(final weights whole, the callback or None, entries held here) of a Trainer run."""
        from transformers import Trainer, TrainingArguments

        from ctxstair.monitor import attach

        if how == "zero3":
            sharding = {"deepspeed": {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
                                      "gradient_accumulation_steps": "auto",
                                      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}}
        else:
            wrap = {"version": int(how[-1]), "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
            sharding = {"fsdp": "full_shard auto_wrap", "fsdp_config": wrap}
        args = TrainingArguments(output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4,
                                 learning_rate=1e-2, use_cpu=not ON_CUDA, report_to="none", save_strategy="no", seed=0,
                                 data_seed=0, disable_tqdm=True, **sharding)
        model = llama()
        trainer = Trainer(model=model, args=args, train_dataset=Windows(windows))
        callback = None if monitor is None else attach(trainer, monitor, **CADENCE)
        trainer.train()
        if how != "zero3":
            return whole(trainer.model_wrapped), callback, held_here(trainer.model_wrapped)
        import deepspeed

        parameters = dict(model.named_parameters())
        held = sum(p.ds_tensor.numel() for p in parameters.values())
        with deepspeed.zero.GatheredParameters(list(parameters.values()), modifier_rank=None):
            return {name: p.detach().cpu().clone() for name, p in parameters.items()}, callback, held
    return run


def lightning(how: str):
    def run(windows: torch.Tensor, monitor: StaircaseMonitor | None, out: Path):
        """(final weights whole, the callback or None, entries held here) of a Lightning FSDP run."""
        import lightning.pytorch as pl
        from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
        from torch.distributed.fsdp import fully_shard
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer

        from ctxstair.monitor import StaircaseLightningCallback

        class Module(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.model = llama()

            def configure_model(self):
                if how == "fsdp2":
                    for layer in self.model.model.layers:
                        fully_shard(layer, mesh=self.device_mesh["data_parallel"])
                    fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

            def training_step(self, batch, batch_idx):
                return next_token_loss(self.model(input_ids=batch).logits, batch)

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-2)

        world = dist.get_world_size()
        strategy = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1) if how == "fsdp2" \
            else FSDPStrategy(auto_wrap_policy={LlamaDecoderLayer})
        callbacks = [] if monitor is None else [StaircaseLightningCallback(monitor, **CADENCE)]
        trainer = pl.Trainer(max_steps=STEPS, accelerator="cuda" if ON_CUDA else "cpu", devices=world,
                             strategy=strategy, callbacks=callbacks, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(out))
        module = Module()
        trainer.fit(module, torch.utils.data.DataLoader(windows, batch_size=4))
        root = trainer.strategy.model
        return whole(root, prefix="model."), (callbacks or [None])[0], held_here(root)
    return run


RUNS = {"trainer-zero3": trainer("zero3"), "trainer-fsdp1": trainer("fsdp1"), "trainer-fsdp2": trainer("fsdp2"),
        "lightning-fsdp1": lightning("fsdp1"), "lightning-fsdp2": lightning("fsdp2")}


def main() -> None:
    out, how = Path(sys.argv[1]), sys.argv[2]
    if ON_CUDA:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if ON_CUDA else "gloo")
    initial = llama()
    windows = torch.randint(0, VOCAB, (64, WINDOW), generator=torch.Generator().manual_seed(0))
    monitor = StaircaseMonitor(windows, TOKENS, vocab_size=VOCAB, probe=False, attention_windows=8, path_windows=2)
    run = RUNS[how]
    plain, _, _ = run(windows, None, out / "plain")
    measured, callback, held = run(windows, monitor, out / "measured")
    final = llama()
    final.load_state_dict(measured, strict=False)  # the tied output weight, if any, follows the embedding
    record = {"world_size": dist.get_world_size(), "held": held, "full": sum(p.numel() for p in initial.parameters()),
              "measured_steps": [row["step"] for row in callback.history],
              "last": callback.history[-1] if callback.history else {},
              "final_whole": monitor.measure(final),
              "weights_bitwise_equal": plain.keys() == measured.keys() and all(
                  torch.equal(plain[k], measured[k]) for k in plain),
              "weights_changed": not torch.equal(measured["model.embed_tokens.weight"],
                                                 initial.model.embed_tokens.weight)}
    (out / f"{how}.rank{dist.get_rank()}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
