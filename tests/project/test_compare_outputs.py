"""scripts/compare_outputs.py, the before/after check of a restructuring: what it keeps of a run
directory and what it reports as different."""

import importlib.util
import json
from pathlib import Path

from repo_paths import ROOT

SCRIPT = ROOT / "scripts" / "compare_outputs.py"
spec = importlib.util.spec_from_file_location("compare_outputs", SCRIPT)
compare_outputs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_outputs)


def test_kept_files_are_the_numbers_without_timings_or_the_figure_format(tmp_path):
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "alignment.csv").write_text("member,epoch\n0,1\n")
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 0}\n')
    (tmp_path / "report.html").write_text("<html/>")
    (tmp_path / "resources.json").write_text('{"seconds": 1.0}')
    (tmp_path / "summary.json").write_text(json.dumps({"key_numbers": [{"name": "r", "measured": "0.9"}],
                                                       "train_seconds": 3.2, "runs": [{"wall": 1, "k": 2}],
                                                       "figure_format": "pdf"}))
    kept = compare_outputs._kept_files(tmp_path)
    assert sorted(kept) == ["metrics.jsonl", "part/alignment.csv", "summary.json"]
    assert json.loads(kept["summary.json"]) == {"key_numbers": [{"name": "r", "measured": "0.9"}], "runs": [{"k": 2}]}


def test_compare_reports_every_difference(tmp_path, capsys):
    def record(name: str, manifest: dict) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))
        return tmp_path / name

    manifest = {"a": {"x.csv": "1", "y.csv": "2"}, "b": {"z.csv": "3"}}
    before = record("before", manifest)
    assert compare_outputs.compare(before, record("same", manifest)) == 0
    assert "byte-identical" in capsys.readouterr().out
    after = record("after", {"a": {"x.csv": "1", "y.csv": "9", "w.csv": "4"}})
    assert compare_outputs.compare(before, after) == 1
    out = capsys.readouterr().out
    assert "a/y.csv: differs" in out and "a/w.csv: new" in out and "b: only in before" in out
    assert "3 differences" in out


def test_every_registered_recipe_is_a_job_and_every_shortening_a_recipe():
    from ctxstair.recipes import all_recipes

    names = [recipe.name for recipe in all_recipes()]
    jobs = compare_outputs.all_jobs()
    assert set(names) <= set(jobs) and set(compare_outputs.SHORTENED) <= set(names)
    assert jobs["staircase-add"] == [["run", "staircase-add", "--out", "{out}"]]
