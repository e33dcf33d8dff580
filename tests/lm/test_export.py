"""An LM run's models as Hugging Face folders (ctxstair.lm.export): ``hf_model/`` after every run and,
with ``snapshots.export``, ``hf_snapshots/``; ``transformers`` opens them offline with the run's own
logits and tokens, and ``analyze-model`` on the final folder, given the run's windows, gives the run's
last row of ``lm_analysis.csv``."""

import json

import numpy as np
import pytest
import torch
from lm_helpers import TINY, tiny
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxstair.analysis.lm_staircase import read_lm_analysis
from ctxstair.cli import main
from ctxstair.lm.export import FINAL, SNAPSHOTS, export_run
from ctxstair.lm.train import train_lm
from ctxstair.run import Run
from ctxstair.text.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def tied_run(tmp_path_factory):
    """A tiny GPT-2 run (tied embeddings: the case ``save_pretrained`` writes one tensor for two names),
    analysed, with every snapshot exported."""
    out = tmp_path_factory.mktemp("gpt2") / "run"
    settings = {**TINY, "model.family": "gpt2", "snapshots.export": "true"}
    assert main(["lm", "train", "--out", str(out), *sum((["--set", f"{k}={v}"] for k, v in settings.items()), [])]) == 0
    return out


def test_every_folder_opens_offline_with_the_runs_logits(tied_run):
    run = Run(tied_run)
    steps = run.snapshot_times()
    folders = {step: tied_run / SNAPSHOTS / f"step_{step:08d}" for step in steps}
    assert sorted(p.name for p in (tied_run / SNAPSHOTS).iterdir()) == [f"step_{s:08d}" for s in steps]
    windows = torch.randint(0, run.config.corpus.vocab_size, (3, 16), generator=torch.Generator().manual_seed(0))
    for step, folder in [(steps[-1], tied_run / FINAL), *folders.items()]:
        loaded = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        assert loaded.config.model_type == "gpt2" and loaded.config.tie_word_embeddings
        ours = run.model_at(step, torch.float32)
        with torch.no_grad():
            expected, got = ours(input_ids=windows).logits, loaded(input_ids=windows).logits
        assert torch.allclose(got, expected, rtol=0, atol=1e-6), step
    tokenizer = AutoTokenizer.from_pretrained(tied_run / FINAL, local_files_only=True)
    text = "the cat sat on the mat, and the dog ran away"
    assert tokenizer(text)["input_ids"] == TextTokenizer.load(tied_run / "tokenizer.json").encode(text).tolist()


def test_analyze_model_on_the_final_folder_gives_the_runs_last_row(tied_run, tmp_path, capsys):
    out = tmp_path / "analysed"
    assert main(["analyze-model", str(tied_run / FINAL), "--run-windows", str(tied_run), "--out", str(out)]) == 0
    (measured,) = json.loads((out / "analysis.json").read_text())["checkpoints"]
    table = read_lm_analysis(tied_run)
    last = table["step"] == table["step"].max()
    own = {m + (f"/{p}" if p else ""): v for m, p, v in zip(table["measure"][last], table["part"][last],
                                                              table["value"][last])}
    assert "path_share/unembed" in own and "unembedding_alignment" in own
    assert set(own) <= set(measured)
    # The run fits the probe of all its snapshots in one batch: float32 sums in another order.
    for name, value in own.items():
        assert measured[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


def test_run_windows_and_a_corpus_are_one_choice(tied_run, tmp_path, capsys):
    assert main(["analyze-model", str(tied_run / FINAL), "--run-windows", str(tied_run), "--corpus", "synthetic"]) == 2
    assert main(["analyze-model", str(tied_run / FINAL), "--run-windows", str(tied_run / FINAL)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "one of them" in lines[0] and "not an LM run directory" in lines[1]


def test_an_export_is_written_again_whole_from_the_run_directory(tied_run):
    final = tied_run / FINAL
    before = (final / "model.safetensors").read_bytes()
    (final / "model.safetensors").unlink()  # a folder damaged after the run
    assert export_run(Run(tied_run), missing_only=True) == []  # the folder exists: left alone
    assert export_run(Run(tied_run)) == [final]
    assert (final / "model.safetensors").read_bytes() == before
    assert not list(tied_run.glob(f".{FINAL}*"))  # no staging folder left behind


def test_an_untied_family_exports_its_unembedding(tmp_path):
    out = train_lm(tiny(**{"model.family": "llama", "analysis.enabled": False}), tmp_path / "run")
    loaded = AutoModelForCausalLM.from_pretrained(out / FINAL, local_files_only=True)
    ours = Run(out).model_at(Run(out).snapshot_times()[-1], torch.float32)
    assert not loaded.config.tie_word_embeddings
    np.testing.assert_array_equal(loaded.lm_head.weight.detach().numpy(), ours.lm_head.weight.detach().numpy())
    np.testing.assert_array_equal(loaded.model.embed_tokens.weight.detach().numpy(),
                                  ours.model.embed_tokens.weight.detach().numpy())
