"""Tests for ctxstair.checkpoints.hub and ``ctxstair analyze-model ORG/NAME --revisions`` (SPEC §7): released
checkpoint series read revision by revision through huggingface_hub. Nothing is downloaded: every
test runs offline (HF_HUB_OFFLINE=1) on a Hub cache written here — ``models--org--name/refs/<revision>``
holding a commit hash, the files in ``snapshots/<hash>/`` — with tiny random GPT-NeoX and Llama models."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import hub_helpers
import huggingface_hub
import numpy as np
import pytest
import torch
import transformers
from hub_helpers import REVISIONS, SETTINGS, FakeHub, add_series, cli, run_series, save_neox
from repo_paths import ROOT
from safetensors.torch import load_file, save_file
from short_runs import PNG_ONLY

from ctxstair.checkpoints import hub
from ctxstair.checkpoints.hub import (
    PICKLE,
    SAFETENSORS,
    hub_id,
    log_spaced,
    parse_revisions,
    read_input_embedding,
    revision_files,
)
from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.measure.analyze_model import analyze_model

# The fake Hub cache and its fixtures, shared with tests/measure/test_series_checks.py.
fake_hub, text, tokenizer = hub_helpers.fake_hub, hub_helpers.text, hub_helpers.tokenizer


# --- revisions ------------------------------------------------------------------------------------


#: Pythia's 154 revisions: step0, ten log-spaced steps 1 ... 512, then every 1000 steps up to 143000.
PYTHIA = (["step0", "step1", "step2", "step4", "step8", "step16", "step32", "step64", "step128", "step256", "step512"]
          + [f"step{1000 * i}" for i in range(1, 144)])


def test_log_spacing_of_pythias_154_revisions():
    assert len(PYTHIA) == 154 and len(set(PYTHIA)) == 154
    # Targets equally spaced in log(1 + step) from 0 to log(143001), each revision the nearest one in that
    # measure (worked out by hand: e.g. target 4 is 1 + step = 23.7, 0.3310 from log 33 against 0.3323 from log 17).
    assert log_spaced(PYTHIA, 16) == ["step0", "step1", "step4", "step8", "step32", "step64", "step128", "step256",
                                      "step512", "step1000", "step3000", "step6000", "step13000", "step29000",
                                      "step65000", "step143000"]
    assert log_spaced(list(reversed(PYTHIA)), 16) == log_spaced(PYTHIA, 16)  # any order in, step order out
    assert log_spaced(PYTHIA, 2) == ["step0", "step143000"]
    assert log_spaced(PYTHIA, 154) == log_spaced(PYTHIA, 500) == PYTHIA
    # Denser than the early steps: consecutive revisions there, always n distinct ones, first and last kept.
    dense = log_spaced(PYTHIA, 40)
    assert len(set(dense)) == 40 and dense[:11] == PYTHIA[:11] and dense[-1] == "step143000"
    with pytest.raises(InputError, match="fewer than the first and the last"):
        log_spaced(PYTHIA, 1)
    with pytest.raises(InputError, match="needs revisions named by their step"):
        log_spaced(["step0", "main"], 2)


def test_revision_lists_are_put_in_step_order_and_checked():
    assert parse_revisions("org/x", None) == ["main"]
    assert parse_revisions("org/x", "step4, main,step0,step1000-tokens4B") == ["step0", "step4", "step1000-tokens4B",
                                                                               "main"]
    assert hub.revision_step("step20000-tokens84B") == 20000 and hub.revision_step("stepper") is None
    for spec, message in (("step0,step0", "listed twice"), ("step0,,step1", "non-empty"), ("log:x", "log:N")):
        with pytest.raises(InputError, match=message):
            parse_revisions("org/x", spec)


def test_a_hub_id_is_an_org_slash_name_that_is_no_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_id("EleutherAI/pythia-160m") == "EleutherAI/pythia-160m"
    (tmp_path / "runs" / "lm").mkdir(parents=True)
    assert hub_id("runs/lm") is None  # an existing path wins
    assert hub_id(str(tmp_path / "missing")) is None and hub_id("a/b/c") is None and hub_id("smollm2") is None


def test_log_n_picks_from_the_refs_of_the_offline_cache(fake_hub, tokenizer):
    add_series(fake_hub, tokenizer, "neox")
    fake_hub.snapshot("org/tiny", "main")  # not a step: never chosen
    # log(1 + step) = 0, 0.69, 1.61, 2.83: the middle target 1.42 is nearest step4.
    assert parse_revisions("org/tiny", "log:3") == ["step0", "step4", "step16"]
    assert parse_revisions("org/tiny", "log:10") == REVISIONS
    with pytest.raises(InputError, match="no revisions named by their step .* in the local Hugging Face cache"):
        parse_revisions("org/other", "log:4")


# --- the measurements ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["neox", "llama"])
def test_each_revision_measures_as_the_model_in_its_snapshot_folder(fake_hub, tokenizer, text, family):
    folders = add_series(fake_hub, tokenizer, family)
    result = run_series("org/tiny", ["step16", "step0", "step4", "step1"], text)
    assert [row["name"] for row in result["checkpoints"]] == REVISIONS
    assert [row["step"] for row in result["checkpoints"]] == [0, 1, 4, 16]
    rows = result["checkpoints"]
    assert len({row["rho_next"] for row in rows}) == 4  # each revision its own weights
    for i, (revision, folder) in enumerate(folders.items()):
        direct = analyze_model(folder, text=text, **SETTINGS)
        (expected,) = direct["checkpoints"]
        row = rows[i]
        assert row["weights"] == SAFETENSORS and row["commit"] == folder.name
        assert {key: row[key] for key in expected if key not in ("name", "step")} == \
            {key: value for key, value in expected.items() if key not in ("name", "step")}
        if i == len(folders) - 1:
            np.testing.assert_array_equal(result["similarity"]["embedding"], direct["similarity"]["embedding"])
        # The embedding read alone is the one transformers loads with the whole model.
        W_E, weights, where = read_input_embedding(revision_files("org/tiny", revision))
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
        np.testing.assert_array_equal(W_E, model.get_input_embeddings().weight.detach().numpy())
    for key in ("setup", "corpus", "sample_window", "paths_skipped"):
        assert result[key] == direct[key], key
    # Both families have a model view: every revision gets the path measures, on the model as it is.
    assert result["paths_skipped"] is None and all("attention_path_corr/1" in row for row in rows)
    assert family == "llama" or where == "gpt_neox.embed_in.weight in model.safetensors"


def split_into_two_shards(folder: Path, embedding: str) -> None:
    """``folder``'s model.safetensors as two shards and an index, the embedding alone in the first."""
    state = load_file(folder / "model.safetensors")
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    save_file({embedding: state.pop(embedding)}, folder / first)
    save_file(state, folder / second)
    index = {"metadata": {}, "weight_map": {embedding: first, **dict.fromkeys(state, second)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize("family, embedding", [("neox", "gpt_neox.embed_in.weight"),
                                               ("llama", "model.embed_tokens.weight")])
def test_the_embedding_measures_read_only_the_shard_that_holds_the_embedding(fake_hub, tokenizer, text, family,
                                                                           embedding):
    folders = add_series(fake_hub, tokenizer, family, revisions=["step0", "step1"])
    expected = run_series("org/tiny", ["step0", "step1"], text, paths=False)
    for folder in folders.values():
        split_into_two_shards(folder, embedding)
        (folder / "model-00002-of-00002.safetensors").unlink()  # never fetched: not in the cache
    assert sorted(p.name for p in folders["step1"].iterdir()) == [
        "config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
        "tokenizer.json", "tokenizer_config.json"]
    result = run_series("org/tiny", ["step0", "step1"], text, paths=False)
    assert result["checkpoints"] == expected["checkpoints"]
    # The path measures need the whole network, and only they fetch the other shard.
    with pytest.raises(InputError, match="model-00002-of-00002.safetensors of org/tiny at .* is not in the local"):
        run_series("org/tiny", ["step0", "step1"], text)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak memory from /proc (Linux)")
def test_reading_the_embedding_of_a_large_file_takes_little_memory(fake_hub, tokenizer, tmp_path):
    # A 2-layer Llama whose MLPs make a ~300 MB file around a 200 kB embedding (vocabulary 400, d = 128).
    config = transformers.LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=128, intermediate_size=100_000,
                                      num_hidden_layers=2, num_attention_heads=2, tie_word_embeddings=False)
    folder = fake_hub.snapshot("org/big", "step0")
    config.save_pretrained(folder)
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in transformers.AutoModelForCausalLM.from_config(config).named_parameters()}
    save_file({name: torch.zeros(shape) for name, shape in shapes.items()}, folder / "model.safetensors")
    size = (folder / "model.safetensors").stat().st_size
    assert size > 300e6
    # The peak resident memory of the process, VmHWM: getrusage's ru_maxrss would start from this (large)
    # pytest process's, since Linux carries it across fork and exec.
    script = """
import json, re, sys
from pathlib import Path
from safetensors.torch import load_file
from ctxstair.checkpoints.base import embedding_parameter
from ctxstair.checkpoints.hub import read_input_embedding, revision_files

def peak():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024

files = revision_files("org/big", "step0")
embedding_parameter(files.config)  # imports the model's code before the measurement starts
before = peak()
W_E, _, _ = read_input_embedding(files)
embedding = peak()
state = {name: tensor.clone() for name, tensor in load_file(sys.argv[1]).items()}  # in memory, as a model
print(json.dumps({"before": before, "embedding": embedding, "whole": peak(), "W_E": W_E.nbytes}))
"""
    env = {**os.environ, "HF_HUB_CACHE": str(fake_hub.cache), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(folder / "model.safetensors")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    peaks = json.loads(done.stdout.splitlines()[-1])
    assert peaks["W_E"] == tokenizer.vocab_size * 128 * 4
    # Reading the embedding raises the peak by a small fraction of the file; loading the file, by about all of it.
    assert peaks["embedding"] - peaks["before"] < 0.1 * size, (peaks, size)
    assert peaks["whole"] - peaks["embedding"] > 0.8 * size, (peaks, size)


def test_a_revision_with_only_pickled_weights_is_read_with_the_restricted_loader(fake_hub, tokenizer, text, capsys):
    add_series(fake_hub, tokenizer, "neox", revisions=["step0"])
    pickled = fake_hub.snapshot("org/tiny", "step1")
    model = save_neox(pickled, tokenizer, seed=1)  # the weights of step0, pickled
    (pickled / "model.safetensors").unlink()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    W_E, weights, where = read_input_embedding(revision_files("org/tiny", "step1"))
    assert weights == PICKLE == "pickle (torch.load weights_only=True)"
    assert where == "gpt_neox.embed_in.weight in pytorch_model.bin"
    np.testing.assert_array_equal(W_E, model.get_input_embeddings().weight.detach().numpy())
    result = run_series("org/tiny", ["step0", "step1"], text)
    safe, pickle = result["checkpoints"]
    assert (safe["weights"], pickle["weights"]) == (SAFETENSORS, PICKLE)
    assert pickle["rho_next"] == safe["rho_next"]
    assert pickle["probe_heldout_mse"] == safe["probe_heldout_mse"]
    assert main(["analyze-model", "org/tiny", "--revisions", "step0,step1", "--corpus", "synthetic", "--k", "20"]) == 0
    out = capsys.readouterr().out
    assert ("step1: read gpt_neox.embed_in.weight in pytorch_model.bin (pickle (torch.load "
            "weights_only=True))" in out)


# --- the command line, resuming ---------------------------------------------------------------------------


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_cli_bad_series_requests_exit_2_with_one_line(fake_hub, tokenizer, tmp_path, capsys):
    add_series(fake_hub, tokenizer, "neox", revisions=["step0"])
    capsys.readouterr()  # transformers' progress bars
    corpus = ["--corpus", "synthetic", "--k", "20"]
    assert cli("org/tiny", "--revisions", "step0,step3", *corpus, "--out", str(tmp_path / "o")) == 2
    err = one_line_error(capsys)
    assert "config.json of org/tiny at step3 is not in the local Hugging Face cache" in err and "HF_HUB_OFFLINE" in err
    # What was finished before it stays, for --resume.
    assert sorted(p.name for p in (tmp_path / "o").rglob("*.json")) == ["series.json", "step0.json"]
    (tmp_path / "model").mkdir()
    assert cli(str(tmp_path / "model"), "--revisions", "step0", *corpus) == 2
    assert "revisions are for a Hugging Face Hub model id" in one_line_error(capsys)
    assert cli("org/tiny", "--revisions", "step0", "--resume", *corpus) == 2
    assert "--resume needs --out" in one_line_error(capsys)
    assert cli("org/tiny", "--revisions", "log:1", *corpus) == 2
    assert "log:N with N >= 2" in one_line_error(capsys)


def test_cli_series_writes_each_revision_and_the_analysis(fake_hub, tokenizer, tmp_path, capsys):
    add_series(fake_hub, tokenizer, "llama")
    out = tmp_path / "series"
    assert cli("org/tiny", "--revisions", "log:3", "--corpus", "synthetic", "--k", "20", "--window", "16",
               "--windows", "4", "--path-windows", "2", "--out", str(out)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "3 revisions: step0, step4, step16; the tokenizer of step0 serves all of them" in lines
    assert "attention paths on 4 windows and path shares on 2 of them, 16 tokens each (sample seed 0); null: " \
           "largest |r| of 100 token permutations" in lines
    assert [line.split()[:2] for line in lines if "ρ_next pearson" in line] == [["step", "0"], ["step", "4"],
                                                                                ["step", "16"]]
    assert sum("attention-path corr by layer" in line for line in lines) == 3
    assert lines[-1] == f"wrote {out / 'analysis.json'} and {out / 'analysis.png'} and {out / 'analysis.svg'}"
    summary = json.loads((out / "analysis.json").read_text())
    assert summary["source"] == "org/tiny" and summary["corpus"]["name"] == "synthetic"
    assert [(row["name"], row["step"]) for row in summary["checkpoints"]] == [("step0", 0), ("step4", 4),
                                                                               ("step16", 16)]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step0.json", "step0.npz", "step16.json", "step16.npz", "step4.json", "step4.npz"]
    assert json.loads((out / "series.json").read_text())["revisions"] == ["step0", "step4", "step16"]
    assert (out / "analysis.png").stat().st_size > 0
    # Without --out a series still runs: lines, no files.
    assert cli("org/tiny", "--revisions", "step1", "--corpus", "synthetic", "--k", "20", "--no-paths") == 0
    assert "ρ_next pearson" in capsys.readouterr().out


def fail_once(monkeypatch, revision: str) -> list[str]:
    """Reading ``revision``'s embedding fails once ("the connection dropped"), as a run killed there;
    returns the list of revisions read from then on, in order."""
    read, failing, measured = hub.read_input_embedding, {revision}, []

    def interrupted(files):
        measured.append(files.revision)
        if files.revision in failing:
            failing.remove(files.revision)
            raise InputError("the connection dropped")
        return read(files)

    monkeypatch.setattr(hub, "read_input_embedding", interrupted)
    return measured


def test_cli_resume_measures_only_the_unfinished_revisions_and_ends_with_the_same_bytes(fake_hub, tokenizer, tmp_path,
                                                                                       capsys, monkeypatch):
    add_series(fake_hub, tokenizer, "neox")
    capsys.readouterr()  # transformers' progress bars
    args = ["org/tiny", "--revisions", ",".join(REVISIONS), "--corpus", "synthetic", "--k", "20", "--window", "16",
            *PNG_ONLY]
    assert cli(*args, "--out", str(tmp_path / "whole")) == 0
    measured = fail_once(monkeypatch, "step4")  # as a run killed after two revisions
    out = tmp_path / "resumed"
    assert cli(*args, "--out", str(out)) == 2
    assert "the connection dropped" in one_line_error(capsys)
    assert sorted(p.name for p in (out / "checkpoints").glob("*.json")) == ["step0.json", "step1.json"]
    assert not (out / "analysis.json").exists()
    assert cli(*args, "--out", str(out)) == 2  # without --resume the folder is kept and refused
    assert "use --resume to continue it" in one_line_error(capsys)
    assert cli(*args, "--k", "21", "--out", str(out), "--resume") == 2  # other settings: refused
    assert "holds an analysis with settings = {'k': 20" in one_line_error(capsys)
    measured.clear()
    assert cli(*args, "--out", str(out), "--resume") == 0
    assert measured == ["step4", "step16"]  # the finished revisions are read back, not measured
    lines = capsys.readouterr().out.splitlines()
    assert "step0  skipped (done)" in lines and "step1  skipped (done)" in lines
    assert (out / "analysis.json").read_bytes() == (tmp_path / "whole" / "analysis.json").read_bytes()
    measured.clear()
    assert cli(*args, "--out", str(out), "--resume") == 0  # all done: only the analysis is assembled again
    assert measured == []
    assert (out / "analysis.json").read_bytes() == (tmp_path / "whole" / "analysis.json").read_bytes()


# --- deleting measured revisions from the cache ----------------------------------------------------------


class FakeRemote:
    """The Hub behind ``hf_hub_download``: revisions written into a folder laid out as a cache (``hub``), each
    file copied into the local cache on first use as huggingface_hub stores a download (a blob, a relative
    symlink from the snapshot, the revision's ref; for a file the revision lacks, the ref alone), then read
    from there by the real ``hf_hub_download``, offline.

    Attributes:
        downloads: (commit, file, the commits whose snapshots in the local cache held weights just before).
    """

    def __init__(self, hub: FakeHub, cache: Path):
        self.hub, self.cache, self.downloads = hub, cache, []
        self.real = huggingface_hub.hf_hub_download

    def download(self, repo_id: str, filename: str, *, revision: str, **options) -> str:
        folder = f"models--{repo_id.replace('/', '--')}"
        ref = self.hub.cache / folder / "refs" / revision
        commit = ref.read_text() if ref.is_file() else revision
        source, local = self.hub.cache / folder / "snapshots" / commit / filename, self.cache / folder
        if ref.is_file():
            (local / "refs").mkdir(parents=True, exist_ok=True)
            (local / "refs" / revision).write_text(commit)
        target = local / "snapshots" / commit / filename
        if source.is_file() and not target.exists():
            self.downloads.append((commit, filename, cached_weights(self.cache)))
            blob = local / "blobs" / hashlib.sha256(source.read_bytes()).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, blob)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.path.relpath(blob, target.parent))
        return self.real(repo_id, filename, revision=revision, **options)

    def fetch_all(self, repo_id: str, revision: str) -> None:
        """Every file of a revision into the local cache, as a user's ``hf download`` would."""
        commit = (self.hub.cache / f"models--{repo_id.replace('/', '--')}" / "refs" / revision).read_text()
        for file in (self.hub.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit).iterdir():
            self.download(repo_id, file.name, revision=revision)


