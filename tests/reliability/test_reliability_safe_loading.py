"""Safe loading: what ctxstair reads back is safetensors, JSON, CSV, YAML (safe) or
npz without pickle; ``torch.load`` only with ``weights_only=True``; a user-supplied pickle is never
unpickled and no code of a model folder runs.

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m pytest -q tests/reliability/test_reliability_safe_loading.py

Two kinds of test: a static scan of ``src/`` (ast, so docstrings and comments do not count) and
behavioural tests feeding malicious files whose unpickling (or import) would create a marker file.
Nothing is downloaded: models are tiny Llama configs built here.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer

SRC = Path(__file__).resolve().parents[2] / "src" / "ctxstair"

# --- static scan ----------------------------------------------------------------------------------

#: Modules whose only job is (un)pickling or running stored code.
_UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "joblib", "shelve", "marshal"}
#: ``yaml`` functions that can build arbitrary Python objects (``safe_load`` is the allowed one).
_UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load", "full_load_all"}


def _keyword(call: ast.Call, name: str):
    """The constant value of keyword ``name`` of ``call``; ``...`` when absent, None when not a constant."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value.value if isinstance(kw.value, ast.Constant) else None
    return ...


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def unsafe_loads(source: str, where: str = "<source>") -> list[str]:
    """Every unsafe read in Python ``source``, as ``where:line: what`` strings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{line}: imports {a.name}" for a in node.names if a.name.split(".")[0] in _UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _UNSAFE_MODULES:
            found.append(f"{line}: imports from {node.module}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in ("torch.load", "torch.serialization.load") and _keyword(node, "weights_only") is not True:
                found.append(f"{line}: {name} without weights_only=True")
            elif name in ("np.load", "numpy.load") and _keyword(node, "allow_pickle") is not False:
                # Explicit even though numpy's default is False since 1.16.3: the reader sees it.
                found.append(f"{line}: {name} without allow_pickle=False")
            elif name.startswith("yaml.") and name.split(".", 1)[1] in _UNSAFE_YAML:
                found.append(f"{line}: {name} (use yaml.safe_load)")
            elif name.endswith(("read_pickle", "torch.jit.load")):
                found.append(f"{line}: {name} unpickles")
            if _keyword(node, "trust_remote_code") not in (..., False):
                found.append(f"{line}: trust_remote_code not False")
            if name.endswith(".from_pretrained"):
                if _keyword(node, "trust_remote_code") is not False:
                    found.append(f"{line}: {name} without trust_remote_code=False")
                if "AutoModel" in name and _keyword(node, "use_safetensors") is not True:
                    found.append(f"{line}: {name} without use_safetensors=True")
    return found


def test_the_scan_catches_each_unsafe_read():
    bad = """
import pickle
from joblib import load
import yaml, torch, numpy as np
torch.load(path)
torch.load(path, weights_only=False)
np.load(path, allow_pickle=True)
yaml.load(text)
yaml.unsafe_load(text)
transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
"""
    assert len(unsafe_loads(bad)) == 10  # the from_pretrained line: remote code, twice, and no use_safetensors
    good = """
import yaml, torch, numpy as np
torch.load(path, weights_only=True, map_location="cpu")
np.load(path, allow_pickle=False)
yaml.safe_load(text)
AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, trust_remote_code=False)
AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
"""
    assert unsafe_loads(good) == []


def test_src_has_no_unsafe_read():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 20  # the scan really sees the package
    found = [hit for file in files
             for hit in unsafe_loads(file.read_text(encoding="utf-8"), str(file.relative_to(SRC)))]
    assert found == []


# --- malicious files ------------------------------------------------------------------------------


class Payload:
    """Unpickling this creates ``marker`` (``open(marker, "w")``): proof that a pickle was executed."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def write_malicious(path: Path, marker: Path) -> None:
    """A ``torch.save`` file: a plausible state dict plus the payload."""
    torch.save({"model.embed_tokens.weight": torch.zeros(4, 4), "payload": Payload(marker)}, path)


