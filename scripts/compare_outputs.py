"""Record, then compare, the numbers every recipe and ``ctxstair lm train`` write.

A restructuring of the code must not change a single number. This script runs every registered
recipe (shortened where it takes minutes, the same settings every time) and ``lm train`` on the
synthetic corpus through the ``ctxstair`` command, and ``analyze-model`` on an LM run's snapshots,
and keeps what a run measures: every CSV, every ``metrics.jsonl``, ``summary.json`` and
``analysis.json`` without their timings. ``record`` writes them with their SHA-256 into a
directory; ``compare`` reruns (or reads a second record) and lists every file whose bytes differ::

    python scripts/compare_outputs.py record before/          # on the old code
    python scripts/compare_outputs.py record after/           # on the new code
    python scripts/compare_outputs.py compare before/ after/  # exit 1 when anything differs

``--only NAME`` (repeatable) limits a record to some of the jobs. Both records must come from the
same machine: the promise is bitwise on one machine (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The ``ctxstair run`` arguments (after the recipe's name) of the recipes that take more than about a
#: minute at their defaults: the test suite's small settings. Every other registered recipe runs at
#: its defaults, so a new recipe is recorded without an entry here.
SHORTENED: dict[str, list[str]] = {
    "activation-order": ["--set", "task.N=6", "--set", "train.epochs=200", "--set", "train.members=1",
                         "--set", "snapshots.every=50"],
    "activation-order-n50": ["--set", "task.N=6", "--set", "train.epochs=200", "--set", "train.members=1",
                             "--set", "snapshots.every=50"],
    "composite": ["--seeds", "2", "--set", "task.n_samples=300", "--set", "task.n_eval=200", "--set", "train.epochs=60",
                  "--set", "snapshots.every=20"],
    "early-geometry": ["--set", "train.epochs=120", "--set", "snapshots.every=50", "--set", "analysis.probe_steps=20",
                       "--set", "analysis.probe_folds=2"],
    "higher-orders": ["--set", "task.p=16", "--set", "task.shifts=[0,1,2,3,4,5,6,7]", "--set", "model.d=32",
                      "--set", "train.epochs=1500", "--set", "snapshots.every=250",
                      "--set", "analysis.probe_steps=100"],
    "lm-staircase": ["--set", "train.steps=200", "--set", "corpus.max_tokens=60000", "--set", "snapshots.every=50",
                     "--set", "analysis.probe_steps=60"],
    "modulus-onset": ["--seeds", "2", "--set", "task.N=6", "--set", "model.d=16", "--set", "train.epochs=60"],
    "reason-memory": ["--seeds", "2", "--set", "task.n_samples=600", "--set", "task.n_eval=200",
                      "--set", "train.epochs=60", "--set", "snapshots.every=20"],
    "seed-spectra": ["--seeds", "3", "--set", "task.N=24", "--set", "model.d=32", "--set", "train.epochs=100",
                     "--set", "analysis.probe_steps=20", "--set", "analysis.probe_folds=2"],
    "signature-embeddings": ["--seeds", "2", "--set", "task.N=12", "--set", "model.d=32", "--set", "train.epochs=300"],
}

#: Jobs besides the recipes: job name -> the ``ctxstair`` arguments after the command.
JOBS: dict[str, list[str]] = {
    "lm-train": ["lm", "train", "--set", "train.steps=200", "--set", "corpus.max_tokens=60000",
                 "--set", "snapshots.every=50", "--set", "analysis.probe_steps=60"],
}

#: Jobs of more than one command: each command's ``{out}`` is the job's output directory (whose files
#: are kept) and ``{scratch}`` a directory of its own that is thrown away. ``analyze-model`` measures
#: the snapshots of an LM run trained without analysis, as a user measures their own checkpoints.
STEPS: dict[str, list[list[str]]] = {
    "analyze-model": [
        ["lm", "train", "--set", "train.steps=200", "--set", "corpus.max_tokens=60000", "--set", "snapshots.every=50",
         "--set", "analysis.enabled=false", "--out", "{scratch}/run"],
        ["analyze-model", "{scratch}/run", "--corpus", "synthetic", "--window", "64", "--max-tokens", "60000",
         "--out", "{out}"],
    ],
}

#: summary.json keys that hold wall-clock time or machine facts rather than measurements.
TIMING_KEYS = ("seconds", "wall", "elapsed", "duration", "peak_memory", "numerics", "device")


def _without_timings(value):
    """``value`` (parsed JSON) with every key naming a timing dropped, recursively."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not any(t in k for t in TIMING_KEYS)}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _kept_files(run: Path) -> dict[str, bytes]:
    """Relative path -> bytes of what the comparison judges in one output directory."""
    kept = {}
    for path in sorted(run.rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(run).as_posix()
        if path.suffix in (".csv", ".jsonl"):
            kept[name] = path.read_bytes()
        elif path.name in ("summary.json", "analysis.json"):
            summary = _without_timings(json.loads(path.read_text()))
            kept[name] = (json.dumps(summary, indent=1, sort_keys=True) + "\n").encode()
    return kept


def all_jobs() -> dict[str, list[list[str]]]:
    """Job name -> its commands: every registered recipe (``ctxstair run NAME``, with :data:`SHORTENED`
    where it has an entry), then :data:`JOBS` and :data:`STEPS`."""
    from ctxstair.recipes import all_recipes

    commands = {recipe.name: ["run", recipe.name, *SHORTENED.get(recipe.name, [])] for recipe in all_recipes()}
    commands.update(JOBS)
    return {**{name: [[*args, "--out", "{out}"]] for name, args in commands.items()}, **STEPS}


def record(dest: Path, only: list[str]) -> None:
    """Run the jobs (all, or ``only``) and write their kept files and ``manifest.json`` into ``dest``."""
    jobs = all_jobs()
    names = only or list(jobs)
    unknown = sorted(set(names) - set(jobs))
    if unknown:
        sys.exit(f"unknown job(s) {', '.join(unknown)}; jobs: {', '.join(jobs)}")
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / name
            for step in jobs[name]:
                args = [arg.format(out=out, scratch=Path(scratch) / "scratch") for arg in step]
                print(f"[{name}] {' '.join(args)}", flush=True)
                subprocess.run([sys.executable, "-m", "ctxstair", *args], check=True, stdout=subprocess.DEVNULL)
            kept = _kept_files(out)
        shutil.rmtree(dest / name, ignore_errors=True)
        for rel, data in kept.items():
            target = dest / name / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        manifest[name] = {rel: hashlib.sha256(data).hexdigest() for rel, data in kept.items()}
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"[{name}] {len(kept)} files", flush=True)


def compare(before: Path, after: Path) -> int:
    """Print every job and file that differs between two records; 0 when none does."""
    old = json.loads((before / "manifest.json").read_text())
    new = json.loads((after / "manifest.json").read_text())
    differences = 0
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            print(f"{name}: only in {'after' if name in new else 'before'}")
            differences += 1
            continue
        for rel in sorted(set(old[name]) | set(new[name])):
            if old[name].get(rel) != new[name].get(rel):
                state = "missing after" if rel not in new[name] else "new" if rel not in old[name] else "differs"
                print(f"{name}/{rel}: {state}")
                differences += 1
    files = sum(len(v) for v in new.values())
    print(f"{len(new)} jobs, {files} files: " + ("byte-identical" if not differences else f"{differences} differences"))
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run the jobs and keep what they measure")
    rec.add_argument("dest", type=Path)
    rec.add_argument("--only", action="append", default=[], metavar="JOB")
    cmp_ = commands.add_parser("compare", help="list the files that differ between two records")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        record(args.dest, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
