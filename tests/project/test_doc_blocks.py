"""Every Python block (```python or ```py) of README.md and docs/*.md runs as written.

Each block runs in a fresh, empty working directory with a fresh namespace. What a block takes from
the reader's world — a run (``runs/add``), a model folder (``models/pythia-160m``), a corpus, a
fetched model, or a variable such as ``windows`` or ``trainer`` — is named in an HTML comment just
before it, which a rendered page does not show::

    <!-- doc-block given: runs/add windows -->

and this module builds a small stand-in for each name (:data:`STAND_INS`): tiny runs made by the
toolkit, tiny ``transformers`` models drawn from a config, the synthetic corpus. Nothing is
downloaded. A block that cannot run offline says why instead::

    <!-- doc-block not run: it reads a model's revisions from the Hugging Face Hub -->

and :data:`NOT_RUN` lists every such block, so the set stays small and seen.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "examples"))

#: A Python block and the doc-block comment (if any) right before it.
BLOCK = re.compile(r"(?:<!-- doc-block (given|not run): ([^\n]*?) -->\n)?```(?:python|py)\n(.*?)^```", re.S | re.M)

#: The blocks that do not run offline, as (file, the reason its marker gives). A new one must be added
#: here too, so that the set stays small and seen.
NOT_RUN = {
    ("docs/language-models.md",
     "it reads the released checkpoints of EleutherAI/pythia-160m from the Hugging Face Hub"),
}


def doc_blocks() -> list[tuple[str, int, str | None, str, str]]:
    """(file, line, marker kind, marker text, code) of every Python block of README.md and docs/*.md."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start(3))
            blocks.append((str(path.relative_to(ROOT)), line, match.group(1), match.group(2) or "", match.group(3)))
    return blocks


BLOCKS = doc_blocks()


# --- stand-ins -----------------------------------------------------------------------------------

WINDOW = 32


class World:
    """The stand-ins, each built once per test session (files under ``root``, values in memory) and
    handed to a block as a copy of the files or a fresh value."""

    def __init__(self, root: Path):
        self.root = root
        self.built: dict[str, object] = {}

    def get(self, name: str):
        if name not in self.built:
            self.built[name] = STAND_INS[name](self)
        return self.built[name]

    # shared pieces
    def text(self) -> str:
        from ctxstair.text.synthetic import synthetic_corpus

        return synthetic_corpus(n_sentences=400, seed=1)

    def text_tokenizer(self):
        if "_tokenizer" not in self.built:
            from ctxstair.text.tokenizer import TextTokenizer

            self.built["_tokenizer"] = TextTokenizer.train_bpe(self.text(), 400)
        return self.built["_tokenizer"]


def _windows(world: World) -> np.ndarray:
    from ctxstair.text.windows import make_windows

    tokenizer = world.text_tokenizer()
    return make_windows(tokenizer.encode(world.text(), max_tokens=4000), WINDOW)


def _hf_tokenizer(world: World):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=world.text_tokenizer().tokenizer)


def _torch():
    import torch

    return torch


def _model(world: World):
    from trainer_staircase import small_llama

    return small_llama(world.text_tokenizer().vocab_size, WINDOW, d_model=16, n_layers=1, gamma=1.0, gamma_blocks=1.5)


def _data(world: World):
    from trainer_staircase import WindowDataset

    return WindowDataset(world.get("windows")[:16])


def _trainer(world: World):
    """A Hugging Face Trainer of the tiny Llama on the windows: 3 steps."""
    import torch
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir="out", max_steps=3, per_device_train_batch_size=4, report_to="none",
                             use_cpu=not torch.cuda.is_available(), disable_tqdm=True, save_strategy="no")
    return Trainer(model=_model(world), args=args, train_dataset=_data(world))


def _monitor(world: World):
    from ctxstair.monitor import StaircaseMonitor, monitor_tokens

    windows = world.get("windows")
    return StaircaseMonitor(windows, monitor_tokens(world.text_tokenizer(), windows))


def _train_step(world: World) -> Callable[[], None]:
    """One AdamW step of the block's ``model`` on a batch of the windows (the reader's training step)."""
    import torch

    def bind(namespace: dict) -> Callable[[], None]:
        model, batch = namespace["model"], torch.from_numpy(world.get("windows")[:8])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

        def train_step() -> None:
            optimizer.zero_grad()
            model(input_ids=batch, labels=batch).loss.backward()
            optimizer.step()
        return train_step
    return bind


def _add_run(world: World) -> Path:
    """``runs/add``: a small staircase-add run (N = 8, 150 epochs) with its analyses and report."""
    from explorer_helpers import SMALL

    from ctxstair.recipes import run_recipe

    return run_recipe("staircase-add", world.root / "runs" / "add", SMALL, progress=False)


def _hf_run(world: World) -> Path:
    """``runs/my-hf-run``: a folder of two Hugging Face checkpoints (checkpoint-1, checkpoint-2)."""
    from model_helpers import save_model

    folder = world.root / "runs" / "my-hf-run"
    for step in (1, 2):
        save_model(folder / f"checkpoint-{step}", world.text_tokenizer(), seed=step)
    return folder


def _pythia_folder(world: World) -> Path:
    """``models/pythia-160m``: a tiny GPT-NeoX model folder with its tokenizer (a BPE of the synthetic corpus)."""
    import torch
    import transformers

    folder = world.root / "models" / "pythia-160m"
    config = transformers.GPTNeoXConfig(vocab_size=world.text_tokenizer().vocab_size, hidden_size=16,
                                        intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.GPTNeoXForCausalLM(config).save_pretrained(folder)
    _hf_tokenizer(world).save_pretrained(folder)
    return folder


def _pile(world: World) -> Path:
    """``pile-deduped/document.idx``: the synthetic corpus tokenized by that tokenizer, as a Megatron pair."""
    from ctxstair.corpus.megatron import write_indexed

    tokenizer = world.text_tokenizer()
    documents = [np.asarray(tokenizer.encode(line), dtype=np.uint16) for line in world.text().splitlines() if line]
    write_indexed(world.root / "pile-deduped" / "document", documents, np.uint16)
    return world.root / "pile-deduped"


def _cache(world: World) -> Path:
    """A ``ctxstair data fetch`` cache (``CTXSTAIR_CACHE``) holding ``smollm2`` as a tiny Llama GGUF
    file and ``shakespeare`` as the synthetic corpus."""
    from model_helpers import save_llama, write_llama_gguf

    cache = world.root / "cache"
    if cache.exists():                     # built for the other of the two names
        return cache
    hf = save_llama(world.root / "smollm2-hf", world.text_tokenizer())
    (cache / "smollm2").mkdir(parents=True)
    write_llama_gguf(cache / "smollm2" / "smollm2.gguf", hf, world.text_tokenizer())
    (cache / "shakespeare" / "texts").mkdir(parents=True)
    (cache / "shakespeare" / "texts" / "synthetic_gut.txt").write_text(world.text())
    return cache


#: Every name a block may be given, and how its stand-in is built. A file stand-in returns the path it
#: wrote under the world's root (copied into the block's directory); ``smollm2`` and ``shakespeare``
#: are fetched names, so they come as a cache that ``CTXSTAIR_CACHE`` points to.
STAND_INS: dict[str, Callable[[World], object]] = {
    "windows": _windows, "tokenizer": _hf_tokenizer, "model": _model, "data": _data, "trainer": _trainer,
    "monitor": _monitor, "train_step": _train_step, "max_steps": lambda world: 5,
    "X": lambda world: _torch().from_numpy(world.get("windows")[:4]),
    "runs/add": _add_run, "runs/my-hf-run": _hf_run, "models/pythia-160m": _pythia_folder,
    "pile-deduped/document.idx": _pile, "smollm2": _cache, "shakespeare": _cache,
}
#: Values built afresh for each block (a model trains in the block, a Trainer keeps its state).
FRESH = {"model", "data", "trainer", "monitor"}
CACHED = {"smollm2", "shakespeare"}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("world"))


def test_blocks_are_found_and_every_marker_is_understood():
    assert len(BLOCKS) >= 10
    for file, line, kind, names, _ in BLOCKS:
        if kind == "given":
            unknown = [name for name in names.split() if name not in STAND_INS]
            assert not unknown, f"{file}:{line}: no stand-in for {unknown}"


def test_the_blocks_not_run_are_few_and_listed():
    marked = {(file, reason) for file, _, kind, reason, _ in BLOCKS if kind == "not run"}
    assert marked == NOT_RUN
    assert len(NOT_RUN) <= 3


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] != "not run"], ids=lambda b: f"{b[0]}:{b[1]}")
def test_doc_block_runs(block, world, tmp_path, monkeypatch):
    file, line, kind, names, code = block
    given = names.split() if kind == "given" else []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "empty-cache"))
    namespace: dict = {"__name__": "__doc_block__"}
    for name in given:
        if name in CACHED:
            monkeypatch.setenv("CTXSTAIR_CACHE", str(world.get(name)))
        elif "/" in name:
            source = world.get(name)
            target = tmp_path / source.relative_to(world.root)
            shutil.copytree(source, target)
        elif name in FRESH:
            namespace[name] = STAND_INS[name](world)
        else:
            namespace[name] = world.get(name)
    if "train_step" in namespace:
        namespace["train_step"] = namespace["train_step"](namespace)
    try:
        exec(compile(code, f"{file}:{line}", "exec"), namespace)
    finally:
        _close_writers(namespace)
    assert os.getcwd() == str(tmp_path)


def _close_writers(namespace: dict) -> None:
    """Close the TensorBoard writers a block opened (a script's exit would), before its directory goes."""
    from torch.utils.tensorboard import SummaryWriter

    for value in namespace.values():
        if isinstance(value, SummaryWriter):
            value.close()
