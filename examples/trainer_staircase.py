"""The Context Staircase measured live inside a Hugging Face ``Trainer`` run (SPEC §7, docs/monitor.md).

A small ``LlamaForCausalLM`` drawn by ctxstair's γ-initialization (SPEC §4: every matrix
N(0, d_in^{-2γ}); γ = 1 for the embeddings, 1.5 for the blocks — the setting of SPEC §11 under
which ρ_next rises, peaks and decays on Shakespeare) is trained by ``transformers.Trainer`` on
Shakespeare with a byte-level BPE; a :class:`~ctxstair.monitor.StaircaseMonitor` attached to the
Trainer logs ``staircase/rho_next`` (and the attention paths and path shares) into the Trainer's
``log_history`` and TensorBoard as it trains.

    ctxstair data fetch shakespeare                      # once
    python examples/trainer_staircase.py --out runs/trainer-shakespeare       # ≈ 15 min on 2 CPU cores
    tensorboard --logdir runs/trainer-shakespeare        # the train/staircase/* scalars
    ctxstair report runs/trainer-shakespeare             # report.html from trainer_state.json
    torchrun --nproc_per_node=2 examples/trainer_staircase.py --out runs/ddp  # data-parallel: rank 0 measures

Options shorten it (the tests run ``--corpus synthetic --steps 12`` with a tiny model).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from ctxstair.collectives import end_process_group
from ctxstair.models import causal_lm
from ctxstair.monitor import StaircaseMonitor, attach, monitor_tokens
from ctxstair.text.corpora import load_text
from ctxstair.text.tokenizer import TextTokenizer
from ctxstair.text.windows import make_windows


class WindowDataset(torch.utils.data.Dataset):
    """Token windows (n, T) as causal-LM examples: ``labels`` = ``input_ids`` (the model shifts them)."""

    def __init__(self, windows: np.ndarray):
        self.windows = torch.from_numpy(windows)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.windows[i], "labels": self.windows[i]}


def corpus_windows(text: str, vocab_size: int, window: int, max_tokens: int) -> tuple[TextTokenizer, np.ndarray]:
    """A byte-level BPE of ``vocab_size`` trained on ``text`` and its first ``max_tokens`` tokens cut into
    non-overlapping windows (n, window)."""
    tokenizer = TextTokenizer.train_bpe(text, vocab_size)
    return tokenizer, make_windows(tokenizer.encode(text, max_tokens=max_tokens), window)


def small_llama(vocab_size: int, window: int, d_model: int, n_layers: int, gamma: float, gamma_blocks: float,
                seed: int = 0):
    """A ``LlamaForCausalLM`` γ-initialised by role as ``ctxstair lm train`` draws it
    (:mod:`ctxstair.models.causal_lm`; untied, no biases; heads of 16 dimensions, MLP 4 d): the
    framework's own init would be std 0.02 everywhere."""
    sizes = {"d_model": d_model, "n_layers": n_layers, "n_heads": max(1, d_model // 16), "head_dim": min(16, d_model),
             "d_mlp": 4 * d_model}
    gammas = {"embedding": gamma, "unembedding": gamma, "qk": gamma_blocks, "ov": gamma_blocks, "mlp": gamma_blocks}
    return causal_lm.build(causal_lm.family_config("llama", vocab_size, window, sizes), gammas, seed)


def build_trainer(args: argparse.Namespace, tokenizer: TextTokenizer, windows: np.ndarray, monitored: bool = True):
    """The Trainer of this example (and, when ``monitored``, the attached callback; else None)."""
    from transformers import PreTrainedTokenizerFast, Trainer, TrainingArguments, default_data_collator

    model = small_llama(tokenizer.vocab_size, args.window, args.d_model, args.n_layers, args.gamma, args.gamma_blocks)
    training = TrainingArguments(
        output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, weight_decay=0.1, adam_beta2=0.95, warmup_steps=max(1, args.steps * 3 // 100),
        lr_scheduler_type="cosine", logging_steps=args.logging_steps, save_steps=args.save_steps,
        report_to=args.report_to, use_cpu=not torch.cuda.is_available(), seed=0, data_seed=0,
        dataloader_drop_last=True, disable_tqdm=True, ddp_find_unused_parameters=False)
    # The tokenizer goes into every checkpoint (for `ctxstair analyze-model`); windows need no padding.
    trainer = Trainer(model=model, args=training, train_dataset=WindowDataset(windows),
                      data_collator=default_data_collator,
                      processing_class=PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer))
    if not monitored:
        return trainer, None
    # A fixed sample of the training windows, in corpus order (all of them when there are fewer, as
    # `ctxstair analyze-model` reads them): the signatures are counted on it once, before training.
    sample = windows[np.sort(np.random.default_rng(0).permutation(len(windows))[: args.monitor_windows])]
    monitor = StaircaseMonitor(sample, monitor_tokens(tokenizer, sample, k=args.k))
    return trainer, attach(trainer, monitor, log_points=args.log_points, every=args.every,
                           paths_every=args.paths_every)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/trainer-shakespeare"))
    p.add_argument("--corpus", default="shakespeare", help="a corpus name or path (ctxstair.text.corpora.load_text)")
    p.add_argument("--vocab-size", type=int, default=2000)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=2_000_000)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--gamma", type=float, default=1.0, help="γ of the embeddings (SPEC §4)")
    p.add_argument("--gamma-blocks", type=float, default=1.5, help="γ of attention and MLP matrices")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--logging-steps", type=int, default=50)
    p.add_argument("--save-steps", type=int, default=500)
    p.add_argument("--report-to", default="tensorboard")
    p.add_argument("--k", type=int, default=200, help="tokens analysed (SPEC §7: 200)")
    p.add_argument("--monitor-windows", type=int, default=2000, help="windows the signatures are counted on")
    p.add_argument("--log-points", type=int, default=24)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--paths-every", type=int, default=1000)
    return p


def end_distributed() -> None:
    """Under torchrun: wait for every rank, then close the process group. Call it once the Trainer
    is gone: a Trainer still referenced keeps its DDP wrapper, and that the gloo group, until
    interpreter exit, where freeing them can abort the process ("terminate called without an active
    exception", SIGABRT), which torchrun reports as a failed run; ``end_process_group`` also frees
    what reference cycles still hold before it destroys the group (ctxstair.collectives)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        end_process_group()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    tokenizer, windows = corpus_windows(load_text(args.corpus), args.vocab_size, args.window, args.max_tokens)
    trainer, callback = build_trainer(args, tokenizer, windows)
    trainer.train()
    if trainer.is_world_process_zero():
        tokenizer.save(args.out / "tokenizer.json")  # for `ctxstair analyze-model` on the checkpoints
        rho = [(row["step"], row["staircase/rho_next"]) for row in trainer.state.log_history
               if "staircase/rho_next" in row]
        peak = max(rho, key=lambda pair: pair[1])
        print(f"ρ_next {rho[0][1]:+.3f} (step {rho[0][0]}) → peak {peak[1]:+.3f} (step {peak[0]}) → "
              f"{rho[-1][1]:+.3f} (step {rho[-1][0]}); report: ctxstair report {args.out}")
    del trainer, callback  # the DDP wrapper goes with them (end_distributed)
    end_distributed()


if __name__ == "__main__":
    main()
