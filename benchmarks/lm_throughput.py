"""Training throughput of ``ctxstair lm train`` and of ``DecoderLM`` against Hugging Face's
``LlamaForCausalLM`` with the same weights, on the CPU, side by side.

    python benchmarks/lm_throughput.py            # a few minutes on 2 cores; prints a Markdown table
    python benchmarks/lm_throughput.py --quick    # a tiny model, seconds (smoke test)

Two ratios per setting (the settings of ``benchmarks/decoder.py``), each Llama's time over ours
(> 1: ours is faster; target ≥ 1.0× for both):

(a) ``lm train``: training tokens/s of :func:`ctxstair.lm.train.train_lm` (float32, no analysis, snapshots
    at the first and the last step only) on token shards of random ids, steps timed between the
    trainer's per-step hook calls as in ``benchmarks/lm_train_speed.py``, against a plain loop over
    ``LlamaForCausalLM`` (``attn_implementation="sdpa"``) holding the trainer's initial weights
    (``models.decoder_hf.to_hf``): ``zero_grad``, ``model(input_ids=x, labels=x).loss``, backward,
    ``torch.optim.AdamW`` with the trainer's betas (0.9, 0.95), learning rate and weight decay. The
    Llama step runs inside the hook, so the two alternate step by step and load on the machine hits
    both alike; both run in the trainer's process state (its thread count, deterministic algorithms,
    denormals flushed).
(b) forward + backward as a user's own loop calls them: ``next_token_loss(model(x), x).backward()``
    against ``llama(input_ids=x, labels=x).loss.backward()`` (``benchmarks/decoder.py``'s alternating
    timer without the optimizer), outside the trainer.

Each ratio is computed from median step times after warm-up steps, in each of ``--rounds`` rounds;
the table gives the median round and the range over rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import transformers  # noqa: E402
from decoder import SETTINGS, step_times  # noqa: E402
from lm_train_speed import word_tokenizer  # noqa: E402

from ctxstair.config import apply_overrides  # noqa: E402
from ctxstair.config.lm import LMConfig  # noqa: E402
from ctxstair.lm.train import build_model, train_lm  # noqa: E402
from ctxstair.models.decoder import DecoderConfig  # noqa: E402
from ctxstair.models.decoder_hf import to_hf  # noqa: E402

#: The smoke test's setting: (label, config, windows, window length).
QUICK = (("d = 64, 2 layers, V = 512, 4 × 32 tokens (quick)",
          DecoderConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, head_dim=16, d_mlp=256, max_seq_len=32),
          4, 32),)


def train_times(dec: DecoderConfig, n: int, T: int, warmup: int, steps: int) -> tuple[float, float]:
    """Median seconds per training step of ``train_lm`` and of the plain Llama loop, alternating (module
    docstring (a)); windows (n, T) of ``dec.vocab_size`` random ids."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        word_tokenizer(dec.vocab_size, folder / "tokenizer.json")
        (folder / "shards").mkdir()
        ids = np.random.default_rng(0).integers(0, dec.vocab_size, T * n * 64, dtype=np.int64)
        ids.astype(np.uint32).tofile(folder / "shards" / "tokens.bin")
        total = warmup + steps + 1  # step 0 holds the first snapshot: not timed
        cfg = apply_overrides(LMConfig(), {
            "corpus.shards": str(folder / "shards"), "corpus.dtype": "uint32",
            "corpus.tokenizer": str(folder / "tokenizer.json"), "corpus.window": T,
            **{f"model.{name}": getattr(dec, name) for name in ("d_model", "n_layers", "n_heads", "head_dim", "d_mlp")},
            "train.steps": total, "train.batch_size": n, "train.device": "cpu", "train.val_windows": 8,
            "snapshots.log_points": 0, "snapshots.every": total, "analysis.enabled": False})
        ours = build_model(cfg, dec.vocab_size)  # the weights train_lm starts from (checked below)
        llama = to_hf(ours)
        llama.set_attn_implementation("sdpa")
        optimizer = torch.optim.AdamW(llama.parameters(), lr=cfg.train.lr, betas=(0.9, 0.95),
                                      weight_decay=cfg.train.weight_decay)
        windows = torch.from_numpy(ids.reshape(-1, T))
        draws = torch.Generator().manual_seed(1)
        ours_start, ours_end, llama_times = {}, {}, []

        def hook(step: int) -> None:
            ours_end[step] = time.perf_counter()
            if step < total:
                x = windows[torch.randint(len(windows), (n,), generator=draws)]
                started = time.perf_counter()
                optimizer.zero_grad()
                loss = llama(input_ids=x, labels=x).loss
                loss.backward()
                optimizer.step()
                loss.item()  # the trainer reads each step's loss too
                if step > warmup:
                    llama_times.append(time.perf_counter() - started)
            ours_start[step] = time.perf_counter()

        train_lm(cfg, folder / "run", hook=hook)
        from ctxstair.run import Run

        start = Run(folder / "run").model_at(0)
        if not all(torch.equal(a, b) for a, b in zip(start.state_dict().values(), build_model(cfg, dec.vocab_size)
                                                     .state_dict().values(), strict=True)):
            raise RuntimeError("train_lm started from other weights than the Llama copy")
    # Step s runs from hook(s) returning to hook(s + 1) being called; step 0 writes the first snapshot.
    ours_times = [ours_end[s + 1] - ours_start[s] for s in range(warmup + 1, total)]
    return statistics.median(ours_times), statistics.median(llama_times)


def measure(settings, warmup: int, steps: int, rounds: int) -> list[dict]:
    """Per setting and round: seconds per step of (a) and (b) for both sides, rounds interleaved."""
    results = [{"label": label, "tokens": n * T, "a": [], "b": []} for label, _, n, T in settings]
    for _ in range(rounds):
        for result, (_, dec, n, T) in zip(results, settings, strict=True):
            result["a"].append(train_times(dec, n, T, warmup, steps))
            result["b"].append(step_times(dec, n, T, optimize=False, warmup=warmup, steps=steps)[:2])
    return results


def table(results: list[dict]) -> str:
    """The Markdown table: tokens/s of the median round per side and the ratios (median, range)."""
    lines = ["| setting | `lm train` (tokens/s) | Llama loop (tokens/s) | (a) Llama / ours, target ≥ 1.0× "
             "| DecoderLM fwd+bwd (tokens/s) | Llama fwd+bwd (tokens/s) | (b) Llama / ours, target ≥ 1.0× |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        cells = [result["label"]]
        for part in ("a", "b"):
            ratios = [llama / ours for ours, llama in result[part]]
            ours, llama = sorted(result[part], key=lambda pair: pair[1] / pair[0])[(len(ratios) - 1) // 2]
            ratio = llama / ours
            span = f" ({min(ratios):.3f}–{max(ratios):.3f})" if len(ratios) > 1 else ""
            cells += [f"{result['tokens'] / ours:,.0f}", f"{result['tokens'] / llama:,.0f}",
                      f"**{ratio:.3f}×**{span}: {'met' if ratio >= 1.0 else 'not met'}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tiny model, one round of a few steps (smoke test)")
    args = parser.parse_args()
    settings = SETTINGS
    if args.quick:
        settings, args.warmup, args.steps, args.rounds = QUICK, 1, 2, 1
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, transformers "
          f"{transformers.__version__}; float32, CPU; {args.rounds} rounds of {args.steps} timed steps after "
          f"{args.warmup} warm-up steps\n")
    results = measure(settings, args.warmup, args.steps, args.rounds)
    print(table(results))
    print(f"\nthreads: {torch.get_num_threads()} (the trainer's)")


if __name__ == "__main__":
    main()