def test_the_payload_is_live(tmp_path):
    """Control: an unrestricted unpickle of these files does run code, so the tests below mean something."""
    write_malicious(tmp_path / "evil.bin", tmp_path / "marker")
    torch.load(tmp_path / "evil.bin", weights_only=False)["payload"].close()  # our own file, in tmp_path
    assert (tmp_path / "marker").exists()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small text file and a BPE trained on it (the models' tokenizer)."""
    folder = tmp_path_factory.mktemp("corpus")
    text = synthetic_corpus(n_sentences=200, seed=1)
    (folder / "corpus.txt").write_text(text)
    return folder / "corpus.txt", TextTokenizer.train_bpe(text, vocab_size=300)


def hf_folder(folder: Path, tokenizer: TextTokenizer) -> Path:
    """A tiny Llama ``config.json`` and ``tokenizer.json``, without weights."""
    folder.mkdir(parents=True, exist_ok=True)
    transformers.LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                             max_position_embeddings=64, tie_word_embeddings=False).save_pretrained(folder)
    tokenizer.save(folder / "tokenizer.json")
    return folder


def save_weights(folder: Path, **save_options) -> transformers.LlamaForCausalLM:
    """Random weights for the folder's config, saved by ``save_pretrained`` (safetensors)."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig.from_pretrained(folder))
    model.save_pretrained(folder, **save_options)
    return model


def edit_config(folder: Path, **changes) -> None:
    """Merge ``changes`` into the folder's ``config.json``."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def analyze(model: Path, corpus_file: Path, capsys) -> tuple[int, str]:
    """``ctxstair analyze-model`` on ``model`` (small settings): exit code and stderr."""
    capsys.readouterr()  # drop what building the folder printed (save_pretrained's progress bar)
    code = main(["analyze-model", str(model), "--corpus", str(corpus_file), "--k", "10", "--window", "16",
                 "--no-probe"])
    return code, capsys.readouterr().err.strip()


# Ways a folder can point transformers at a pickle; each returns the file the refusal must name.


def pickled_bin_only(folder, marker):
    write_malicious(folder / "pytorch_model.bin", marker)
    return "pytorch_model.bin"


def pickled_checkpoint(folder, marker):
    # A Trainer output folder: the checkpoint-<step> sub-folder is what is read.
    sub = folder / "checkpoint-10"
    sub.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (sub / name).write_bytes((folder / name).read_bytes())
    write_malicious(sub / "pytorch_model.bin", marker)
    return "checkpoint-10/pytorch_model.bin"


def index_naming_a_pickle(folder, marker):
    write_malicious(folder / "pytorch_model-00001-of-00001.bin", marker)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "pytorch_model-00001-of-00001.bin"}}))
    return "pytorch_model-00001-of-00001.bin"


def config_naming_a_pickle(folder, marker):
    write_malicious(folder / "adapter_model.bin", marker)  # transformers accepts this one name
    edit_config(folder, transformers_weights="adapter_model.bin")
    return "adapter_model.bin"


