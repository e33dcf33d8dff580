"""Outputs others can read: every file and folder a run writes gets the process's umask, as ``open``
and ``mkdir`` give (0644 and 0755 under umask 022), although each is written atomically through a
temporary name — Python's ``tempfile`` would make them 0600 and 0700 whatever the umask."""

import os
import stat
import subprocess
import sys
from pathlib import Path

from repo_paths import SRC
from short_runs import PNG_ONLY

from ctxstair.io import atomic_write_text, claim_output, fresh_output_dir


def modes(root: Path) -> dict[str, set[str]]:
    """The permission bits found under ``root`` (itself included), for files and for folders."""
    found = {"files": set(), "folders": {oct(stat.S_IMODE(root.stat().st_mode))}}
    for path in root.rglob("*"):
        found["folders" if path.is_dir() else "files"].add(oct(stat.S_IMODE(path.stat().st_mode)))
    return found


def test_a_run_under_umask_022_writes_0644_files_in_0755_folders(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "ctxstair", "run", "staircase-add", "--set", "task.N=6",
               "--set", "train.epochs=30", "--set", "snapshots.every=10", "--set", "analysis.probe_steps=10",
               *PNG_ONLY, "--out", str(out)]
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                          preexec_fn=lambda: os.umask(0o022), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"snapshots", "figures"} <= {p.name for p in out.iterdir() if p.is_dir()}
    assert len(list(out.rglob("*"))) > 10
    assert modes(out) == {"files": {"0o644"}, "folders": {"0o755"}}


def test_atomic_writes_and_claimed_folders_follow_any_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a" / "file.txt", "x")
        with fresh_output_dir(tmp_path / "staged") as staging:
            atomic_write_text(staging / "inside.txt", "y")
        claim_output(tmp_path / "claimed", resume=False, force=False,
                     start=lambda folder: atomic_write_text(folder / "settings.json", "{}"))
    finally:
        os.umask(previous)
    assert oct(stat.S_IMODE((tmp_path / "a" / "file.txt").stat().st_mode)) == "0o640"
    for folder in ("staged", "claimed"):
        assert modes(tmp_path / folder) == {"files": {"0o640"}, "folders": {"0o750"}}, folder
