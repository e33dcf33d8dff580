"""``ctxstair analyze-model`` (ctxstair.measure.analyze_model, SPEC §6.4, §7, §10): the LM staircase measurement of
every checkpoint of a source, its command line and its output folder. Nothing is downloaded: the models
are tiny Llama / Qwen2 / GPT-2 networks built here (model_helpers), with a BPE trained on the synthetic
corpus."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch
import transformers
from family_models import family_model
from figure_checks import assert_no_empty_axes, saved_figures
from model_helpers import save_llama, save_model

from ctxstair import rundir
from ctxstair.checkpoints import NO_VIEW
from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.measure.primitives import attention_path_correlation, attention_path_signature
from ctxstair.models import next_token_loss
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer
from ctxstair.text.windows import make_windows
from ctxstair.theory.decoder_paths import decoder_embedding_paths


@pytest.fixture(scope="module")
def text():
    return synthetic_corpus(n_sentences=400, seed=1)


@pytest.fixture(scope="module")
def tokenizer(text):
    return TextTokenizer.train_bpe(text, vocab_size=400)


@pytest.fixture
def corpus_file(tmp_path, text):
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    return path


def test_analyze_model_gives_finite_numbers_per_checkpoint(tmp_path, tokenizer, text):
    save_model(tmp_path / "run" / "checkpoint-1", tokenizer, seed=1)
    save_model(tmp_path / "run" / "checkpoint-2", tokenizer, seed=2)
    result = analyze_model(tmp_path / "run", text=text, k=30, window=32)
    setup = result["setup"]
    assert len(setup["tokens"]) == 30 and len(setup["heldout_tokens"]) > 2
    assert all(s.strip().isalpha() for s in setup["token_strings"])
    assert [row["step"] for row in result["checkpoints"]] == [1, 2]
    for row in result["checkpoints"]:
        values = [row[key] for key in ("rho_next", "rho_next_spearman", "probe_heldout_mse", "probe_shuffled_mse")]
        assert np.all(np.isfinite(values))
    assert result["similarity"]["embedding"].shape == result["similarity"]["next"].shape == (30, 30)
    again = analyze_model(tmp_path / "run", text=text, k=30, window=32, probe=False)
    assert again["checkpoints"][1]["rho_next"] == result["checkpoints"][1]["rho_next"]
    assert "probe_heldout_mse" not in again["checkpoints"][1]


def write_embedding_only_run(run, tokenizer, steps=(1, 10)):
    """An LM run directory (of the default family, Llama) whose snapshots hold only the embedding, under
    its transformers name (no model to run)."""
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("corpus: {}\n")
    tokenizer.save(run / "tokenizer.json")
    for step in steps:
        W_E = torch.randn(tokenizer.vocab_size, 8, generator=torch.Generator().manual_seed(step)).numpy()
        rundir.save_snapshot(run, step, {"model.embed_tokens.weight": W_E}, "step")


def test_cli_prints_a_line_per_checkpoint_and_writes_each_as_it_finishes(tmp_path, tokenizer, corpus_file, capsys):
    run = tmp_path / "lm"
    write_embedding_only_run(run, tokenizer)
    out = tmp_path / "out"
    args = ["analyze-model", str(run), "--corpus", str(corpus_file), "--k", "20", "--window", "32", "--out", str(out)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("ρ_next pearson" in line and "shuffled baseline" in line for line in lines) == 2
    # Snapshots holding only W_E: no model to run, and the output says so in one line.
    skipped = [line for line in lines if line.startswith("attention paths and path shares not measured: ")]
    assert len(skipped) == 1 and "is not the whole state of the llama model its run describes" in skipped[0]
    summary = json.loads((out / "analysis.json").read_text())
    assert [row["step"] for row in summary["checkpoints"]] == [1, 10] and "similarity" not in summary
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step_00000001.json", "step_00000001.npz", "step_00000010.json", "step_00000010.npz"]
    assert rundir.directory_kind(out) == rundir.SERIES
    assert (out / "analysis.png").stat().st_size > 0 and (out / "analysis.svg").stat().st_size > 0
    assert summary["figure_format"] == "svg"
    assert main(args) == 2  # an existing --out is refused before any work
    assert "already exists" in capsys.readouterr().err


def test_our_run_needs_no_corpus_and_others_do(tmp_path, tokenizer, capsys):
    save_model(tmp_path / "model", tokenizer)
    capsys.readouterr()  # transformers' progress bars
    assert main(["analyze-model", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a corpus is needed" in err


def test_resume_reads_finished_checkpoints_back_and_force_replaces_only_when_complete(tmp_path, tokenizer,
                                                                                    corpus_file, monkeypatch, capsys):
    from ctxstair.measure import analyze_model

    save_model(tmp_path / "run" / "checkpoint-1", tokenizer, seed=1)
    save_model(tmp_path / "run" / "checkpoint-2", tokenizer, seed=2)
    args = ["analyze-model", str(tmp_path / "run"), "--corpus", str(corpus_file), "--k", "20", "--window", "32"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    measure, failing = analyze_model._measure, ["checkpoint-2"]

    def interrupted(entry, *rest):  # checkpoint-2 fails once, as a run killed after one checkpoint
        if entry.name in failing:
            failing.remove(entry.name)
            raise InputError("the disk went away")
        return measure(entry, *rest)

    monkeypatch.setattr(analyze_model, "_measure", interrupted)
    out = tmp_path / "resumed"
    assert main([*args, "--out", str(out)]) == 2
    assert sorted(p.name for p in (out / "checkpoints").glob("*.json")) == ["checkpoint-1.json"]
    assert main([*args, "--k", "21", "--out", str(out), "--resume"]) == 2  # other settings: refused
    assert "holds an analysis with settings =" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--resume"]) == 0
    assert "checkpoint-1  skipped (done)" in capsys.readouterr().out
    assert (out / "analysis.json").read_bytes() == (tmp_path / "whole" / "analysis.json").read_bytes()
    # --force keeps the old analysis until the new one is complete.
    failing.append("checkpoint-2")
    assert main([*args, "--no-probe", "--out", str(out), "--force"]) == 2
    assert (out / "analysis.json").read_bytes() == (tmp_path / "whole" / "analysis.json").read_bytes()
    assert main([*args, "--no-probe", "--out", str(out), "--force"]) == 0
    assert "probe_heldout_mse" not in json.loads((out / "analysis.json").read_text())["checkpoints"][0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no replacement left over


def test_damaged_files_of_a_series_are_named_in_one_line(tmp_path, tokenizer, corpus_file, capsys):
    save_model(tmp_path / "run" / "checkpoint-1", tokenizer, seed=1)
    save_model(tmp_path / "run" / "checkpoint-2", tokenizer, seed=2)
    args = ["analyze-model", str(tmp_path / "run"), "--corpus", str(corpus_file), "--k", "20", "--window", "32"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    cases = {"analysis.json": (lambda f: f.write_text(f.read_text()[:-40]), "report", "not valid JSON"),
             "similarity.npz": (lambda f: f.write_bytes(f.read_bytes()[:100]), "report", "not a readable .npz"),
             "checkpoints/checkpoint-1.npz": (lambda f: f.write_bytes(b"PK"), "resume", "not a readable .npz"),
             "series.json": (lambda f: f.write_text("[1, 2]\n"), "resume", "a JSON list, not an object")}
    for file, (harm, command, says) in cases.items():
        out = shutil.copytree(tmp_path / "whole", tmp_path / file.replace("/", "-"))
        harm(out / file)
        before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        for argv, message in ((["report", str(out)] if command == "report" else [*args, "--out", str(out), "--resume"],
                               says), (["verify", str(out)], "corrupted or truncated")):
            capsys.readouterr()
            assert main(argv) == 2, (file, argv[0])
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"{out / file}" in err and message in err, err
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_cli_unknown_model_exits_2_with_one_line(tmp_path, capsys):
    code = main(["analyze-model", str(tmp_path / "missing"), "--corpus", "synthetic", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not found" in err
    assert not (tmp_path / "o").exists() and list(tmp_path.iterdir()) == []


def test_cli_smollm2_not_fetched_names_the_fetch_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "cache"))
    assert main(["analyze-model", "smollm2", "--corpus", "synthetic"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run: ctxstair data fetch smollm2" in err


# --- attention paths and path shares (models with a view) ------------------------------------------


def sampled_windows(result, tokenizer, text, window):
    """The windows ``analyze_model`` sampled for its path measures, rebuilt from its record."""
    setup = result["setup"]
    windows = make_windows(tokenizer.encode(text, max_tokens=2_000_000), window)
    n = setup["settings"]["attention_windows"]
    assert setup["sample"] == np.random.default_rng(0).permutation(len(windows))[:n].tolist()
    return windows[setup["sample"], : result["sample_window"]]


def test_analyze_model_refuses_more_path_windows_than_attention_windows(tmp_path, tokenizer, text):
    save_model(tmp_path / "model", tokenizer)
    with pytest.raises(InputError, match=r"path_windows must be an integer in 1..2, got 3"):
        analyze_model(tmp_path / "model", text=text, attention_windows=2, path_windows=3)


def test_attention_paths_and_shares_are_the_hugging_face_models_own(tmp_path, tokenizer, text):
    hf = save_llama(tmp_path / "llama", tokenizer)
    result = analyze_model(tmp_path / "llama", text=text, k=30, window=16, probe=False, attention_windows=6,
                           path_windows=2)
    assert result["paths_skipped"] is None and result["sample_window"] == 16
    (row,) = result["checkpoints"]
    sample, tokens, V = sampled_windows(result, tokenizer, text, 16), np.array(result["setup"]["tokens"]), \
        tokenizer.vocab_size
    X = torch.from_numpy(sample)
    # Attention paths from the Hugging Face model itself: its eager attention weights, and z = o_proj(v_proj(w))
    # with each key/value head serving its group of three query heads.
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = hf(X, output_attentions=True).attentions
        w = hf.model.embed_tokens.weight[torch.from_numpy(tokens)]
        assert len(attentions) == 2
        for layer, attention in enumerate(attentions):
            phi = attention_path_signature(sample, attention.mean(dim=1).numpy(), V, tokens)
            block = hf.model.layers[layer].self_attn
            Z = block.o_proj(block.v_proj(w).unflatten(-1, (2, 4)).repeat_interleave(3, dim=-2).flatten(-2))
            expected = attention_path_correlation(phi, Z.numpy())
            assert abs(expected) > 0.01  # not a trivial agreement
            assert row[f"attention_path_corr/{layer}"] == pytest.approx(expected, abs=1e-4)
            assert 0 < row[f"attention_path_null/{layer}"] < 1
    # Path shares, on the first two sampled windows, against an independent decomposition: the paths through
    # the stream of an untied copy of the model whose W_U is a copy of W_E, and for the output side of the
    # tied matrix the gradient that copy's own W_U gets (the model is SmolLM2-like: tied).
    ours = copy.deepcopy(hf)
    ours.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    assert ours.lm_head.weight is not ours.model.embed_tokens.weight
    shares = {name.split("/", 1)[1]: value for name, value in row.items() if name.startswith("path_share/")}
    assert list(shares) == ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1", "unembed"]
    through_stream = decoder_embedding_paths(ours, sample[:2], full=False, rows=tokens)
    (output_side,) = torch.autograd.grad(-next_token_loss(ours(input_ids=X[:2]).logits, X[:2]), ours.lm_head.weight)
    norms = {name: np.linalg.norm(g) for name, g in through_stream.items()}
    norms["unembed"] = np.linalg.norm(output_side[torch.from_numpy(tokens)].numpy())
    assert shares == pytest.approx({name: n / sum(norms.values()) for name, n in norms.items()}, abs=1e-6)
    assert shares["unembed"] > 0.05  # the output side is not negligible: leaving it out would be wrong
    # ...whose paths sum to the gradient of the Hugging Face model's own loss w.r.t. its input embeddings.
    embeds = hf.model.embed_tokens(X[:2]).detach().requires_grad_(True)
    logits = hf(inputs_embeds=embeds).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), X[:2, 1:].flatten())
    (gradient,) = torch.autograd.grad(loss, embeds)
    per_token = torch.zeros(V, 24).index_add_(0, X[:2].flatten(), gradient.flatten(0, 1))[torch.from_numpy(tokens)]
    paths = decoder_embedding_paths(ours, sample[:2], full=False, rows=tokens)
    assert np.abs(per_token.numpy()).max() > 1e-4
    np.testing.assert_allclose(sum(paths.values()), -per_token.numpy(), atol=1e-4 * np.abs(per_token.numpy()).max())


def test_a_family_without_a_view_gets_rho_next_and_the_probe_and_the_reason(tmp_path, tokenizer, text, capsys):
    config = transformers.AutoConfig.for_model("bloom", vocab_size=tokenizer.vocab_size, hidden_size=16, n_layer=1,
                                               n_head=2, bos_token_id=None, eos_token_id=None)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "bloom")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(tmp_path / "bloom")
    result = analyze_model(tmp_path / "bloom", text=text, k=20, window=32)
    assert result["paths_skipped"].startswith(NO_VIEW) and "'bloom'" in result["paths_skipped"]
    assert "src/ctxstair/models/view/families/" in result["paths_skipped"]
    (row,) = result["checkpoints"]
    assert np.isfinite(row["rho_next"]) and np.isfinite(row["probe_heldout_mse"])
    assert not any(name.startswith(("attention_path", "path_share")) for name in row)
    assert main(["analyze-model", str(tmp_path / "bloom"), "--corpus", "synthetic", "--k", "20", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert f"attention paths and path shares not measured: {NO_VIEW}" in out and "ρ_next pearson" in out


@pytest.mark.parametrize("family", ["gpt_neox", "gpt2", "qwen2", "olmo2", "gemma", "llama"])
def test_every_family_gets_every_measure(tmp_path, tokenizer, corpus_file, capsys, family):
    model = family_model(family, dtype=torch.float32, vocab_size=tokenizer.vocab_size)
    model.save_pretrained(tmp_path / family)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(tmp_path / family)
    capsys.readouterr()
    assert main(["analyze-model", str(tmp_path / family), "--corpus", str(corpus_file), "--k", "20", "--window", "16",
                 "--windows", "4", "--path-windows", "2", "--probe-steps", "20", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "ρ_next pearson" in out and "probe" in out and "not measured" not in out
    assert "attention-path corr by layer  0: " in out and " 1: " in out
    assert "path shares of the embedding update: direct " in out
    assert ("unembedding (tied)" in out) == bool(model.config.tie_word_embeddings)
    (row,) = json.loads((tmp_path / "out" / "analysis.json").read_text())["checkpoints"]
    shares = [value for name, value in row.items() if name.startswith("path_share/")]
    assert len(shares) == 5 + bool(model.config.tie_word_embeddings) and sum(shares) == pytest.approx(1.0)
    assert all(np.isfinite(row[f"attention_path_corr/{layer}"]) for layer in (0, 1))


def test_cli_prints_and_writes_the_path_measures_and_no_paths_skips_them(tmp_path, tokenizer, corpus_file, capsys):
    save_llama(tmp_path / "llama", tokenizer)
    args = ["analyze-model", str(tmp_path / "llama"), "--corpus", str(corpus_file), "--k", "20", "--window", "16",
            "--windows", "4", "--path-windows", "2", "--no-probe"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "attention paths on 4 windows and path shares on 2 of them, 16 tokens each" in out
    assert "attention-path corr by layer  0: " in out and "|r| above the null in" in out
    assert "path shares of the embedding update: direct " in out
    summary = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert summary["setup"]["settings"]["attention_windows"] == 4 and len(summary["setup"]["sample"]) == 4
    (row,) = summary["checkpoints"]
    assert sum(value for name, value in row.items() if name.startswith("path_share/")) == pytest.approx(1.0)
    assert {"attention_path_corr/0", "attention_path_corr/1"} <= set(row)
    assert (tmp_path / "out" / "analysis.png").stat().st_size > 0

    assert main([*args, "--no-paths", "--out", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert "attention" not in out and "path shares" not in out
    summary = json.loads((tmp_path / "plain" / "analysis.json").read_text())
    assert summary["setup"]["sample"] == [] and not any("path" in name for name in summary["checkpoints"][0])


def test_a_series_figure_has_no_empty_panel_in_every_format(tmp_path, tokenizer, corpus_file, capsys):
    for step, seed in ((10, 1), (20, 2)):
        save_llama(tmp_path / "llama" / f"checkpoint-{step}", tokenizer, seed=seed)
    out = tmp_path / "out"
    with saved_figures() as figures:
        assert main(["analyze-model", str(tmp_path / "llama"), "--corpus", str(corpus_file), "--k", "20", "--window",
                     "16", "--windows", "4", "--path-windows", "2", "--probe-steps", "20", "--out", str(out),
                     "--figure-format", "pdf"]) == 0
    assert f"and {out / 'analysis.pdf'}" in capsys.readouterr().out
    # pairs, ρ_next, probe; the attention heatmap (with its colour bar) and the path shares: no sixth panel
    (figure,) = figures
    assert len(figure.axes) == 6 and [ax.get_title() != "" for ax in figure.axes].count(True) == 5
    assert_no_empty_axes(figures)
    assert (out / "analysis.pdf").read_bytes().startswith(b"%PDF") and not (out / "analysis.svg").exists()
    assert json.loads((out / "analysis.json").read_text())["figure_format"] == "pdf"
    for figure_format, files in (("svg", ["analysis.png", "analysis.svg"]), ("png", ["analysis.png"])):
        assert main(["report", str(out), "--figure-format", figure_format]) == 0
        assert sorted(p.name for p in out.glob("analysis.*") if p.suffix != ".json") == files
        assert json.loads((out / "analysis.json").read_text())["figure_format"] == figure_format
    with pytest.raises(SystemExit) as refused:
        main(["report", str(out), "--figure-format", "eps"])
    assert refused.value.code == 2 and "invalid choice: 'eps'" in capsys.readouterr().err


@pytest.mark.parametrize("options, message", [
    (["--windows", "0"], "--windows must be at least 1, got 0"),
    (["--path-windows", "-1"], "--path-windows must be at least 1, got -1"),
    (["--windows", "2", "--path-windows", "3"], "--path-windows 3 exceeds --windows 2"),
])
def test_cli_bad_window_counts_exit_2_with_one_line(tmp_path, tokenizer, capsys, options, message):
    save_model(tmp_path / "model", tokenizer)
    capsys.readouterr()
    code = main(["analyze-model", str(tmp_path / "model"), "--corpus", "synthetic", *options,
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "o").exists()


def test_cli_help_states_the_default_window_counts(capsys):
    from ctxstair.measure.staircase import StaircaseSettings

    with pytest.raises(SystemExit):
        main(["analyze-model", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = StaircaseSettings()
    assert f"(default {defaults.attention_windows};" in text
    assert f"(default {defaults.path_windows}, or --windows if smaller;" in text


def test_statistics_of_another_tokenizer_are_refused_before_any_weight_is_read(tmp_path, tokenizer, text, capsys,
                                                                                 monkeypatch):
    from model_helpers import write_embedding_gguf

    from ctxstair.checkpoints import gguf_file
    from ctxstair.corpus import count_corpus

    write_embedding_gguf(tmp_path / "model.gguf", tokenizer, "F32")
    other = TextTokenizer.train_bpe(text, vocab_size=300)
    np.save(tmp_path / "ids.npy", other.encode(text).astype(np.uint16))
    count_corpus([tmp_path / "ids.npy"], tmp_path / "stats", tokenizer=other, window=16, k=5)

    def never(*args):
        raise AssertionError("the model's weights were read")

    for reader in ("_gguf_embeddings", "_gguf_model", "_positions"):
        monkeypatch.setattr(gguf_file, reader, never)
    with pytest.raises(InputError, match="was counted with another tokenizer"):
        analyze_model(tmp_path / "model.gguf", stats=tmp_path / "stats")
    assert main(["analyze-model", str(tmp_path / "model.gguf"), "--stats", str(tmp_path / "stats"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another tokenizer (vocabulary of 300 tokens" in err
    assert not (tmp_path / "out").exists()
