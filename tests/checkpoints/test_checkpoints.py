"""Checkpoint sources (ctxstair.checkpoints, SPEC §7, §10): each yields exactly the weights the
user saved, its tokenizer and its steps, behind one interface. Nothing is downloaded: the models are
tiny Llama / Qwen2 networks built here (model_helpers), with a BPE trained on the synthetic corpus."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import save_llama, save_model, write_embedding_gguf, write_llama_gguf

from ctxstair import rundir
from ctxstair.checkpoints import open_checkpoints
from ctxstair.errors import InputError
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return TextTokenizer.train_bpe(synthetic_corpus(n_sentences=400, seed=1), vocab_size=400)


def read_all(path, models=False):
    """(the source, each of its checkpoints read)."""
    source = open_checkpoints(path)
    return source, [entry.load(models) for entry in source.entries()]


SENTENCE = "after monday comes tuesday ."


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_hugging_face_directory_gives_exactly_its_input_embeddings(tmp_path, tokenizer, family):
    W_E = save_model(tmp_path / "model", tokenizer, family)
    source, (checkpoint,) = read_all(tmp_path / "model")
    assert checkpoint.step is None and checkpoint.name == "model"
    np.testing.assert_array_equal(checkpoint.W_E, W_E)
    assert source.vocab_rows == W_E.shape[0]
    np.testing.assert_array_equal(source.tokenizer.encode(SENTENCE), tokenizer.encode(SENTENCE))
    # Both families have a model view: the source knows the positions before any weight is read.
    assert source.positions == 64 and source.no_model is None


def test_checkpoint_folder_gives_one_checkpoint_per_step_in_order(tmp_path, tokenizer):
    later = save_model(tmp_path / "run" / "checkpoint-20", tokenizer, seed=2)
    earlier = save_model(tmp_path / "run" / "checkpoint-10", tokenizer, seed=1)
    save_model(tmp_path / "run", tokenizer, seed=3)  # a final model at the top: the checkpoints win
    (tmp_path / "run" / "logs").mkdir()  # other folders are ignored
    source, checkpoints = read_all(tmp_path / "run")
    assert [(e.name, e.step) for e in source.entries()] == [("checkpoint-10", 10), ("checkpoint-20", 20)]
    assert [c.step for c in checkpoints] == [10, 20]
    np.testing.assert_array_equal(checkpoints[0].W_E, earlier)
    np.testing.assert_array_equal(checkpoints[1].W_E, later)


def test_checkpoints_without_a_tokenizer_use_the_run_folders(tmp_path, tokenizer):
    save_model(tmp_path / "run" / "checkpoint-5", tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "run" / "checkpoint-5" / name).unlink()
    tokenizer.save(tmp_path / "run" / "tokenizer.json")
    source, _ = read_all(tmp_path / "run")
    assert source.tokenizer.encode("my mother smiled .").tolist() == tokenizer.encode("my mother smiled .").tolist()


def test_lm_run_directory_is_read_through_its_run_with_every_snapshot_checked(tmp_path):
    from lm_helpers import tiny

    from ctxstair.lm.train import train_lm
    from ctxstair.run import Run

    run_dir = train_lm(tiny(**{"analysis.enabled": False}), tmp_path / "run")
    run = Run(run_dir)
    source, checkpoints = read_all(run_dir, models=True)
    assert [c.step for c in checkpoints] == run.snapshot_times()
    assert [c.name for c in checkpoints] == [f"step_{t:08d}" for t in run.snapshot_times()]
    assert source.vocab_rows == source.tokenizer.vocab_size and source.positions == run.config.corpus.window
    for checkpoint in checkpoints:
        state = run.snapshot(checkpoint.step)
        np.testing.assert_array_equal(checkpoint.W_E, state[run.config.model.embedding_key()].numpy())
        assert all(torch.equal(value, state[name]) for name, value in checkpoint.model.state_dict().items())
    # A snapshot that is not what was written is refused, naming the file (its SHA-256 is checked).
    snapshot = rundir.snapshot_path(run_dir, checkpoints[-1].step, "step")
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 1
    snapshot.write_bytes(bytes(data))
    with pytest.raises(InputError, match=snapshot.name):
        source.entries()[-1].load(False)


@pytest.mark.parametrize("quantisation", ["F32", "Q4_1"])
def test_gguf_file_gives_its_dequantised_embeddings_and_its_tokenizer(tmp_path, tokenizer, quantisation):
    import gguf

    W_E, stored = write_embedding_gguf(tmp_path / "tiny.gguf", tokenizer, quantisation)
    source, (checkpoint,) = read_all(tmp_path / "tiny.gguf")
    assert checkpoint.name == "tiny.gguf" and checkpoint.step is None
    kind = gguf.GGMLQuantizationType[quantisation]
    np.testing.assert_array_equal(checkpoint.W_E, gguf.quants.dequantize(stored, kind))
    np.testing.assert_allclose(checkpoint.W_E, W_E, atol=0.25 if quantisation == "Q4_1" else 0)  # 4-bit rounding
    np.testing.assert_array_equal(source.tokenizer.encode(SENTENCE), tokenizer.encode(SENTENCE))


def test_llama_gguf_file_gives_the_model_with_the_hugging_face_logits(tmp_path, tokenizer):
    hf = save_llama(tmp_path / "llama", tokenizer)
    write_llama_gguf(tmp_path / "tiny.gguf", hf, tokenizer)
    source, (checkpoint,) = read_all(tmp_path / "tiny.gguf", models=True)
    assert source.positions == 64 and source.no_model is None
    assert checkpoint.no_model is None and checkpoint.model.config.rope_parameters["rope_theta"] == 500.0
    np.testing.assert_array_equal(checkpoint.W_E, checkpoint.model.get_input_embeddings().weight.detach().numpy())
    tokens = torch.randint(tokenizer.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        logits = hf(tokens).logits
        assert logits.abs().max() > 1
        torch.testing.assert_close(checkpoint.model(tokens).logits, logits, atol=1e-4, rtol=0)
    # Without models, no network is built.
    plain = source.entries()[0].load(False)
    assert plain.model is None and plain.no_model is None


def test_a_path_that_is_no_model_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="not a GGUF"):
        open_checkpoints(tmp_path / "notes.txt")
    with pytest.raises(InputError, match="neither a Hugging Face model directory"):
        open_checkpoints(tmp_path)
    with pytest.raises(InputError, match="not found: not a path, nor a fetched model name"):
        open_checkpoints(tmp_path / "missing")
    with pytest.raises(InputError, match="revisions are for a Hugging Face Hub model id"):
        open_checkpoints(tmp_path, ["step0"])
