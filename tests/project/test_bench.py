"""``ctxstair bench``: the headline table, one real benchmark, and the error
outside a source checkout; the LM throughput benchmark's quick mode."""

import re
import subprocess
import sys

import pytest
from repo_paths import ROOT

from ctxstair.cli import bench as bench_commands
from ctxstair.cli import main

ENSEMBLE = """machine: x86_64, 2 cores, torch 2.13.0+cpu, 2 threads, device cpu

staircase-add (N = 40, d = 128): K = 32, 50 timed epochs, n = 1600, V = 81, d = 128

| | seconds | per epoch (ms) | GFLOP/s | fraction of matmul rate |
|---|---|---|---|---|
| float32 matmul 4096² | | | 197.7 | 1.00 |
| per-model loop (K modules, K optimizers) | 1.96 | 39.1 | 135.7 | 0.69 |
| engine (one K-member ensemble) | 2.55 | 51.0 | 104.1 | 0.53 |

engine speed-up over the per-model loop (staircase-add (N = 40, d = 128)): 0.8×; the unembedding's work alone at the \
matmul rate takes 15.9 ms per epoch, so no method can beat the loop by more than 2.4× here

small models (N = 10, d = 16): K = 32, 50 timed epochs, n = 100, V = 21, d = 16

| | seconds | per epoch (ms) | GFLOP/s | fraction of matmul rate |
|---|---|---|---|---|
| float32 matmul 4096² | | | 196.9 | 1.00 |
| per-model loop (K modules, K optimizers) | 0.30 | 5.9 | 1.8 | 0.01 |
| engine (one K-member ensemble) | 0.03 | 0.6 | 18.9 | 0.10 |

engine speed-up over the per-model loop (small models (N = 10, d = 16)): 10.4×; the unembedding's work alone at the \
matmul rate takes 0.1 ms per epoch, so no method can beat the loop by more than 55.0× here
"""
OVERHEAD = """| stage | seconds | fraction of training |
|---|---|---|
| training alone (`--no-analysis`) | 20.00 | 1.00 |
| **everything beyond training** | **2.00** | **0.100** |

staircase-add: everything beyond training 10.0 % of training (target at most 40 %: met)

| stage | seconds | fraction of training |
|---|---|---|
| training (`--no-analysis`; snapshots are written) | 60.00 | 1.00 |

lm train: everything beyond training 30.0 % of training (target at most 25 %: not met)
"""
LM_THROUGHPUT = """(a) `lm train` now against `lm train` before

| setting | `lm train` now, transformers llama (tokens/s) | `lm train` before, DecoderLM (tokens/s) | (a) now / before |
|---|---|---|---|
| d = 64, 2 layers | 30,000 | 29,000 | **1.034×** (1.010–1.050): met |

(b) `lm train`'s step against a plain Hugging Face loop

| setting | family | `lm train` (tokens/s) | plain loop (tokens/s) | (b) loop step / trainer step |
|---|---|---|---|---|
| d = 64, 2 layers | llama | 30,000 | 30,300 | **0.990×** (0.970–1.000): met |
| d = 64, 2 layers | gpt2 | 30,000 | 31,000 | **0.968×** (0.950–0.990): not met |
"""
MEMORY = """| stage | tokens | seconds | peak RSS (MiB) | RSS after imports (MiB) | peak heap, tracemalloc (MiB) |
|---|---|---|---|---|---|
| `NextTokenCounts`, streamed | 5,000,000 | 0.1 | 362 | 282 | 76 |
| `NextTokenCounts`, streamed | 50,000,000 | 0.6 | 370 | 282 | 76 |
| `next_token_signature`, one-shot | 5,000,000 | 0.1 | 366 | 282 | 60 |
| `next_token_signature`, one-shot | 20,000,000 | 0.2 | 431 | 282 | 60 |
| `next_token_signature`, one-shot | 50,000,000 | 0.5 | 545 | 282 | 61 |
"""
REPRODUCIBLE = """| mode | threads | matmul float32 2048² (GFLOP/s) | staircase-add wall (s, median) |
|---|---|---|---|
| default | 2 | 180 | 21.0 |
| reproducible | 2 | 60 | 28.0 |

reproducible / default: matmul rate 0.33×, staircase-add time 1.33×
"""
SIGNATURES = """| workload | median (s) | min (s) |
|---|---|---|
| `add` N=40 | 0.002 | 0.002 |
| random order 2 | 0.722 | 0.715 |
"""


