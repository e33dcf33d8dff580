"""Gather what ``benchmarks/device_check.sh`` left in its output folder into one ``device_check.json``.

    python benchmarks/device_check_summary.py OUTPUT_DIR

Reads ``steps.jsonl`` (one line per step: name, exit status, seconds, limit), each step's numbers
(``<step>.json``, when the step wrote one) and the last lines of its log (``<step>.log``); writes
``{"gpu": ..., "passed": every step exited 0, "steps": [...]}`` and prints each step's exit status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LOG_LINES = 15


def summarise(out: Path) -> dict:
    """The report of the check whose files are in ``out``."""
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    for row in steps:
        numbers, log = out / f"{row['step']}.json", out / f"{row['step']}.log"
        if numbers.is_file():
            row["result"] = json.loads(numbers.read_text())
        row["log_tail"] = log.read_text(errors="replace").splitlines()[-LOG_LINES:] if log.is_file() else []
    gpu = out / "gpu.log"
    return {"gpu": gpu.read_text().strip() if gpu.is_file() else "", "passed": all(row["rc"] == 0 for row in steps),
            "steps": steps}


def main() -> None:
    out = Path(sys.argv[1])
    report = summarise(out)
    (out / "device_check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({row["step"]: row["rc"] for row in report["steps"]}))


if __name__ == "__main__":
    main()
