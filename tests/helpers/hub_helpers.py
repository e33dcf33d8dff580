"""The fake Hugging Face Hub of the checkpoint-series tests (tests/checkpoints/test_hub.py,
tests/measure/test_series_checks.py): a Hub cache in a folder — ``models--org--name/refs/<revision>``
holding a commit hash, the files in ``snapshots/<hash>/`` — read offline, with tiny random GPT-NeoX and
Llama models saved into it revision by revision."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import constants
from model_helpers import save_llama

from ctxstair.cli import main
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer

REVISIONS = ["step0", "step1", "step4", "step16"]
#: Settings small enough for the tiny models and the synthetic corpus of tests/measure/test_analyze_model.py.
SETTINGS = {"k": 20, "window": 16, "attention_windows": 4, "path_windows": 2}


class FakeHub:
    """A Hugging Face Hub cache in a folder, read offline."""

    def __init__(self, cache: Path):
        self.cache = cache

    def snapshot(self, repo_id: str, revision: str) -> Path:
        """The (new) snapshot folder of ``revision``, with its ref pointing at a commit of its own."""
        repo = self.cache / f"models--{repo_id.replace('/', '--')}"
        commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(commit)  # huggingface_hub reads it without stripping
        folder = repo / "snapshots" / commit
        folder.mkdir(parents=True)
        return folder


@pytest.fixture(scope="module")
def text() -> str:
    """The synthetic corpus of tests/measure/test_analyze_model.py."""
    return synthetic_corpus(n_sentences=400, seed=1)


@pytest.fixture(scope="module")
def tokenizer(text) -> TextTokenizer:
    """A byte-level BPE of 400 tokens trained on it, the tokenizer of every model here."""
    return TextTokenizer.train_bpe(text, vocab_size=400)


@pytest.fixture
def fake_hub(tmp_path, monkeypatch) -> FakeHub:
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    # huggingface_hub reads these variables once, at import: its constants are set as well.
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return FakeHub(cache)


def save_neox(folder: Path, tokenizer, seed: int) -> transformers.PreTrainedModel:
    """A tiny random GPT-NeoX (Pythia's architecture) with ``tokenizer``, saved the Hugging Face way."""
    config = transformers.GPTNeoXConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(folder)
    return model


SAVERS = {"neox": save_neox, "llama": lambda folder, tokenizer, seed: save_llama(folder, tokenizer, seed=seed)}


def add_series(fake_hub: FakeHub, tokenizer, family: str, repo_id: str = "org/tiny",
               revisions: list[str] = REVISIONS) -> dict[str, Path]:
    """One revision per name, each with weights of its own; revision -> snapshot folder."""
    folders = {}
    for seed, revision in enumerate(revisions, 1):
        folders[revision] = fake_hub.snapshot(repo_id, revision)
        SAVERS[family](folders[revision], tokenizer, seed)
    return folders


def run_series(repo_id: str, revisions: list[str], text: str, **options) -> dict:
    return analyze_model(repo_id, text=text, revisions=",".join(revisions), **{**SETTINGS, **options})


def cli(*args: str) -> int:
    return main(["analyze-model", *args])
