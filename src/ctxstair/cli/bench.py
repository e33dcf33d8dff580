"""``ctxstair bench``: run the scripts of ``benchmarks/`` and print one table of
their headline numbers.

    ctxstair bench                    # signatures, corpus_signatures, ensemble, analysis_overhead,
                                      # lm_throughput, memory, reproducible, monitor, explorer (≈ 30 min)
    ctxstair bench --only ensemble    # one of them

Each script runs as a subprocess of the current Python and prints its own Markdown table; this
command reads the headline numbers out of that output (per-workload medians, the ensemble speed-up
and matmul fraction, the analysis overhead, ``lm train``'s training throughput against the trainer
before and against a plain Hugging Face loop, the peak heap of the corpus stages at 5 M and 50 M
tokens, the cost of reproducible mode, what the staircase monitor adds to a Trainer run, the
explorer page's size and speed).
``benchmarks/`` is not part of the installed package, so the command needs a source checkout of the
repository.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ctxstair.errors import InputError

#: The repository's benchmark folder, found relative to ``src/ctxstair/``.
BENCHMARK_DIR = Path(__file__).resolve().parents[3] / "benchmarks"


def _table(output: str) -> list[list[str]]:
    """The body rows of the Markdown table(s) in ``output``, as lists of cells (no header rows: those
    just above a ``|---|`` separator)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in output.splitlines() if line.startswith("|")]
    separator = [set("".join(row)) <= set("-: ") for row in rows]
    return [row for i, row in enumerate(rows) if not separator[i] and not (i + 1 < len(rows) and separator[i + 1])]


def _medians(output: str) -> list[tuple[str, str]]:
    """One row per workload: its median time."""
    return [(row[0], f"{row[1]} s (median)") for row in _table(output)]


def _ensemble(output: str) -> list[tuple[str, str]]:
    """Speed-up, its upper bound and the matmul fraction of the engine for each setting of
    ``benchmarks/ensemble.py``; the speed-up targets are ≥ 1× at the staircase-add setting and ≥ 10× for
    small models."""
    rows = []
    for section in re.split(r"^(?=\S.*: K = \d+,)", output, flags=re.M)[1:]:
        setting = section.split(": K = ")[0]
        target = "1×" if setting.startswith("staircase-add") else "10×" if setting.startswith("small") else None
        engine = next((row for row in _table(section) if row[0].startswith("engine")), None)
        speedup = re.search(r"speed-up over the per-model loop \(.*\): (\S+?×)", section)
        bound = re.search(r"by more than (\S+?×)", section)
        rows += [(f"engine speed-up over the per-model loop, {setting}" + (f" (target ≥ {target})" if target else ""),
                  speedup.group(1) if speedup else "?"),
                 (f"upper bound on any method's speed-up (useful FLOPs at the matmul rate), {setting}",
                  bound.group(1) if bound else "?"),
                 (f"engine fraction of the matmul rate, {setting}", engine[-1] if engine else "?")]
    return rows


def _overhead(output: str) -> list[tuple[str, str]]:
    found = re.search(r"^staircase-add: everything beyond training (.+)", output, flags=re.M)
    lm = re.search(r"^lm train: everything beyond training (.+)", output, flags=re.M)
    return [("everything `ctxstair run` does beyond training / training (staircase-add)",
             found.group(1) if found else "?"),
            ("analysis + report + explorer / training (`lm train`, synthetic corpus)", lm.group(1) if lm else "?")]


def _lm_throughput(output: str) -> list[tuple[str, str]]:
    """``lm train`` now over ``lm train`` before (tokens/s) per setting, and a plain Hugging Face
    loop's step time over the trainer's per setting and family (``benchmarks/lm_throughput.py``)."""
    sections = {part[:3]: part for part in re.split(r"^(?=\([ab]\) )", output, flags=re.M)}
    rows = [(f"`lm train` now (transformers llama) / before (DecoderLM), tokens/s, {row[0]} (target ≥ 1.0×)",
             row[3].replace("**", "")) for row in _table(sections.get("(a)", ""))]
    return rows + [(f"plain HF loop step / `lm train` step, {row[1]}, {row[0]} (target ≥ 0.98×)",
                    row[4].replace("**", "")) for row in _table(sections.get("(b)", ""))]