def cached_weights(cache: Path) -> list[str]:
    """The commits whose snapshots in a Hub cache hold a weight file."""
    return sorted({path.parent.name for path in cache.glob("models--*/snapshots/*/*") if path.suffix == ".safetensors"})


@pytest.fixture
def remote(fake_hub, tmp_path, monkeypatch) -> FakeRemote:
    """A fake Hub that the code under test downloads from into the (empty) cache of ``fake_hub``."""
    fake = FakeRemote(FakeHub(tmp_path / "remote"), fake_hub.cache)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.download)
    return fake


def remote_series(remote: FakeRemote, tokenizer) -> dict[str, Path]:
    """:data:`REVISIONS` on the fake Hub, and ``main`` serving the files of the last, under its own commit."""
    folders = add_series(remote.hub, tokenizer, "neox")
    folders["main"] = remote.hub.snapshot("org/tiny", "main")
    for file in folders[REVISIONS[-1]].iterdir():
        shutil.copy(file, folders["main"] / file.name)
    return folders


EVICT = ["org/tiny", "--revisions", ",".join(REVISIONS), "--corpus", "synthetic", "--k", "20", "--window", "16",
         "--no-probe", "--no-paths"]


def test_evict_measured_deletes_each_downloaded_revision_once_measured(remote, fake_hub, tokenizer, tmp_path, capsys):
    folders = remote_series(remote, tokenizer)
    assert cli(*EVICT, "--out", str(tmp_path / "kept")) == 0
    # Without the option every revision stays; their weights pile up in the cache as the series goes.
    assert cached_weights(fake_hub.cache) == sorted(folder.name for folder in folders.values())
    assert [held for _, file, held in remote.downloads if file == "model.safetensors"] == [
        sorted(folders[name].name for name in REVISIONS[:i]) for i in range(len(REVISIONS) + 1)]
    shutil.rmtree(fake_hub.cache)
    fake_hub.cache.mkdir()
    remote.downloads.clear()
    capsys.readouterr()
    out = tmp_path / "evicted"
    assert cli(*EVICT, "--evict-measured", "--out", str(out)) == 0
    lines = capsys.readouterr().out.splitlines()
    # Each revision goes right after its line, main (read for the series checks alone) at the end.
    deleted = [line.split(":")[0].strip() for line in lines if "deleted from the Hugging Face cache" in line]
    assert deleted == [*REVISIONS, "main"]
    assert all(line.endswith("freed)") for line in lines if "deleted from the Hugging Face cache" in line)
    # When a revision's weights arrive, no other revision's are in the cache: one revision on disk at a time.
    assert [(commit, held) for commit, file, held in remote.downloads if file == "model.safetensors"] == [
        (folders[name].name, []) for name in [*REVISIONS, "main"]]
    assert not (fake_hub.cache / "models--org--tiny").exists()  # nothing of the series left behind
    # The numbers, and the series checks, are those of the run that kept everything.
    assert (out / "analysis.json").read_bytes() == (tmp_path / "kept" / "analysis.json").read_bytes()


