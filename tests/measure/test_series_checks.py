"""Tests for the series checks of ``ctxstair analyze-model ORG/NAME --revisions``
(ctxstair.measure.analyze_model.series_checks, ctxstair.checkpoints.hub): byte-identical embeddings flagged, a
changed tokenizer refused, vocabulary padding recorded and harmless, the branch names of each released series read as
steps (and tokens seen). Offline, on the fake Hub cache of tests/helpers/hub_helpers.py."""

from __future__ import annotations

import json
import shutil

import hub_helpers
import numpy as np
import pytest
import torch
import transformers
from hub_helpers import REVISIONS, add_series, cli, run_series, save_neox
from short_runs import PNG_ONLY

from ctxstair.checkpoints.base import embedding_sha256
from ctxstair.checkpoints.hub import in_step_order, parse_revisions, revision_position, revision_step
from ctxstair.errors import InputError
from ctxstair.measure.schema import PROBE, RHO_NEXT
from ctxstair.report.lm_figures import analysis_figure
from ctxstair.report.lm_series import analysis_series
from ctxstair.text.tokenizer import TextTokenizer

# The fixtures of tests/helpers/hub_helpers.py: its fake Hub cache, its corpus and the tokenizer of its models.
fake_hub, text, tokenizer = hub_helpers.fake_hub, hub_helpers.text, hub_helpers.tokenizer
DUPLICATE = "its embedding is byte-identical to step0's"
EQUALS_MAIN = "its embedding is byte-identical to main's, yet it is not the last step (16)"


#: Branch names of each released series in step order, each with (step, tokens seen) as the name says them; the
#: text order differs from the step order (step1000 < step512, checkpoint-400 < checkpoint-50) but for LLM360's
#: zero-padded numbers.
SCHEMES = {
    "pythia": [("step0", 0, None), ("step512", 512, None), ("step1000", 1000, None), ("step143000", 143000, None)],
    "olmo": [("stage1-step0-tokens0B", 0, 0), ("step1000-tokens4B", 1000, 4 * 10**9),
             ("stage1-step2000-tokens8B", 2000, 8 * 10**9),
             ("stage2-ingredient1-step23852-tokens200B", 23852, 200 * 10**9)],
    "llm360": [("ckpt_000", 0, None), ("ckpt_009", 9, None), ("ckpt_010", 10, None), ("ckpt_358", 358, None)],
    "smollm": [("step-0", 0, None), ("step-2000", 2000, None), ("step-125000", 125000, None)],
    "stanford-crfm": [("checkpoint-50", 50, None), ("checkpoint-400", 400, None), ("checkpoint-400000", 400000, None)],
}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_naming_scheme_gives_the_step_and_tokens_seen_and_the_order(scheme):
    names = [name for name, _, _ in SCHEMES[scheme]]
    for name, step, tokens in SCHEMES[scheme]:
        assert revision_position(name) == (step, tokens), name
        assert revision_step(name) == step
    assert (sorted(names) == names) == (scheme == "llm360")
    assert in_step_order(["main", *reversed(names)]) == [*names, "main"]  # a name without a step last, as before
    assert in_step_order([names[-1], "main", *names[:-1]]) == [*names, "main"]


def test_names_of_no_scheme_have_no_step():
    for other in ("main", "stepper", "step", "step10x", "stage1-main", "step1000-tokens", "ckpt_", "ckpt_1x",
                  "ckpt-5", "step-", "step-5x", "checkpoint-", "checkpoint_5", "checkpoint-5-final", "stage1-step-5"):
        assert revision_position(other) == (None, None), other
    # A token count in a unit not known is not read; the step still is.
    assert revision_position("step1000-tokens4x") == (1000, None)
    assert in_step_order(["main", "ckpt_", "ckpt_002"]) == ["ckpt_002", "main", "ckpt_"]