def _memory(output: str) -> list[tuple[str, str]]:
    """Peak heap of each stage at the smallest and the largest corpus (does it grow with length?)."""
    stages: dict[str, list[list[str]]] = {}
    for row in _table(output):
        stages.setdefault(row[0], []).append(row)
    return [(f"{stage}: peak heap (tracemalloc) from {rows[0][1]} to {rows[-1][1]} tokens",
             f"{rows[0][-1]} → {rows[-1][-1]} MiB") for stage, rows in stages.items()]


def _reproducible(output: str) -> list[tuple[str, str]]:
    found = re.search(r"reproducible / default: matmul rate (\S+?×), staircase-add time (\S+?×)", output)
    return [("reproducible mode / default: float32 matmul rate", found.group(1) if found else "?"),
            ("reproducible mode / default: staircase-add wall time", found.group(2) if found else "?")]


def _monitor(output: str) -> list[tuple[str, str]]:
    """What the staircase monitor adds to the wall time of a Trainer run (paired runs with and
    without it), and the time inside its callback over the rest of the run."""
    found = re.search(r"^monitor overhead: (\S+ % wall time \(target at most 5 %: [^;]+);", output, flags=re.M)
    inside = re.search(r"time inside the callback (\S+ %)", output)
    return [("staircase monitor in a Trainer run, default cadence: wall time with / without",
             f"{found.group(1)})" if found else "?"),
            ("time inside the monitor's callback / the rest of the run", inside.group(1) if inside else "?")]


def _explorer(output: str) -> list[tuple[str, str]]:
    """The staircase-add explorer's size, time to interactive and redraw time against their budgets."""
    found = re.search(r"^explorer budgets: (.+?); load average", output, flags=re.M)
    return [("staircase-add explorer: size, time to interactive, redraw per step (≤ 10 MB, ≤ 2 s, ≤ 100 ms)",
             found.group(1) if found else "?")]


#: Benchmark name -> headline numbers read from its output; run in this order.
HEADLINES: dict[str, Callable[[str], list[tuple[str, str]]]] = {
    "signatures": _medians, "corpus_signatures": _medians, "ensemble": _ensemble, "analysis_overhead": _overhead,
    "lm_throughput": _lm_throughput, "memory": _memory, "reproducible": _reproducible, "monitor": _monitor,
    "explorer": _explorer}


def headline_table(outputs: dict[str, str]) -> str:
    """A Markdown table benchmark | measure | value from each benchmark's output."""
    lines = ["| benchmark | measure | value |", "|---|---|---|"]
    for name, output in outputs.items():
        lines += [f"| {name} | {measure} | {value} |" for measure, value in HEADLINES[name](output)]
    return "\n".join(lines)


def run_benchmark(name: str) -> str:
    """Run ``benchmarks/<name>.py`` with the current Python and return its standard output."""
    script = BENCHMARK_DIR / f"{name}.py"
    if not script.is_file():
        raise InputError(f"no benchmark script {script}: `ctxstair bench` runs from a source checkout of the "
                         "repository (benchmarks/ is not installed with the package)")
    # The script imports ctxstair: make this copy of it importable whatever the install.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"benchmark {name} failed with exit code {done.returncode}: {last}")
    return done.stdout


def cmd_bench(args: argparse.Namespace) -> None:
    """Run the benchmarks (or ``--only`` one), echo each one's output, then the headline table."""
    outputs = {}
    for name in [args.only] if args.only else HEADLINES:
        outputs[name] = run_benchmark(name)
        print(f"## {name}\n\n{outputs[name]}", flush=True)
    print(headline_table(outputs))


def register(commands) -> None:
    """Add ``ctxstair bench``."""
    bench = commands.add_parser("bench", help="run the benchmarks of benchmarks/ and print their headline ratios")
    bench.add_argument("--only", choices=list(HEADLINES), default=None, help="run one benchmark")
    bench.set_defaults(handler=cmd_bench)
