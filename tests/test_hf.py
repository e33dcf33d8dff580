"""Tests for ctxstair.lm.hf and ``ctxstair analyze-model`` (SPEC §6.4, §7, §10). Nothing is
downloaded: the models are tiny Llama / Qwen2 / GPT-2 networks built here from a config (and a
Llama GGUF file written here), with a BPE trained on the synthetic corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.lm.analysis import attention_path_correlation, attention_path_signature, path_shares
from ctxstair.lm.corpus import synthetic_corpus
from ctxstair.lm.hf import NEEDS_LLAMA, analyze_model, iter_checkpoints, load_embeddings
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.lm.windows import make_windows
from ctxstair.models.decoder_hf import from_hf
from ctxstair.theory.decoder_paths import decoder_embedding_paths


@pytest.fixture(scope="module")
def text():
    return synthetic_corpus(n_sentences=400, seed=1)


@pytest.fixture(scope="module")
def tokenizer(text):
    return TextTokenizer.train_bpe(text, vocab_size=400)


def save_model(folder, tokenizer, family="llama", seed=0):
    """A tiny causal LM of ``family`` with ``tokenizer``'s vocabulary, saved the Hugging Face way;
    returns its input embeddings."""
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    config = config_class(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(folder)
    return model.get_input_embeddings().weight.detach().numpy().copy()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_hugging_face_directory_gives_exactly_its_input_embeddings(tmp_path, tokenizer, family):
    W_E = save_model(tmp_path / "model", tokenizer, family)
    (checkpoint,) = load_embeddings(tmp_path / "model")
    assert checkpoint.step is None and checkpoint.name == "model"
    np.testing.assert_array_equal(checkpoint.W_E, W_E)
    ids = tokenizer.encode("after monday comes tuesday .")
    np.testing.assert_array_equal(checkpoint.tokenizer.encode("after monday comes tuesday ."), ids)


def test_checkpoint_folder_gives_one_checkpoint_per_step_in_order(tmp_path, tokenizer):
    later = save_model(tmp_path / "run" / "checkpoint-20", tokenizer, seed=2)
    earlier = save_model(tmp_path / "run" / "checkpoint-10", tokenizer, seed=1)
    save_model(tmp_path / "run", tokenizer, seed=3)  # a final model at the top: the checkpoints win
    (tmp_path / "run" / "logs").mkdir()  # other folders are ignored
    checkpoints = load_embeddings(tmp_path / "run")
    assert [c.step for c in checkpoints] == [10, 20]
    assert [c.name for c in checkpoints] == ["checkpoint-10", "checkpoint-20"]
    np.testing.assert_array_equal(checkpoints[0].W_E, earlier)
    np.testing.assert_array_equal(checkpoints[1].W_E, later)


def test_lm_run_directory_gives_one_checkpoint_per_snapshot(tmp_path, tokenizer):
    from safetensors.torch import save_file

    run = tmp_path / "lm"
    (run / "snapshots").mkdir(parents=True)
    (run / "config.yaml").write_text("corpus: {}\n")
    tokenizer.save(run / "tokenizer.json")
    snapshots = {step: torch.randn(tokenizer.vocab_size, 8, generator=torch.Generator().manual_seed(step))
                 for step in (0, 3, 100)}
    for step, W_E in snapshots.items():
        save_file({"W_E": W_E, "W_U": torch.zeros(3, 8)}, run / "snapshots" / f"step_{step:08d}.safetensors")
    checkpoints = load_embeddings(run)
    assert [c.step for c in checkpoints] == [0, 3, 100]
    for checkpoint in checkpoints:
        np.testing.assert_array_equal(checkpoint.W_E, snapshots[checkpoint.step].numpy())
        assert checkpoint.tokenizer.vocab_size == tokenizer.vocab_size


def test_checkpoints_without_a_tokenizer_use_the_run_folders(tmp_path, tokenizer):
    save_model(tmp_path / "run" / "checkpoint-5", tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "run" / "checkpoint-5" / name).unlink()
    tokenizer.save(tmp_path / "run" / "tokenizer.json")
    (checkpoint,) = load_embeddings(tmp_path / "run")
    assert checkpoint.tokenizer.encode("my mother smiled .").tolist() == tokenizer.encode("my mother smiled .").tolist()


@pytest.mark.parametrize("quantisation", ["F32", "Q4_1"])
def test_gguf_file_gives_its_dequantised_embeddings_and_its_tokenizer(tmp_path, tokenizer, quantisation):
    import gguf

    spec = json.loads(tokenizer.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    W_E = np.random.default_rng(0).normal(size=(len(vocab), 32)).astype(np.float32)  # Q4_1 blocks of 32
    kind = gguf.GGMLQuantizationType[quantisation]
    stored = gguf.quants.quantize(W_E, kind)
    writer = gguf.GGUFWriter(tmp_path / "tiny.gguf", "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(sorted(vocab, key=vocab.get))
    writer.add_token_merges([" ".join(merge) for merge in spec["model"]["merges"]])
    writer.add_token_types([gguf.TokenType.NORMAL] * len(vocab))
    writer.add_tensor("token_embd.weight", stored, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (checkpoint,) = load_embeddings(tmp_path / "tiny.gguf")
    assert checkpoint.name == "tiny.gguf" and checkpoint.step is None
    np.testing.assert_array_equal(checkpoint.W_E, gguf.quants.dequantize(stored, kind))
    np.testing.assert_allclose(checkpoint.W_E, W_E, atol=0.25 if quantisation == "Q4_1" else 0)  # 4-bit rounding
    sentence = "after monday comes tuesday ."
    np.testing.assert_array_equal(checkpoint.tokenizer.encode(sentence), tokenizer.encode(sentence))


def test_a_path_that_is_no_model_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="not a GGUF"):
        load_embeddings(tmp_path / "notes.txt")
    with pytest.raises(InputError, match="neither a Hugging Face model directory"):
        load_embeddings(tmp_path)


def test_analyze_model_gives_finite_numbers_per_checkpoint(tmp_path, tokenizer, text):
    save_model(tmp_path / "run" / "checkpoint-1", tokenizer, seed=1)
    save_model(tmp_path / "run" / "checkpoint-2", tokenizer, seed=2)
    result = analyze_model(tmp_path / "run", text, k=30, window=32)
    assert len(result["tokens"]) == 30 and len(result["heldout_tokens"]) > 2
    assert all(s.strip().isalpha() for s in result["token_strings"])
    assert [row["step"] for row in result["checkpoints"]] == [1, 2]
    for row in result["checkpoints"]:
        values = [row[key] for key in ("rho_next_pearson", "rho_next_spearman", "probe_heldout_mse",
                                       "shuffled_heldout_mse")]
        assert np.all(np.isfinite(values))
    assert result["similarity"]["embedding"].shape == (2, 30, 30)
    again = analyze_model(tmp_path / "run", text, k=30, window=32, probe=False)
    assert again["checkpoints"][1]["rho_next_pearson"] == result["checkpoints"][1]["rho_next_pearson"]
    assert again["checkpoints"][1]["probe_heldout_mse"] is None


def test_cli_analyze_model_prints_a_line_per_checkpoint_and_writes_atomically(tmp_path, tokenizer, capsys):
    from safetensors.torch import save_file

    run = tmp_path / "lm"
    (run / "snapshots").mkdir(parents=True)
    (run / "config.yaml").write_text("corpus: {}\n")
    tokenizer.save(run / "tokenizer.json")
    for step in (1, 10):
        W_E = torch.randn(tokenizer.vocab_size, 8, generator=torch.Generator().manual_seed(step))
        save_file({"W_E": W_E}, run / "snapshots" / f"step_{step:08d}.safetensors")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(synthetic_corpus(n_sentences=400, seed=1))
    out = tmp_path / "out"
    args = ["analyze-model", str(run), "--corpus", str(corpus), "--k", "20", "--window", "32", "--out", str(out)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("ρ_next pearson" in line and "shuffled baseline" in line for line in lines) == 2
    # Snapshots holding only W_E: no model to run, and the output says so in one line.
    assert ("attention paths and path shares not measured: snapshot step_00000001.safetensors is not the whole "
            "state of the DecoderLM that config.yaml describes (20 tensors missing, 1 of another shape; no W_U)"
            in lines)
    summary = json.loads((out / "analysis.json").read_text())
    assert [row["step"] for row in summary["checkpoints"]] == [1, 10] and "similarity" not in summary
    assert (out / "analysis.png").stat().st_size > 0
    assert main(args) == 2  # an existing --out is refused before any work
    assert "already exists" in capsys.readouterr().err


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


# --- attention paths and path shares (Llama-family models) ------------------------------------------


def save_llama(folder, tokenizer, seed=0):
    """A tiny Llama like SmolLM2 — grouped-query attention (6 query, 2 key/value heads), tied
    embeddings, RoPE base 500, RMSNorm eps 1e-5 — with weights large enough for uneven attention,
    saved the Hugging Face way; returns the model (float32, eval)."""
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=4, max_position_embeddings=64,
        tie_word_embeddings=True, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator)
            p.copy_(1 + 0.3 * noise if p.ndim == 1 else noise * p.shape[-1] ** -0.5 * 2)
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(folder)
    return model.eval()


def sampled_windows(result, tokenizer, text):
    """The windows ``analyze_model`` sampled for its path measures, rebuilt from its record."""
    paths = result["paths"]
    windows = make_windows(tokenizer.encode(text, max_tokens=2_000_000), result["corpus"]["window"])
    assert paths["sample"] == np.random.default_rng(0).permutation(len(windows))[: paths["attention_windows"]].tolist()
    return windows[paths["sample"], : paths["window"]]


def test_analyze_model_refuses_more_path_windows_than_attention_windows(tmp_path, tokenizer, text):
    save_model(tmp_path / "model", tokenizer)
    with pytest.raises(InputError, match=r"path_windows \(3\) must not exceed attention_windows \(2\)"):
        analyze_model(tmp_path / "model", text, attention_windows=2, path_windows=3)


def test_analyze_model_attention_paths_and_shares_are_the_hugging_face_models_own(tmp_path, tokenizer, text):
    hf = save_llama(tmp_path / "llama", tokenizer)
    result = analyze_model(tmp_path / "llama", text, k=30, window=16, probe=False, attention_windows=6,
                           path_windows=2)
    assert result["paths"]["skipped"] is None
    paths = result["paths"]
    assert (paths["attention_windows"], paths["path_windows"], paths["window"]) == (6, 2, 16)
    (row,) = result["checkpoints"]
    sample, tokens, V = sampled_windows(result, tokenizer, text), np.array(result["tokens"]), tokenizer.vocab_size
    X = torch.from_numpy(sample)
    # Attention paths from the Hugging Face model itself: its eager attention weights, and z = o_proj(v_proj(w))
    # with each key/value head serving its group of three query heads.
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = hf(X, output_attentions=True).attentions
        w = hf.model.embed_tokens.weight[torch.from_numpy(tokens)]
        assert len(row["attention_path_corr"]) == len(row["attention_path_null"]) == 2
        for layer, attention in enumerate(attentions):
            phi = attention_path_signature(sample, attention.mean(dim=1).numpy(), V, tokens)
            block = hf.model.layers[layer].self_attn
            Z = block.o_proj(block.v_proj(w).unflatten(-1, (2, 4)).repeat_interleave(3, dim=-2).flatten(-2))
            expected = attention_path_correlation(phi, Z.numpy())
            assert abs(expected) > 0.01  # not a trivial agreement
            assert row["attention_path_corr"][layer] == pytest.approx(expected, abs=1e-4)
            assert 0 < row["attention_path_null"][layer] < 1
    # Path shares: the lm.analysis function on from_hf(model), on the first two sampled windows...
    ours = from_hf(hf)
    assert row["path_share"] == pytest.approx(path_shares(ours, sample[:2], tokens), abs=1e-9)
    assert list(row["path_share"]) == ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    # ...whose paths sum to the gradient of the Hugging Face model's own loss w.r.t. its input embeddings.
    embeds = hf.model.embed_tokens(X[:2]).detach().requires_grad_(True)
    logits = hf(inputs_embeds=embeds).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), X[:2, 1:].flatten())
    (gradient,) = torch.autograd.grad(loss, embeds)
    per_token = torch.zeros(V, 24).index_add_(0, X[:2].flatten(), gradient.flatten(0, 1))[torch.from_numpy(tokens)]
    paths = decoder_embedding_paths(ours, sample[:2], full=False, rows=tokens)
    assert np.abs(per_token.numpy()).max() > 1e-4
    np.testing.assert_allclose(sum(paths.values()), -per_token.numpy(), atol=1e-4 * np.abs(per_token.numpy()).max())


def test_lm_run_directory_gives_the_attention_and_path_numbers_of_its_own_analysis(tmp_path, text):
    from test_lm_train import tiny

    from ctxstair.analysis import lm_staircase
    from ctxstair.lm.train import train_lm
    from ctxstair.run import Run

    train_lm(tiny(**{"model.n_layers": 2, "train.steps": 20}), tmp_path / "run")
    result = analyze_model(tmp_path / "run", text, k=30, window=32, probe=False, attention_windows=8, path_windows=3)
    assert result["paths"]["window"] == 16  # the run's window: its model has 16 positions
    run = Run(tmp_path / "run")
    tokenizer = TextTokenizer.load(tmp_path / "run" / "tokenizer.json")
    sample, tokens = torch.from_numpy(sampled_windows(result, tokenizer, text)), np.array(result["tokens"])
    steps = run.snapshot_times()
    assert [row["step"] for row in result["checkpoints"]] == steps and len(steps) > 2
    for step, row in zip(steps, result["checkpoints"]):
        # What `lm train`'s analysis writes to lm_analysis.csv for this snapshot, given the same windows and tokens.
        model = run.model(run.snapshot(step), torch.float32)
        rows = lm_staircase._attention_rows(model, step, sample, tokens, tokenizer.vocab_size)
        assert row["attention_path_corr"] == [r["value"] for r in rows if r["measure"] == "attention_path_corr"]
        assert row["attention_path_null"] == [r["value"] for r in rows if r["measure"] == "attention_path_null"]
        shares = lm_staircase._path_rows(model, step, sample[:3], tokens)
        assert row["path_share"] == {r["part"]: r["value"] for r in shares}
    first, last = result["checkpoints"][0], result["checkpoints"][-1]
    assert first["path_share"] != last["path_share"]  # the snapshots' own weights, not one model's


def write_llama_gguf(file, hf, tokenizer):
    """``hf`` (a tiny Llama) as a llama.cpp GGUF file: llama.cpp tensor names, the query/key rows
    permuted into llama.cpp's RoPE layout (``convert_hf_to_gguf.py``), float32, with the tokenizer."""
    import gguf

    config = hf.config
    spec = json.loads(tokenizer.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    writer = gguf.GGUFWriter(file, "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(sorted(vocab, key=vocab.get))
    writer.add_token_merges([" ".join(merge) for merge in spec["model"]["merges"]])
    writer.add_token_types([gguf.TokenType.NORMAL] * len(vocab))

    def permute(w, heads):
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    state = {name: t.detach().numpy() for name, t in hf.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])  # tied: no output.weight
    for layer in range(config.num_hidden_layers):
        for theirs, ours in names.items():
            w = state[f"model.layers.{layer}.{theirs}.weight"]
            if ours == "attn_q":
                w = permute(w, config.num_attention_heads)
            elif ours == "attn_k":
                w = permute(w, config.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{ours}.weight", np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_llama_gguf_file_gives_a_decoder_with_the_hugging_face_logits(tmp_path, tokenizer):
    hf = save_llama(tmp_path / "llama", tokenizer)
    write_llama_gguf(tmp_path / "tiny.gguf", hf, tokenizer)
    (checkpoint,) = iter_checkpoints(tmp_path / "tiny.gguf", models=True)
    assert checkpoint.no_model is None and checkpoint.model.cfg.rope_base == 500.0
    np.testing.assert_array_equal(checkpoint.W_E, checkpoint.model.W_E.detach().numpy())
    tokens = torch.randint(tokenizer.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        logits = hf(tokens).logits
        assert logits.abs().max() > 1
        torch.testing.assert_close(checkpoint.model(tokens), logits, atol=1e-4, rtol=0)
    # Without models (load_embeddings), no network is built.
    (plain,) = load_embeddings(tmp_path / "tiny.gguf")
    assert plain.model is None and plain.no_model is None


def test_models_that_are_not_llama_get_rho_next_and_the_probe_and_the_reason(tmp_path, tokenizer, text, capsys):
    config = transformers.GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                     bos_token_id=None, eos_token_id=None)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "gpt2")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(tmp_path / "gpt2")
    save_model(tmp_path / "qwen2", tokenizer, "qwen2")
    for name, reason in (("gpt2", "model_type 'gpt2'"), ("qwen2", "Qwen2 has q/k/v biases")):
        result = analyze_model(tmp_path / name, text, k=20, window=32)
        assert result["paths"]["skipped"].startswith(NEEDS_LLAMA) and reason in result["paths"]["skipped"]
        (row,) = result["checkpoints"]
        assert np.isfinite(row["rho_next_pearson"]) and np.isfinite(row["probe_heldout_mse"])
        assert row["attention_path_corr"] is row["attention_path_null"] is row["path_share"] is None
    assert main(["analyze-model", str(tmp_path / "gpt2"), "--corpus", "synthetic", "--k", "20", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert f"attention paths and path shares not measured: {NEEDS_LLAMA}" in out and "ρ_next pearson" in out


def test_cli_prints_and_writes_the_path_measures_and_no_paths_skips_them(tmp_path, tokenizer, capsys):
    save_llama(tmp_path / "llama", tokenizer)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(synthetic_corpus(n_sentences=400, seed=1))
    args = ["analyze-model", str(tmp_path / "llama"), "--corpus", str(corpus), "--k", "20", "--window", "16",
            "--windows", "4", "--path-windows", "2", "--no-probe"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "attention paths on 4 windows and path shares on 2 of them, 16 tokens each" in out
    assert "attention-path corr by layer  0: " in out and "|r| above the null in" in out
    assert "path shares of the embedding update: direct " in out
    summary = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert summary["paths"]["attention_windows"] == 4 and len(summary["paths"]["sample"]) == 4
    (row,) = summary["checkpoints"]
    assert len(row["attention_path_corr"]) == 2 and sum(row["path_share"].values()) == pytest.approx(1.0)
    assert (tmp_path / "out" / "analysis.png").stat().st_size > 0

    assert main([*args, "--no-paths", "--out", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert "attention" not in out and "path shares" not in out
    summary = json.loads((tmp_path / "plain" / "analysis.json").read_text())
    assert summary["paths"] is None and summary["checkpoints"][0]["path_share"] is None


@pytest.mark.parametrize("options, message", [
    (["--windows", "0"], "--windows and --path-windows must be at least 1, got 0 and 0"),
    (["--path-windows", "-1"], "--windows and --path-windows must be at least 1, got 32 and -1"),
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
    from ctxstair.lm.hf import ATTENTION_WINDOWS, PATH_WINDOWS

    with pytest.raises(SystemExit):
        main(["analyze-model", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {ATTENTION_WINDOWS})" in text and f"(default {PATH_WINDOWS}, or --windows if smaller)" in text
