"""The verdict table (ctxstair.recipes.verdicts): every recipe has the paper's claim and a recorded
example, each example holds its recipe's current defaults, docs/recipes.md shows the current table,
and the verdict and the table's cells say what the key numbers say. No training: seconds."""

import json
from pathlib import Path

from repo_paths import ROOT

from ctxstair import rundir
from ctxstair.config import dump_yaml
from ctxstair.recipes import ComputedRecipe, TrainerRecipe, all_recipes, get
from ctxstair.recipes.verdicts import BEGIN, END, our_setting, verdict, verdict_rows, verdict_table, with_table

EXAMPLES = ROOT / "docs" / "examples" / "recipes"
RECORD = "python scripts/record_examples.py --only NAME"
REGENERATE = "python -m ctxstair.recipes.verdicts docs/examples/recipes --write docs/recipes.md"


def expected_example_files(recipe) -> dict[str, object]:
    """Relative path -> the content an example of ``recipe`` recorded at today's defaults holds
    (the text of a YAML file, the parsed payload of a JSON one); summary.json aside."""
    if isinstance(recipe, ComputedRecipe):
        return {"recipe.json": {"recipe": recipe.name, "parts": [], "params": recipe.params({})}}
    if isinstance(recipe, TrainerRecipe):
        return {"config.yaml": dump_yaml(recipe.configure({}))}
    configs = recipe.resolve({})
    if list(configs) == [""]:
        return {"config.yaml": dump_yaml(configs[""])}
    return {"recipe.json": {"recipe": recipe.name, "parts": list(configs)},
            **{f"{part}/config.yaml": dump_yaml(cfg) for part, cfg in configs.items()}}


def recorded_example_files(example: Path) -> dict[str, object]:
    """Relative path -> content of every file of a recorded example but summary.json, as
    :func:`expected_example_files` gives it."""
    found = {}
    for path in sorted(p for p in example.rglob("*") if p.is_file() and p.name != "summary.json"):
        text = path.read_text()
        found[path.relative_to(example).as_posix()] = json.loads(text) if path.suffix == ".json" else text
    return found


def write_example(examples: Path, name: str, key_numbers: list[tuple]) -> None:
    """A recorded example of recipe ``name`` at its defaults, with made-up key numbers."""
    example = examples / name
    for rel, content in expected_example_files(get(name)).items():
        (example / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            (example / rel).write_text(content)
        else:
            rundir.write_json(example, rel, content)
    rundir.write_json(example, "summary.json", {"recipe": name, "key_numbers": [
        {"name": key, "measured": measured, "expected": "", "met": met} for key, measured, met in key_numbers]})


def test_every_recipe_has_the_papers_claim_and_a_recorded_example():
    names = [recipe.name for recipe in all_recipes()]
    unstated = [recipe.name for recipe in all_recipes() if not (recipe.paper.claim and recipe.paper.settings)]
    assert not unstated, f"give {', '.join(unstated)} the paper's claim and settings (its paper=Paper(...))"
    unrecorded = [name for name in names if not (EXAMPLES / name / "summary.json").is_file()]
    assert not unrecorded, f"no example of {', '.join(unrecorded)}; record each: {RECORD}"


def test_recorded_examples_hold_the_recipes_current_defaults():
    stale = {}
    for recipe in all_recipes():
        example = EXAMPLES / recipe.name
        if example.is_dir():  # a missing one fails the test above
            expected, recorded = expected_example_files(recipe), recorded_example_files(example)
            differing = sorted(rel for rel in expected.keys() | recorded.keys()
                               if expected.get(rel) != recorded.get(rel))
            if differing:
                stale[recipe.name] = differing
    assert stale == {}, f"defaults changed since these examples were recorded; re-record them: {RECORD}"


def test_docs_recipes_md_shows_the_current_table():
    doc = (ROOT / "docs" / "recipes.md").read_text()
    assert BEGIN in doc and END in doc, f"docs/recipes.md lacks the {BEGIN} … {END} block; fill it with `{REGENERATE}`"
    block = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip("\n") == verdict_table(EXAMPLES), f"regenerate the block: `{REGENERATE}`"


def test_the_table_is_written_between_its_markers_and_nowhere_else():
    doc = f"# Recipes\n\nbefore\n\n{BEGIN}\n| old |\n{END}\n\nafter\n"
    assert with_table(doc, "| new |\n|---|") == f"# Recipes\n\nbefore\n\n{BEGIN}\n| new |\n|---|\n{END}\n\nafter\n"
    current = (ROOT / "docs" / "recipes.md").read_text()
    assert with_table(current, verdict_table(EXAMPLES)) == current, f"regenerate the block: `{REGENERATE}`"


def test_verdict_judges_only_the_judged_key_numbers():
    def judged(*met):
        return [{"name": f"k{i}", "measured": "1", "expected": "1", "met": m} for i, m in enumerate(met)]

    assert verdict(judged(True, True, None)) == "reproduced"
    assert verdict(judged(False, None, False)) == "not reproduced"
    assert verdict(judged(True, False, None)) == "partly"
    assert verdict(judged(None, None)) == "—"
    assert verdict([]) == "—"


def test_our_setting_says_what_is_shared_and_what_varies():
    grid = our_setting(get("activation-order").resolve({}))
    assert grid.startswith("task = sum_mod, N = 10, model = CBOW, σ = z^K")
    assert grid.endswith("; L ∈ {2, 3, 4} × K ∈ 1..6")
    assert "optimizer = Adam lr 0.01" in grid and "epochs = 1000" in grid
    # two parts that differ in two ways are no grid: each part says its own
    assert our_setting(get("attention-arith").resolve({})).endswith("; add: task = add, seeds = 1; "
                                                                      "mod: task = mod, seeds = 3")


def test_table_rows_carry_each_recipes_key_numbers_and_verdict(tmp_path):
    write_example(tmp_path, "staircase-add", [
        ("order-0 Pearson |ρ| at its early peak", "0.995 at epoch 400; loss 3.1 → 1.2", True),
        ("odd/even alignment", "0.193", None)])
    write_example(tmp_path, "init-scaling", [("slope, m = 1", "-0.649 (95 % CI -0.689 … -0.608)", False)])
    rows = {row["experiment"].split(" — ")[0]: row for row in verdict_rows(tmp_path)}
    assert set(rows) == {recipe.name for recipe in all_recipes()}

    add = rows["staircase-add"]
    # cut at the clause, every number as written
    assert add["measured"] == ("order-0 Pearson |ρ| at its early peak: 0.995 at epoch 400 … ✓; "
                               "odd/even alignment: 0.193 –")
    assert add["verdict"] == "reproduced"
    assert add["our_setting"].startswith("task = add, N = 40, model = CBOW, σ = relu")
    init = rows["init-scaling"]
    assert init["measured"] == "slope, m = 1: -0.649 (95 % CI -0.689 … -0.608) ✗"
    assert (init["verdict"], init["our_setting"][:34]) == ("not reproduced", "no training; task = sum_mod, N = 6")
    assert {row["verdict"] for name, row in rows.items() if name not in ("staircase-add", "init-scaling")} \
        == {"not recorded"}

    table = verdict_table(tmp_path).splitlines()
    assert table[0] == "| experiment | paper claim | paper settings | our setting | measured | verdict |"
    line = next(line for line in table if line.startswith("| staircase-add — "))
    assert line.endswith(" ✓; odd/even alignment: 0.193 – | reproduced |")
    assert line.count(" | ") == 5  # a "|" in a cell is escaped
    assert next(line for line in table if line.startswith("| init-scaling — ")).endswith("✗ | not reproduced |")