def test_olmo_rows_carry_the_tokens_seen_and_the_series_reads_them(fake_hub, tokenizer, tmp_path):
    olmo = [name for name, _, _ in SCHEMES["olmo"][:3]]
    folders = add_series(fake_hub, tokenizer, "neox", revisions=olmo)
    options = ["--corpus", "synthetic", "--k", "20", "--window", "16", "--no-probe", *PNG_ONLY]
    assert cli("org/tiny", "--revisions", ",".join(reversed(olmo)), *options, "--out", str(tmp_path / "olmo")) == 0
    rows = json.loads((tmp_path / "olmo" / "analysis.json").read_text())["checkpoints"]
    assert [(row["name"], row["step"], row["tokens"]) for row in rows] == [
        ("stage1-step0-tokens0B", 0, 0), ("step1000-tokens4B", 1000, 4_000_000_000),
        ("stage1-step2000-tokens8B", 2000, 8_000_000_000)]
    series = analysis_series(tmp_path / "olmo")
    assert list(series.steps) == [0, 1000, 2000] and list(series.tokens) == [0, 4 * 10**9, 8 * 10**9]
    assert "tokens" not in series.values and "step" not in series.values  # positions, not measures
    # main has neither: the series then has no tokens axis, and the rows of the others still do.
    copy_snapshot(fake_hub, folders[olmo[-1]], "org/tiny", "main")
    assert cli("org/tiny", "--revisions", f"main,{olmo[0]}", *options, "--out", str(tmp_path / "with-main")) == 0
    first, main = json.loads((tmp_path / "with-main" / "analysis.json").read_text())["checkpoints"]
    assert (first["tokens"], main["step"], "tokens" in main) == (0, None, False)
    mixed = analysis_series(tmp_path / "with-main")
    assert mixed.steps is None and mixed.tokens is None and "tokens" not in mixed.values
    # Pythia's rows have no tokens field at all.
    add_series(fake_hub, tokenizer, "neox", repo_id="org/pythia", revisions=REVISIONS[:2])
    assert cli("org/pythia", "--revisions", "step0,step1", *options, "--out", str(tmp_path / "pythia")) == 0
    assert analysis_series(tmp_path / "pythia").tokens is None
    assert not any("tokens" in row for row in json.loads((tmp_path / "pythia" / "analysis.json").read_text())[
        "checkpoints"])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_log_n_picks_each_scheme_by_its_step(fake_hub, scheme):
    names = [name for name, _, _ in SCHEMES[scheme]]
    for name in [*names, "main"]:
        fake_hub.snapshot("org/tiny", name)  # log:N lists the refs alone
    assert parse_revisions("org/tiny", "log:2") == [names[0], names[-1]]
    assert parse_revisions("org/tiny", "log:10") == names
    if scheme == "llm360":  # log(1 + step) = 0, 2.30, 2.40, 5.89: the middle target 2.94 is nearest ckpt_010
        assert parse_revisions("org/tiny", "log:3") == ["ckpt_000", "ckpt_010", "ckpt_358"]


def copy_snapshot(fake_hub, source, repo_id: str, revision: str) -> None:
    """A revision serving the files of another, byte for byte, under a commit of its own."""
    target = fake_hub.snapshot(repo_id, revision)
    for file in source.iterdir():
        shutil.copy(file, target / file.name)


