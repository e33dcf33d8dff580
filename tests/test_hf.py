"""Tests for ctxstair.lm.hf and ``ctxstair analyze-model`` (SPEC §7, §10). Nothing is downloaded:
the models are tiny Llama / Qwen2 networks built here from a config, with a BPE trained on the
synthetic corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.lm.corpus import synthetic_corpus
from ctxstair.lm.hf import analyze_model, load_embeddings
from ctxstair.lm.tokenizer import TextTokenizer


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
