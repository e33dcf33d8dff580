"""The README says what the demo measures: its Python example runs as written and prints the
comparison it promises, and its table of `make demo`'s numbers is the demo's ``summary.json``,
digit for digit — the recorded example of `staircase-add` here, a fresh run of the demo's command in
the extended suite (which also checks that the recorded example is what the demo now gives)."""

import ast
import json
import re

import pytest
from repo_paths import ROOT

from ctxstair.cli import main

README = ROOT / "README.md"
RECORDED = ROOT / "docs" / "examples" / "recipes" / "staircase-add" / "summary.json"


def minus(value: float) -> str:
    """A number with 3 decimals as the README types it (a minus sign, not a hyphen)."""
    return f"{value:.3f}".replace("-", "−")


def demo_rows(member: dict) -> dict[str, str]:
    """The README's demo table (quantity → measured) as the numbers of one member of
    ``summary.json`` (the demo trains one) write it."""
    return {
        "order-0 Pearson at its early peak (before the loss falls halfway)":
            f"{minus(member['peak'])} (epoch {member['peak_epoch']})",
        f"order-0 Pearson at the end (epoch {member['last_epoch']})": minus(member["end"]),
        "held-out order-1 probe at the end": minus(member["probe_end"]),
        "training accuracy": f"{member['acc_end'] * 100:.0f} % from epoch {member['acc_full']}",
        f"odd/even component: alignment via c_k, k = N/2 = {member['k_half']}":
            f"{minus(member['half_at_peak'])} at the peak → {minus(member['half_end'])}",
    }


def readme_demo_table() -> dict[str, str]:
    """The rows of the README's table under `make demo` (quantity → measured)."""
    text = README.read_text()
    table = text[text.index("| quantity | measured | expected |"):].split("\n\n")[0].splitlines()[2:]
    return {cells[0]: cells[1] for cells in ([c.strip() for c in row.strip("|").split("|")] for row in table)}


def test_the_python_example_runs_and_prints_the_comparison(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    scores = ast.literal_eval(printed)  # the dict `alignment.compare` returns, as printed
    assert set(scores) == {"pearson", "spearman", "one_minus_mse", "defined"} and scores["defined"] is True
    assert -1 <= scores["pearson"] <= 1 and -1 <= scores["spearman"] <= 1 and scores["one_minus_mse"] <= 1


def test_the_demo_table_is_the_recorded_demo():
    (member,) = json.loads(RECORDED.read_text())["members"]
    assert readme_demo_table() == demo_rows(member)


@pytest.mark.extended
def test_the_demo_gives_the_readme_table(tmp_path):
    """`make demo`'s command, at its defaults: ≈ 30 s on 2 cores."""
    assert main(["run", "staircase-add", "--out", str(tmp_path / "demo")]) == 0
    (member,) = json.loads((tmp_path / "demo" / "summary.json").read_text())["members"]
    assert demo_rows(member) == readme_demo_table()
