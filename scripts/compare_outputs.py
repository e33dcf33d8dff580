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
    python scripts/compare_outputs.py compare before/ after/ --renamed  # LM files in the one schema first

``--only NAME`` (repeatable) limits a record to some of the jobs. Both records must come from the
same machine: the promise is bitwise on one machine (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
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

#: What each LM job sets to run at the measurement settings that held before the LM staircase
#: measurement was unified (prefix labels 2k = 400 and path shares on all 128 attention windows in
#: the LM runs; 32 attention windows in analyze-model), for ``record --before-unified-defaults``: a
#: record made so is compared with one made before the unification (``compare --renamed``).
BEFORE_UNIFIED_DEFAULTS = {
    "lm-staircase": ["--set", "analysis.prefix_labels=400", "--set", "analysis.path_windows=128"],
    "lm-train": ["--set", "analysis.prefix_labels=400", "--set", "analysis.path_windows=128"],
    "analyze-model": ["--windows", "32"],
}

#: summary.json keys that hold wall-clock time or machine facts rather than measurements.
TIMING_KEYS = ("seconds", "wall", "elapsed", "duration", "peak_memory", "numerics", "device")
#: summary.json and analysis.json keys that say how the output was drawn (``--figure-format``), not
#: what it measured: an output drawn in another format holds the same numbers.
PRESENTATION_KEYS = ("figure_format",)


def _without_timings(value):
    """``value`` (parsed JSON) with every key naming a timing, and every presentation key, dropped,
    recursively."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if not any(t in k for t in TIMING_KEYS) and k not in PRESENTATION_KEYS}
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


def all_jobs(before_unified_defaults: bool = False) -> dict[str, list[list[str]]]:
    """Job name -> its commands: every registered recipe (``ctxstair run NAME``, with :data:`SHORTENED`
    where it has an entry), then :data:`JOBS` and :data:`STEPS`; with ``before_unified_defaults`` the
    LM jobs add :data:`BEFORE_UNIFIED_DEFAULTS` to their last command."""
    from ctxstair.recipes import all_recipes

    commands = {recipe.name: ["run", recipe.name, *SHORTENED.get(recipe.name, [])] for recipe in all_recipes()}
    commands.update(JOBS)
    jobs = {**{name: [[*args, "--out", "{out}"]] for name, args in commands.items()}, **STEPS}
    if before_unified_defaults:
        jobs.update({name: [*jobs[name][:-1], [*jobs[name][-1], *extra]]
                     for name, extra in BEFORE_UNIFIED_DEFAULTS.items()})
    return jobs


def record(dest: Path, only: list[str], before_unified_defaults: bool = False) -> None:
    """Run the jobs (all, or ``only``) and write their kept files and ``manifest.json`` into ``dest``
    (:func:`all_jobs`)."""
    jobs = all_jobs(before_unified_defaults)
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
            # A job's own temporary folder is named in what it records (analyze-model's "source"):
            # the same placeholder in every record.
            kept = {rel: data.replace(str(Path(scratch)).encode(), b"{tmp}") for rel, data in _kept_files(out).items()}
        shutil.rmtree(dest / name, ignore_errors=True)
        for rel, data in kept.items():
            target = dest / name / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        manifest[name] = {rel: hashlib.sha256(data).hexdigest() for rel, data in kept.items()}
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"[{name}] {len(kept)} files", flush=True)


def _csv_rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def renamed(files: dict[str, bytes]) -> dict[str, bytes]:
    """One job's kept files as a record made before the one schema of the LM numbers holds them in its
    names (docs/language-models.md, "One schema for every output"), and an ``analysis.json`` reduced to
    its rows of numbers; other files as they are. The renaming: ``alignment.csv``'s ``next_token`` rows
    become the ``rho_next`` and ``rho_next_spearman`` rows of ``lm_analysis.csv`` (by step: ρ_next, the
    probe, then the attention paths and path shares as before), and ``analysis.json``'s
    ``rho_next_pearson``, ``shuffled_heldout_mse``, per-layer lists and path-share dicts become
    ``rho_next``, ``probe_shuffled_mse``, ``attention_path_corr/<layer>`` and ``path_share/<path>``
    (``rho_next_defined`` goes: NaN is undefined)."""
    files = dict(files)
    alignment = files.get("alignment.csv")
    if alignment is not None and "lm_analysis.csv" in files:
        rho = [r for r in _csv_rows(alignment) if r["signature"] == "next_token"]
        old = _csv_rows(files.pop("lm_analysis.csv"))
        del files["alignment.csv"]
        lines = ["step,measure,part,value"]
        for row in sorted(rho, key=lambda r: int(r["epoch"])):
            step = row["epoch"]
            lines += [f"{step},rho_next,,{row['pearson']}", f"{step},rho_next_spearman,,{row['spearman']}"]
            lines += [f"{r['step']},{r['measure']},{r['part']},{r['value']}" for r in old if r["step"] == step]
        files["lm_analysis.csv"] = ("\n".join(lines) + "\n").encode()
    if "analysis.json" in files:
        rows = json.loads(files["analysis.json"])["checkpoints"]
        files["analysis.json"] = (json.dumps({"checkpoints": [_new_row(r) for r in rows]}, indent=1, sort_keys=True)
                                  + "\n").encode()
    return files


def _new_row(row: dict) -> dict:
    """An analyze-model row in the one schema (:func:`renamed`), whatever record it comes from."""
    if "rho_next_pearson" not in row:
        return {k: v for k, v in row.items() if k not in ("commit", "weights")}
    new = {"name": row["name"], "step": row["step"], "rho_next": row["rho_next_pearson"],
           "rho_next_spearman": row["rho_next_spearman"]}
    if row["probe_heldout_mse"] is not None:
        new.update(probe_heldout_mse=row["probe_heldout_mse"], probe_shuffled_mse=row["shuffled_heldout_mse"])
    for measure in ("attention_path_corr", "attention_path_null"):
        new.update({f"{measure}/{layer}": value for layer, value in enumerate(row[measure] or [])})
    new.update({f"path_share/{path}": value for path, value in (row["path_share"] or {}).items()})
    return new


def _record_files(record: Path, manifest: dict) -> dict[str, dict[str, bytes]]:
    return {name: {rel: (record / name / rel).read_bytes() for rel in files} for name, files in manifest.items()}


def compare(before: Path, after: Path, rename: bool = False) -> int:
    """Print every job and file that differs between two records; 0 when none does. With ``rename``
    both records are read in the one schema of the LM numbers first (:func:`renamed`)."""
    old = json.loads((before / "manifest.json").read_text())
    new = json.loads((after / "manifest.json").read_text())
    if rename:
        old, new = ({name: {rel: hashlib.sha256(data).hexdigest() for rel, data in renamed(files).items()}
                     for name, files in _record_files(record, manifest).items()}
                    for record, manifest in ((before, old), (after, new)))
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
    rec.add_argument("--before-unified-defaults", action="store_true",
                     help="run the LM jobs at the measurement settings that held before they were unified")
    cmp_ = commands.add_parser("compare", help="list the files that differ between two records")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    cmp_.add_argument("--renamed", action="store_true",
                      help="read both records in the one schema of the LM numbers (a record made before it)")
    args = parser.parse_args()
    if args.command == "record":
        record(args.dest, args.only, args.before_unified_defaults)
        return 0
    return compare(args.before, args.after, args.renamed)


if __name__ == "__main__":
    sys.exit(main())