def test_duplicated_branches_are_flagged_recorded_and_left_out_of_the_curve(fake_hub, tokenizer, text, tmp_path,
                                                                           capsys):
    folders = add_series(fake_hub, tokenizer, "neox")  # step0, step1, step4, step16, each its own weights
    copy_snapshot(fake_hub, folders["step16"], "org/tiny", "main")  # main is the last step: by right
    for revision, like in (("step1", "step0"), ("step4", "main")):  # mis-served branches
        shutil.rmtree(folders[revision])
        copy_snapshot(fake_hub, folders["step16" if like == "main" else like], "org/tiny", revision)
    capsys.readouterr()
    out = tmp_path / "series"
    args = ["org/tiny", "--revisions", "step0,step1,step4,step16", "--corpus", "synthetic", "--k", "20",
            "--window", "16", *PNG_ONLY]
    assert cli(*args, "--out", str(out)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"flagged step1, left out of the curves: {DUPLICATE}" in lines
    assert f"flagged step4, left out of the curves: {EQUALS_MAIN}" in lines
    checks = json.loads((out / "series.json").read_text())["checks"]
    assert checks == json.loads((out / "analysis.json").read_text())["checks"]
    # Each hash is that of the matrix transformers loads, computed here from the model itself.
    expected = {}
    for revision in ("step0", "step16"):
        model = transformers.AutoModelForCausalLM.from_pretrained(folders[revision])
        expected[revision] = embedding_sha256(model.get_input_embeddings().weight.detach().numpy())
    assert expected["step0"] != expected["step16"]
    assert checks["embedding_sha256"] == {"step0": expected["step0"], "step1": expected["step0"],
                                          "step4": expected["step16"], "step16": expected["step16"]}
    assert checks["main"] == {"checked": True, "sha256": expected["step16"]}  # hashed though not in the series
    assert checks["last_step"] == 16
    assert checks["flagged"] == {"step1": [DUPLICATE], "step4": [EQUALS_MAIN]}
    assert checks["keep_flagged"] is False
    # Rows stay, the curve leaves the flagged ones out and the figure marks them.
    series = analysis_series(out)
    assert series.names == ["step0", "step1", "step4", "step16"]
    assert list(series.measured(RHO_NEXT)[0]) == [0, 16]
    assert list(series.flagged_points(RHO_NEXT)[0]) == [1, 4]
    rho = series.values[RHO_NEXT]
    assert rho[0] == rho[1] and rho[2] == rho[3]  # the duplicates measure as what they serve
    figure = analysis_figure(out)
    labels = figure.axes[1].get_legend_handles_labels()[1]
    assert "flagged: left out of the curve" in labels  # why: in the title
    assert "step1" in figure.get_suptitle() and "step4" in figure.get_suptitle()
    # --keep-flagged keeps them in, and says so; the checkpoints are read back, not measured again.
    assert cli(*args, "--out", str(tmp_path / "kept"), "--keep-flagged") == 0
    assert f"flagged step1, kept in the curves (--keep-flagged): {DUPLICATE}" in capsys.readouterr().out
    kept = analysis_series(tmp_path / "kept")
    assert kept.keep_flagged and list(kept.measured(RHO_NEXT)[0]) == [0, 1, 4, 16]
    assert list(kept.measured(PROBE)[1]) == list(series.values[PROBE])


def test_without_main_the_check_against_it_is_recorded_as_not_made(fake_hub, tokenizer, text):
    folders = add_series(fake_hub, tokenizer, "neox", revisions=["step0", "step1"])
    shutil.rmtree(folders["step1"])
    copy_snapshot(fake_hub, folders["step0"], "org/tiny", "step1")
    checks = run_series("org/tiny", ["step0", "step1"], text, paths=False)["checks"]
    assert checks["flagged"] == {"step1": [DUPLICATE]}
    assert checks["main"]["checked"] is False
    assert "config.json of org/tiny at main is not in the local Hugging Face cache" in checks["main"]["why"]
    assert checks["tokenizer"]["revisions"] == {"step1": "same as step0"}


def test_a_revision_with_another_tokenizer_is_refused_by_name(fake_hub, tokenizer, text):
    add_series(fake_hub, tokenizer, "neox", revisions=["step0", "step1"])
    bigger = TextTokenizer.train_bpe(text, vocab_size=410)
    save_neox(fake_hub.snapshot("org/tiny", "step4"), bigger, seed=3)
    with pytest.raises(InputError, match=r"revision step4 of org/tiny has a tokenizer of 410 tokens, not the 400 "
                                         r"of step0: not one series"):
        run_series("org/tiny", ["step0", "step1", "step4"], text, paths=False)
    other = TextTokenizer.train_bpe(text[len(text) // 2:], vocab_size=400)  # same size, other merges
    assert other.vocab_size == 400 and other.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab()
    save_neox(fake_hub.snapshot("org/tiny", "step16"), other, seed=4)
    with pytest.raises(InputError, match=r"revision step16 of org/tiny has a tokenizer unlike step0's \(its "
                                         r"tokenizer.json differs in model\)"):
        run_series("org/tiny", ["step0", "step16"], text, paths=False)


def test_padded_embedding_rows_are_recorded_and_change_no_measure(fake_hub, tokenizer, text):
    (unpadded_folder,) = add_series(fake_hub, tokenizer, "neox", repo_id="org/unpadded", revisions=["step0"]).values()
    unpadded = transformers.AutoModelForCausalLM.from_pretrained(unpadded_folder)
    # The same model with 16 more rows of random weights in its input and output embeddings (as Pythia's
    # 50,304 rows for 50,277 tokens): rows no text ever uses.
    config = transformers.GPTNeoXConfig(**{**unpadded.config.to_dict(), "vocab_size": tokenizer.vocab_size + 16})
    torch.manual_seed(7)
    padded = transformers.AutoModelForCausalLM.from_config(config)
    state = unpadded.state_dict()
    with torch.no_grad():
        for name, tensor in padded.state_dict().items():
            tensor[: state[name].shape[0]] = state[name]
    folder = fake_hub.snapshot("org/padded", "step0")
    padded.save_pretrained(folder)
    shutil.copy(unpadded_folder / "tokenizer.json", folder / "tokenizer.json")
    a = run_series("org/unpadded", ["step0"], text, paths=False)
    b = run_series("org/padded", ["step0"], text, paths=False)
    assert (b["checks"]["embedding_rows"], b["checks"]["tokenizer_size"], b["checks"]["padding_rows"]) == (416, 400, 16)
    assert (a["checks"]["embedding_rows"], a["checks"]["padding_rows"]) == (400, 0)
    assert b["setup"]["vocab_size"] == 416 and a["setup"]["vocab_size"] == 400  # V: the embedding rows
    (row_a,), (row_b,) = a["checkpoints"], b["checkpoints"]
    assert row_a["embedding_sha256"] != row_b["embedding_sha256"]
    # The padded rows are never among the tokens T, and as next tokens they are columns of zeros in every
    # signature: the probe (on W_E[T] alone) is the same bits, ρ_next the same up to the order of BLAS sums.
    for key in row_a:
        if key.startswith("probe"):
            assert row_a[key] == row_b[key], key
    for key in ("rho_next", "rho_next_spearman"):
        np.testing.assert_allclose(row_b[key], row_a[key], rtol=1e-12, atol=0)
    np.testing.assert_allclose(b["similarity"]["next"], a["similarity"]["next"], rtol=0, atol=1e-14)
    np.testing.assert_array_equal(b["similarity"]["embedding"], a["similarity"]["embedding"])


def test_a_folder_of_checkpoints_checks_every_tokenizer_against_the_first(tokenizer, text, tmp_path):
    from model_helpers import save_model

    from ctxstair.checkpoints.hf_folder import HFFolderSource
    from ctxstair.measure.analyze_model import analyze_model

    for step in (1, 2, 3):
        save_model(tmp_path / "run" / f"checkpoint-{step}", tokenizer, seed=step)
    (tmp_path / "run" / "checkpoint-3" / "tokenizer.json").unlink()
    source = HFFolderSource(tmp_path / "run")
    assert source.tokenizer_checks == {"checkpoint-2": "same as checkpoint-1",
                                       "checkpoint-3": "not compared: no tokenizer.json"}
    result = analyze_model(tmp_path / "run", text=text, k=20, window=16, probe=False, paths=False)
    assert result["checks"]["tokenizer"]["revisions"] == source.tokenizer_checks
    other = TextTokenizer.train_bpe(text, vocab_size=410)
    save_model(tmp_path / "run" / "checkpoint-3", other, seed=3)
    with pytest.raises(InputError, match=r"checkpoint-3 of .*run has a tokenizer of 410 tokens, not the 400 of "
                                         r"checkpoint-1: not one series"):
        HFFolderSource(tmp_path / "run")
    shutil.copy(tmp_path / "run" / "checkpoint-1" / "tokenizer.json", tmp_path / "run" / "checkpoint-3")
    changed = json.loads((tmp_path / "run" / "checkpoint-1" / "tokenizer.json").read_text())
    changed["model"]["merges"] = changed["model"]["merges"][::-1]
    (tmp_path / "run" / "checkpoint-2" / "tokenizer.json").write_text(json.dumps(changed))
    with pytest.raises(InputError, match=r"checkpoint-2 of .*run has a tokenizer unlike checkpoint-1's \(its "
                                         r"tokenizer.json differs in model\)"):
        HFFolderSource(tmp_path / "run")


def test_the_attention_heatmap_hatches_the_flagged_columns(fake_hub, tokenizer, text, tmp_path):
    folders = add_series(fake_hub, tokenizer, "llama", revisions=["step0", "step1", "step4"])
    shutil.rmtree(folders["step1"])
    copy_snapshot(fake_hub, folders["step0"], "org/tiny", "step1")
    out = tmp_path / "series"
    assert cli("org/tiny", "--revisions", "step0,step1,step4", "--corpus", "synthetic", "--k", "20", "--window", "16",
               "--out", str(out)) == 0
    figure = analysis_figure(out)
    (heatmap,) = [ax for ax in figure.axes if ax.get_title().startswith("attention-path correlation by layer")]
    hatched = [patch for patch in heatmap.patches if patch.get_hatch()]
    assert [patch.get_x() + 0.5 for patch in hatched] == [1]  # step1's column alone
    assert "flagged (hatched)" in heatmap.get_legend_handles_labels()[1]