def test_evict_measured_keeps_what_the_user_had_and_retries_what_it_cannot_scan(remote, fake_hub, tokenizer,
                                                                              tmp_path, capsys):
    folders = remote_series(remote, tokenizer)
    remote.fetch_all("org/tiny", "step0")  # downloaded by the user before the run
    remote.download("org/tiny", "tokenizer.json", revision="step1")  # left by the start of an interrupted run
    user = {path.name: path.read_bytes() for path in (fake_hub.cache / "models--org--tiny" / "snapshots" /
                                                       folders["step0"].name).iterdir()}
    # step4 has no tokenizer.json: fetching it leaves a ref to a commit with no snapshot (as huggingface_hub
    # does), which scan_cache_dir refuses until step4's own files arrive.
    (folders["step4"] / "tokenizer.json").unlink()
    capsys.readouterr()
    assert cli("org/tiny", "--revisions", "step0,step1,step4", *EVICT[3:], "--evict-measured") == 0
    lines = capsys.readouterr().out.splitlines()
    # step0 is the user's: never pending. step1 waits for step4's snapshot, and goes with it.
    (waiting,) = [line for line in lines if "not deleted from the Hugging Face cache yet" in line]
    step4 = folders["step4"].name
    assert waiting.startswith("    step1: not deleted from the Hugging Face cache yet, it cannot be scanned "
                              f"(Reference(s) refer to missing commit hashes: {{'{step4}': {{'step4'}}}}")
    assert [line.split(" (")[0].strip() for line in lines if "deleted from the Hugging Face cache (" in line] == [
        "step1, step4: deleted from the Hugging Face cache", "main: deleted from the Hugging Face cache"]
    # The user's revision stays as it was, and only it.
    snapshots = fake_hub.cache / "models--org--tiny" / "snapshots"
    assert [path.name for path in snapshots.iterdir()] == [folders["step0"].name]
    assert {path.name: path.read_bytes() for path in (snapshots / folders["step0"].name).iterdir()} == user
    assert sorted(path.name for path in (fake_hub.cache / "models--org--tiny" / "refs").iterdir()) == ["step0"]


