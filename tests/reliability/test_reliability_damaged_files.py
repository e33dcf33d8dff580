"""Damaged files of a run directory other than its snapshots: every command that reads one exits 2
with one line naming the file (and the line, where there is one), and changes nothing.

A damage is what a disk, a copy or a hand leaves behind: a file cut in the middle, a line of
``metrics.jsonl`` cut short, a config that is no longer YAML, a JSON file that is no longer JSON."""

import shutil
from pathlib import Path

import pytest
from short_runs import SHORT_LM, SHORT_RUN

from ctxstair.cli import main


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def cut_third_line(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"
    path.write_text("".join(lines))


def not_yaml(path: Path) -> None:
    path.write_text("model: [d, 8\n")


def not_json(path: Path) -> None:
    path.write_text(path.read_text().replace('"', "", 1))


def a_list(path: Path) -> None:
    path.write_text("[1, 2]\n")


#: (file, damage, what the message says besides the file's name).
DAMAGES = {
    "metrics-line": ("metrics.jsonl", cut_third_line, ":3: not a JSON object"),
    "metrics-cut": ("metrics.jsonl", cut_in_half, "not a JSON object"),
    "alignment-cut": ("alignment.csv", cut_in_half, "cut short"),
    "alignment-line": ("alignment.csv", cut_third_line, ":3: "),
    "config-yaml": ("config.yaml", not_yaml, "not valid YAML"),
    "config-cut": ("config.yaml", cut_in_half, ""),
    "summary-json": ("summary.json", not_json, "not valid JSON"),
    "summary-list": ("summary.json", a_list, "not an object"),
}
#: The commands that read each file, as arguments after ``ctxstair`` (``{run}``: the run directory).
COMMANDS = {
    "report": ["report", "{run}"],
    "explore": ["explore", "{run}"],
    "resume": [*SHORT_RUN, "--out", "{run}", "--resume"],
    "verify": ["verify", "{run}"],
}
READS = {
    "metrics.jsonl": ["report", "explore", "resume", "verify"],
    "alignment.csv": ["report", "explore", "resume", "verify"],
    "config.yaml": ["report", "explore", "resume", "verify"],
    "summary.json": ["explore", "verify"],  # report and resume write it afresh from the other files
}
CASES = [(damage, command) for damage, (file, _, _) in DAMAGES.items() for command in READS[file]]


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage, command", CASES, ids=[f"{d}-{c}" for d, c in CASES])
def test_a_damaged_file_is_named_in_one_line_and_nothing_changes(finished, tmp_path, capsys, damage, command):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    file, harm, says = DAMAGES[damage]
    harm(run / file)
    before = contents(run)
    capsys.readouterr()
    code = main([arg.replace("{run}", str(run)) for arg in COMMANDS[command]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("ctxstair: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    # verify names a file its record no longer matches whatever the damage; the readers say what is wrong
    assert str(run / file) in err and (says in err or command == "verify" and "corrupted or truncated" in err), err
    assert contents(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no sibling left half-written


def test_verify_names_a_damaged_metrics_file(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    cut_third_line(run / "metrics.jsonl")
    capsys.readouterr()
    assert main(["verify", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'metrics.jsonl'}:3: not a JSON object" in err, err


LM_CASES = [(damage, command) for damage in ("cut", "line") for command in ("report", "explore", "resume", "verify")]


@pytest.mark.parametrize("damage, command", LM_CASES, ids=[f"{d}-{c}" for d, c in LM_CASES])
def test_a_damaged_lm_analysis_is_named_in_one_line_and_nothing_changes(finished_lm, tmp_path, capsys, damage,
                                                                       command):
    run = tmp_path / "run"
    shutil.copytree(finished_lm, run)
    (cut_in_half if damage == "cut" else cut_third_line)(run / "lm_analysis.csv")
    before = contents(run)
    capsys.readouterr()
    argv = {"report": ["report", str(run)], "explore": ["explore", str(run)],
            "resume": [*SHORT_LM, "--out", str(run), "--resume"], "verify": ["verify", str(run)]}[command]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    says = "corrupted or truncated" if command == "verify" else "cut short" if damage == "cut" else ":3: "
    assert str(run / "lm_analysis.csv") in err and says in err, err
    assert contents(run) == before
