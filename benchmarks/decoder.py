"""`DecoderLM` against Hugging Face's `LlamaForCausalLM` with the same weights: one training step.

    python benchmarks/decoder.py       # about 1 min on 2 cores; prints a Markdown table

Both models hold identical weights (:func:`ctxstair.models.decoder_hf.to_hf`); Llama runs with
``attn_implementation="sdpa"``. A step is what ``ctxstair lm train`` does per batch: forward,
next-token cross-entropy, backward, AdamW (lr 3e-3). Each model gets its own AdamW over its own
copy of the weights, steps alternate between the two models (so load on the machine hits both
alike), and the table gives the median of the timed steps after warm-up steps. The speed-up is
the Llama step time over ours (> 1: ours is faster). Two configurations: the LM-staircase default
(d = 64, 2 layers, V = 4,000, 32 windows × 64 tokens) and a larger one (d = 256, 4 layers,
V = 8,000, 16 × 128). The last row is ``ctxstair lm train``'s throughput at its defaults on the
synthetic corpus without analysis (tokens per second of training, from its metrics).
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ctxstair.models.decoder import DecoderConfig, DecoderLM, next_token_loss
from ctxstair.models.decoder_hf import to_hf

WARMUP, STEPS = 3, 15
#: (label, config, windows, window length)
SETTINGS = (
    ("d = 64, 2 layers, V = 4,000, 32 × 64 tokens",
     DecoderConfig(vocab_size=4000, d_model=64, n_layers=2, n_heads=4, head_dim=16, d_mlp=256, max_seq_len=64), 32, 64),
    ("d = 256, 4 layers, V = 8,000, 16 × 128 tokens",
     DecoderConfig(vocab_size=8000, d_model=256, n_layers=4, n_heads=4, head_dim=64, d_mlp=1024, max_seq_len=128),
     16, 128),
)


def step_times(cfg: DecoderConfig, n: int, T: int, *, optimize: bool = True, warmup: int = WARMUP,
               steps: int = STEPS) -> tuple[float, float, float]:
    """Median seconds per training step of ours and of Llama, and the largest logit difference at the start.

    Token windows are (n, T). Without ``optimize`` a step is gradients only (zero_grad, forward, loss,
    backward: a user's own loop before its optimizer), timed the same way."""
    ours = DecoderLM(cfg)
    llama = to_hf(ours)
    llama.set_attn_implementation("sdpa")
    tokens = torch.randint(cfg.vocab_size, (n, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gap = (ours(tokens) - llama(tokens).logits).abs().max().item()

    def step_ours():
        next_token_loss(ours(tokens), tokens).backward()

    def step_llama():
        llama(tokens, labels=tokens).loss.backward()

    runs = [(step_ours, ours, torch.optim.AdamW(ours.parameters(), lr=3e-3) if optimize else None, []),
            (step_llama, llama, torch.optim.AdamW(llama.parameters(), lr=3e-3) if optimize else None, [])]
    for i in range(warmup + steps):
        for step, model, optimizer, times in runs:
            start = time.perf_counter()
            model.zero_grad()
            step()
            if optimizer is not None:
                optimizer.step()
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return statistics.median(runs[0][3]), statistics.median(runs[1][3]), gap


def _lm_train_tokens_per_second() -> tuple[float, int]:
    """Training tokens per second of ``ctxstair lm train`` at its defaults (synthetic corpus, no analysis)."""
    from ctxstair.config.lm import LMConfig
    from ctxstair.lm.train import train_lm

    cfg = LMConfig()
    cfg.analysis.enabled = False
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train_lm(cfg, Path(tmp) / "lm")
        seconds = time.perf_counter() - start
    return cfg.train.steps * cfg.train.batch_size * cfg.corpus.window / seconds, cfg.train.steps


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; float32, CPU\n")
    print("| setting | ours (ms/step) | Llama sdpa (ms/step) | speed-up (Llama / ours) | max logit difference |")
    print("|---|---|---|---|---|")
    for label, cfg, n, T in SETTINGS:
        ours, llama, gap = step_times(cfg, n, T)
        print(f"| {label} | {ours * 1e3:.1f} | {llama * 1e3:.1f} | {llama / ours:.2f}× | {gap:.1e} |")
    rate, steps = _lm_train_tokens_per_second()
    print(f"\n`ctxstair lm train` at its defaults (synthetic corpus, {steps} steps, --no-analysis): "
          f"{rate:,.0f} training tokens/s (including start-up, checkpoints and held-out evaluation)")


if __name__ == "__main__":
    main()
