"""Audit of judged numbers across floating-point code paths: run recipes at their defaults under
the default code path and under an emulated other CPU, and list how far each key number of
``summary.json`` moves and whether its ✓/✗ flips (the table in docs/reliability.md).

    python scripts/audit_code_paths.py --out runs/audit                 # every recipe (≈ 50 min on 2 cores)
    python scripts/audit_code_paths.py --out runs/audit staircase-add attention-arith

The emulated CPU runs ATen's AVX2 kernels and asks MKL for AVX2 (what an AVX2-only CPU runs). On an
AVX-512 Intel CPU both change the rounding; on an AMD CPU MKL ignores MKL_ENABLE_INSTRUCTIONS, so
there only ATen's kernels change, which is enough to move every number of a model whose training
is chaotic. Finished runs are kept, so an interrupted audit continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

PATHS = {
    "default": {},
    "emulated": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
}
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
SRC = Path(__file__).resolve().parents[1] / "src"


def run(recipe: str, out: Path, env: dict[str, str]) -> Path:
    """Run ``recipe`` at its defaults into ``out`` under ``env`` (skipped if already complete)."""
    if not (out / "summary.json").is_file():
        environment = {k: v for k, v in os.environ.items() if k not in ("CTXSTAIR_REPRODUCIBLE", *PATHS["emulated"])}
        environment.update(env, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "ctxstair", "run", recipe, "--out", str(out), "--force"],
                       env=environment, check=True, stdout=subprocess.DEVNULL)
    return out


def first_number(text: str) -> float | None:
    match = NUMBER.search(text.replace("−", "-").replace(",", ""))
    return float(match.group()) if match else None


def compare(recipe: str, summaries: dict[str, dict]) -> list[dict]:
    """One row per key number: its measured text and ✓/✗ under each path, and the move of its first number."""
    rows = []
    by_path = {path: {k["name"]: k for k in s["key_numbers"]} for path, s in summaries.items()}
    for name, reference in by_path["default"].items():
        cells = {path: numbers.get(name) for path, numbers in by_path.items()}
        values = [first_number(c["measured"]) for c in cells.values() if c]
        move = abs(values[0] - values[1]) if len(values) == 2 and None not in values else None
        marks = {path: None if c is None else c["met"] for path, c in cells.items()}
        rows.append({"recipe": recipe, "name": name, "expected": reference["expected"],
                     "measured": {path: c["measured"] if c else "(missing)" for path, c in cells.items()},
                     "met": marks, "move": move,
                     "flips": len({m for m in marks.values()}) > 1})
    return rows


def markdown(rows: list[dict]) -> str:
    mark = {True: "✓", False: "✗", None: "—"}
    lines = ["| recipe | key number | expected | default | emulated | move | ✓/✗ |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        move = "" if r["move"] is None else f"{r['move']:.3g}"
        verdict = ("**flips**" if r["flips"] else mark[r["met"]["default"]])
        lines.append(f"| {r['recipe']} | {r['name']} | {r['expected']} | {r['measured']['default']} "
                     f"| {r['measured']['emulated']} | {move} | {verdict} |")
    return "\n".join(lines).replace("\n|", "\n|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="*", help="recipes to audit (default: every recipe)")
    parser.add_argument("--out", type=Path, default=Path("runs/audit"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(SRC))
    from ctxstair.recipes import all_recipes

    names = args.recipes or [r.name for r in all_recipes()]
    rows = []
    for recipe in names:
        summaries = {path: json.loads((run(recipe, args.out / path / recipe, env) / "summary.json").read_text())
                     for path, env in PATHS.items()}
        rows += compare(recipe, summaries)
        print(f"{recipe}: {sum(r['flips'] for r in rows if r['recipe'] == recipe)} flip(s)", flush=True)
    (args.out / "audit.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    (args.out / "audit.md").write_text(markdown(rows) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