def test_headline_table_reads_each_benchmarks_numbers():
    table = bench_commands.headline_table({"signatures": SIGNATURES, "ensemble": ENSEMBLE,
                                           "analysis_overhead": OVERHEAD, "lm_throughput": LM_THROUGHPUT,
                                           "memory": MEMORY, "reproducible": REPRODUCIBLE}).splitlines()
    assert table[:2] == ["| benchmark | measure | value |", "|---|---|---|"]
    assert table[2:] == [
        "| signatures | `add` N=40 | 0.002 s (median) |",
        "| signatures | random order 2 | 0.722 s (median) |",
        "| ensemble | engine speed-up over the per-model loop, staircase-add (N = 40, d = 128) (target ≥ 1×) | 0.8× |",
        "| ensemble | upper bound on any method's speed-up (useful FLOPs at the matmul rate), "
        "staircase-add (N = 40, d = 128) | 2.4× |",
        "| ensemble | engine fraction of the matmul rate, staircase-add (N = 40, d = 128) | 0.53 |",
        "| ensemble | engine speed-up over the per-model loop, small models (N = 10, d = 16) (target ≥ 10×) | 10.4× |",
        "| ensemble | upper bound on any method's speed-up (useful FLOPs at the matmul rate), "
        "small models (N = 10, d = 16) | 55.0× |",
        "| ensemble | engine fraction of the matmul rate, small models (N = 10, d = 16) | 0.10 |",
        "| analysis_overhead | everything `ctxstair run` does beyond training / training (staircase-add) | "
        "10.0 % of training (target at most 40 %: met) |",
        "| analysis_overhead | analysis + report + explorer / training (`lm train`, synthetic corpus) | "
        "30.0 % of training (target at most 25 %: not met) |",
        "| lm_throughput | `lm train` now (transformers llama) / before (DecoderLM), tokens/s, d = 64, 2 layers "
        "(target ≥ 1.0×) | 1.034× (1.010–1.050): met |",
        "| lm_throughput | plain HF loop step / `lm train` step, llama, d = 64, 2 layers (target ≥ 0.98×) | "
        "0.990× (0.970–1.000): met |",
        "| lm_throughput | plain HF loop step / `lm train` step, gpt2, d = 64, 2 layers (target ≥ 0.98×) | "
        "0.968× (0.950–0.990): not met |",
        "| memory | `NextTokenCounts`, streamed: peak heap (tracemalloc) from 5,000,000 to 50,000,000 tokens | "
        "76 → 76 MiB |",
        "| memory | `next_token_signature`, one-shot: peak heap (tracemalloc) from 5,000,000 to 50,000,000 tokens | "
        "60 → 61 MiB |",
        "| reproducible | reproducible mode / default: float32 matmul rate | 0.33× |",
        "| reproducible | reproducible mode / default: staircase-add wall time | 1.33× |",
    ]


MONITOR = """| round | wall without (s) | wall with (s) | with / without | measurements | inside (s) |
|---|---|---|---|---|---|
| 1 | 60.0 | 61.2 | 1.020 | 19 | 1.1 |

monitor overhead: +2.0 % wall time (target at most 5 %: met; median over 1 rounds of with / without: +2.0 %); \
all rounds together: wall +2.0 %, CPU +1.9 %; time inside the callback 1.8 % of the rest of the run; median run \
without 240 ms per step
"""


def test_headline_table_reads_the_monitor_overhead():
    assert bench_commands.headline_table({"monitor": MONITOR}).splitlines()[2:] == [
        "| monitor | staircase monitor in a Trainer run, default cadence: wall time with / without | "
        "+2.0 % wall time (target at most 5 %: met) |",
        "| monitor | time inside the monitor's callback / the rest of the run | 1.8 % |"]


EXPLORER = """| measure | value | budget |
|---|---|---|
| file size | 5.71 MB | ≤ 10 MB |

explorer budgets: 5.71 MB, interactive in 1629 ms, redraw 43 ms median and 53 ms max (all met); load average after: 1.5
"""


def test_headline_table_reads_the_explorer_budgets():
    assert bench_commands.headline_table({"explorer": EXPLORER}).splitlines()[2:] == [
        "| explorer | staircase-add explorer: size, time to interactive, redraw per step (≤ 10 MB, ≤ 2 s, ≤ 100 ms) | "
        "5.71 MB, interactive in 1629 ms, redraw 43 ms median and 53 ms max (all met) |"]


@pytest.mark.extended  # a benchmark run whole: ≈ 8 s on 2 cores
def test_bench_only_signatures_prints_the_table(capsys):
    assert main(["bench", "--only", "signatures"]) == 0
    out = capsys.readouterr().out
    assert "| benchmark | measure | value |" in out
    assert "| signatures | random n=100,000, L=8, V=64, order 2 (dense 64^4) |" in out


def test_bench_outside_a_source_checkout_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_commands, "BENCHMARK_DIR", tmp_path / "benchmarks")
    assert main(["bench", "--only", "ensemble"]) == 2
    err = capsys.readouterr().err
    assert "source checkout" in err and err.count("\n") == 1


def test_bench_unknown_name_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--only", "nosuch"])
    assert exit_.value.code == 2


@pytest.mark.extended  # a benchmark script run whole (five families): ≈ 23 s on 2 cores
def test_lm_throughput_quick_prints_both_ratios():
    root = ROOT
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "lm_throughput.py"), "--quick"],
                         check=True, capture_output=True, text=True).stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| d = 64")]
    # (a): now and before, tokens/s; (b): one row per family, the trainer's and the loop's tokens/s.
    assert [len(row) for row in rows] == [4] + [5] * 5
    assert [row[1] for row in rows[1:]] == ["llama", "gpt_neox", "gpt2", "qwen2", "olmo2"]
    for cells, target in [(rows[0][1:], 1.0)] + [(row[2:], 0.98) for row in rows[1:]]:
        first, second = (float(cell.replace(",", "")) for cell in cells[:2])
        assert first > 0 and second > 0
        shown = float(re.match(r"\*\*(\S+)×\*\*", cells[2]).group(1))
        # Both ratios are the first column's tokens/s over the second's; the rates are shown rounded to
        # whole tokens/s (which under load can be a few dozen) and the ratio to 0.001.
        assert (first - 0.5) / (second + 0.5) - 0.0005 <= shown <= (first + 0.5) / (second - 0.5) + 0.0005
        assert cells[2].endswith(": met" if shown >= target else ": not met")