@pytest.mark.parametrize("make", [pickled_bin_only, pickled_checkpoint, index_naming_a_pickle, config_naming_a_pickle])
def test_analyze_model_refuses_pickled_weights_without_unpickling(tmp_path, corpus, capsys, make):
    corpus_file, tokenizer = corpus
    folder = hf_folder(tmp_path / "model", tokenizer)
    named = make(folder, tmp_path / "marker")
    code, err = analyze(folder, corpus_file, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert named in err and ("pickled" in err or "safetensors" in err)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("model_type", ["evil", "llama"])
def test_analyze_model_never_runs_code_of_the_model_folder(tmp_path, corpus, capsys, model_type):
    """``auto_map`` in config.json names code in the folder; with trust_remote_code left None,
    transformers would ask on the terminal whether to run it. With trust_remote_code=False an
    unknown ``model_type`` is refused, and a known one is built by transformers' own class."""
    corpus_file, tokenizer = corpus
    folder = hf_folder(tmp_path / "model", tokenizer)
    save_weights(folder)  # first: save_pretrained rewrites config.json
    marker = tmp_path / "marker"
    code = f"open({str(marker)!r}, 'w').close()\nfrom transformers import LlamaConfig as EvilConfig\n"
    (folder / "configuration_evil.py").write_text(code)
    (folder / "modeling_evil.py").write_text(code + "from transformers import LlamaForCausalLM as EvilModel\n")
    edit_config(folder, model_type=model_type, auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                         "AutoModelForCausalLM": "modeling_evil.EvilModel"})
    code, err = analyze(folder, corpus_file, capsys)
    if model_type == "evil":
        assert code == 2 and len(err.splitlines()) == 1 and str(folder) in err, err
    else:
        assert code == 0, err
    assert not marker.exists()


def test_a_trainer_checkpoint_with_safetensors_loads_and_its_pickles_stay_unread(tmp_path, corpus, capsys):
    """``optimizer.pt`` and ``training_args.bin`` (pickles) sit next to ``model.safetensors`` in every
    Trainer checkpoint: the model loads, and those files are not touched."""
    corpus_file, tokenizer = corpus
    folder = hf_folder(tmp_path / "run" / "checkpoint-10", tokenizer)
    save_weights(folder)
    for name in ("optimizer.pt", "training_args.bin", "pytorch_model.bin"):
        write_malicious(folder / name, tmp_path / "marker")
    code, err = analyze(tmp_path / "run", corpus_file, capsys)
    assert code == 0 and err == "", err
    assert not (tmp_path / "marker").exists()


def test_a_sharded_safetensors_model_still_loads(tmp_path, corpus):
    """The index check lets safetensors shards through (``save_pretrained`` shards a large model)."""
    from ctxstair.checkpoints import open_checkpoints

    _, tokenizer = corpus
    folder = hf_folder(tmp_path / "model", tokenizer)
    model = save_weights(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    (entry,) = open_checkpoints(folder).entries()
    checkpoint = entry.load(False)
    np.testing.assert_array_equal(checkpoint.W_E, model.get_input_embeddings().weight.detach().numpy())


def test_resume_checkpoint_refuses_a_malicious_pickle(tmp_path):
    """``--resume`` reads ``checkpoint/`` as safetensors only (both trainers share the format): a
    pickle named by ``state.json`` is refused as unreadable, naming the file, and its payload never runs."""
    from ctxstair.config.lm import LMConfig
    from ctxstair.run import Run

    (tmp_path / "checkpoint").mkdir()
    write_malicious(tmp_path / "checkpoint" / "state-00000010.safetensors", tmp_path / "marker")
    (tmp_path / "checkpoint" / "state.json").write_text(json.dumps({"step": 10,
                                                                    "tensors": "state-00000010.safetensors"}))
    with pytest.raises(InputError, match=r"state-00000010.safetensors is unreadable"):
        Run(tmp_path, LMConfig()).load_checkpoint(model=None, optimizer=None, generator=None)  # fails before using them
    assert not (tmp_path / "marker").exists()


def test_signatures_npz_with_an_object_array_is_refused_without_unpickling(tmp_path):
    """``signatures.npz`` is read with ``allow_pickle=False``: an object array is refused, not built."""
    from ctxstair.rundir import read_signatures

    payload = np.empty(1, dtype=object)
    payload[0] = Payload(tmp_path / "marker")
    np.savez(tmp_path / "signatures.npz", tokens=np.arange(3), labels=payload, context=np.arange(3),
             occurrence=np.ones(3), order0=np.ones((3, 1)))
    with pytest.raises(InputError, match="signatures.npz"):
        read_signatures(tmp_path)
    assert not (tmp_path / "marker").exists()
