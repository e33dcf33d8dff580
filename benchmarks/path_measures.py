"""Path measures per checkpoint on the model itself: a Pythia-160m-sized GPT-NeoX against a Llama of
the same size, each measured in place through its model view, on the CPU, side by side.

    python benchmarks/path_measures.py            # a few minutes on 2 cores; prints a Markdown table
    python benchmarks/path_measures.py --quick    # a tiny model, seconds (smoke test)

One "checkpoint" is what ``analyze-model`` and the monitor do with a model for the measures of the
network (``StaircaseSetup.measure`` with ``paths``): the attention patterns of the window sample
and every layer's correlation with its null, the path shares (one vector-Jacobian product per path
and window) and the unembedding alignment. Two ways, in turns, their order alternating round by
round so that load hits them alike:

* ``gpt_neox, in place`` — Pythia-160m's sizes (12 layers, d 768, 12 heads, d_mlp 3072, V 50,304,
  parallel residual, a quarter of each head rotary), random weights, read through its view;
* ``llama, in place`` — a Llama with the same width, depth, heads and vocabulary and the same number of
  MLP weights (SwiGLU has three matrices: d_mlp 2048), untied, read through its view: the default
  family of ``lm train``. (Until the model view, and while ``DecoderLM`` existed, a Llama was measured on
  a ``DecoderLM`` copy of it; that copy is gone, so the comparison is now family against family.)

The setting: 8 windows of 128 tokens for the attention paths, the first 1 for the path shares, 100
tracked tokens, no probe (the probe reads only embedding rows). The table gives median seconds per
checkpoint over ``--rounds`` rounds after one warm-up round, and each time against the ``llama, in
place`` time of the same round (median over rounds; < 1: faster than the Llama).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import transformers  # noqa: E402

from ctxstair.measure.estimators import States  # noqa: E402
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup  # noqa: E402

PYTHIA_160M = dict(vocab_size=50_304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   max_position_embeddings=2048)
QUICK = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)


def models(sizes: dict) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A random GPT-NeoX of ``sizes`` (d_mlp 4d) and a random untied Llama of the same sizes with as
    many MLP weights (d_mlp 8d/3), both float32 in eval mode."""
    d = sizes["hidden_size"]
    neox = transformers.GPTNeoXConfig(**sizes, intermediate_size=4 * d, rotary_pct=0.25, use_parallel_residual=True,
                                      bos_token_id=None, eos_token_id=None)
    llama = transformers.LlamaConfig(**sizes, intermediate_size=8 * d // 3, num_key_value_heads=sizes[
        "num_attention_heads"], tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return (transformers.AutoModelForCausalLM.from_config(neox).eval(),
            transformers.AutoModelForCausalLM.from_config(llama).eval())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = QUICK if args.quick else PYTHIA_160M
    V = sizes["vocab_size"]
    neox, llama = models(sizes)
    windows = np.random.default_rng(0).integers(0, V, size=(64, 128))
    tokens = np.arange(100) * (V // 100)
    setup = StaircaseSetup.from_windows(windows, settings=StaircaseSettings(
        k=100, probe=False, attention_windows=8, path_windows=1), tokens=tokens, vocab_size=V)

    def checkpoint(model_of) -> float:
        start = time.perf_counter()
        model = model_of()
        rows = model.get_input_embeddings().weight
        row, = setup.measure(States(V, rows.detach().double().numpy()[None, tokens], model=lambda i: model))
        assert "path_share/embed" in row and "unembedding_alignment" in row
        return time.perf_counter() - start

    ways = {"gpt_neox, in place": lambda: neox, "llama, in place": lambda: llama}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds + 1):
        order = list(ways) if round_ % 2 == 0 else list(ways)[::-1]  # neither always follows the other
        for name in order:
            seconds = checkpoint(ways[name])
            if round_:  # the first round warms up
                times[name].append(seconds)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {torch.get_num_threads()} threads; float32, CPU; "
          f"{args.rounds} rounds\n")
    print("| way | s per checkpoint (median) | range | against llama, in place (median of rounds) |")
    print("|---|---|---|---|")
    llama_times = times["llama, in place"]
    for name, seconds in times.items():
        ratio = statistics.median(s / b for s, b in zip(seconds, llama_times, strict=True))
        print(f"| {name} | {statistics.median(seconds):.2f} | {min(seconds):.2f}–{max(seconds):.2f} | {ratio:.2f}× |")


if __name__ == "__main__":
    main()