def test_evict_measured_resumes_without_the_deleted_revisions(remote, fake_hub, tokenizer, tmp_path, capsys,
                                                              monkeypatch):
    folders = remote_series(remote, tokenizer)
    assert cli(*EVICT, "--out", str(tmp_path / "whole")) == 0
    shutil.rmtree(fake_hub.cache)
    fake_hub.cache.mkdir()
    fail_once(monkeypatch, "step4")  # as a run killed after two revisions
    out = tmp_path / "resumed"
    assert cli(*EVICT, "--evict-measured", "--out", str(out)) == 2
    assert sorted(p.name for p in (out / "checkpoints").glob("*.json")) == ["step0.json", "step1.json"]
    snapshots = fake_hub.cache / "models--org--tiny" / "snapshots"
    assert folders["step0"].name not in os.listdir(snapshots) and folders["step1"].name not in os.listdir(snapshots)
    remote.downloads.clear()
    capsys.readouterr()
    assert cli(*EVICT, "--evict-measured", "--out", str(out), "--resume") == 0
    # The finished revisions are read back: of them only the small files the start reads come again (the
    # tokenizers to compare, the first revision's config), never weights; and they go again.
    again = {(commit, file) for commit, file, _ in remote.downloads if commit in (folders["step0"].name,
                                                                                  folders["step1"].name)}
    assert again == {(folders["step0"].name, "config.json"), (folders["step0"].name, "tokenizer.json"),
                     (folders["step1"].name, "tokenizer.json")}
    lines = capsys.readouterr().out.splitlines()
    assert "step0  skipped (done)" in lines
    assert [line.split(":")[0].strip() for line in lines if "deleted from the Hugging Face cache" in line] == [
        *REVISIONS, "main"]
    assert not (fake_hub.cache / "models--org--tiny").exists()
    assert (out / "analysis.json").read_bytes() == (tmp_path / "whole" / "analysis.json").read_bytes()


def test_evict_measured_is_for_hub_models(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    assert cli(str(tmp_path / "model"), "--corpus", "synthetic", "--evict-measured") == 2
    assert "evicting measured revisions from the Hugging Face cache is for a Hub model id" in one_line_error(capsys)
