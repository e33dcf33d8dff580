"""ctxstair.monitor: staircase measurements inside someone else's training loop — the numbers
against an independent computation, a model left as it was, bad input, the cadence, the Trainer
callback (log_history, TensorBoard, two-process DDP, training unchanged), the live curve against
`analyze-model` on the saved checkpoints, `ctxstair report` of a Trainer output, Lightning, and the
README's snippets."""

import copy
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats
import torch
from family_models import family_model, lm_train_model
from monitor_helpers import TINY_ARGS, example
from repo_paths import HELPERS, ROOT

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.measure import primitives
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.models import next_token_loss
from ctxstair.monitor import Cadence, StaircaseCallback, StaircaseMonitor, monitor_steps, monitor_tokens
from ctxstair.signatures import next_token_signature
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.train.schedule import snapshot_schedule

#: The tiny example run's cadence (log_points 4, every 5, paths every 5; 12 steps): all steps, and the path steps.
STEPS = [1, 2, 3, 5, 10, 12]
PATH_STEPS = [5, 10, 12]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny synthetic corpus file, its BPE and its windows (n, 32)."""
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(synthetic_corpus(n_sentences=3000))
    module = example()
    tokenizer, windows = module.corpus_windows(path.read_text(), 300, 32, 20000)
    return {"path": path, "tokenizer": tokenizer, "windows": windows}


def independent_rho(W_E: np.ndarray, windows: np.ndarray, tokens: np.ndarray) -> tuple[float, float]:
    """ρ_next written out: next-token counts by a loop, row-normalised, cosines, upper-triangle correlations."""
    V = W_E.shape[0]
    counts = np.zeros((V, V))
    for row in windows:
        for a, b in zip(row[:-1], row[1:]):
            counts[a, b] += 1
    phi = counts[tokens] / np.maximum(counts[tokens].sum(axis=1, keepdims=True), 1)

    def cosines(M):
        norms = np.linalg.norm(M, axis=1, keepdims=True)
        U = np.divide(M, norms, out=np.zeros_like(M), where=norms > 0)
        return U @ U.T

    upper = np.triu_indices(len(tokens), 1)
    a, b = cosines(W_E[tokens].astype(np.float64))[upper], cosines(phi)[upper]
    return float(np.corrcoef(a, b)[0, 1]), float(scipy.stats.spearmanr(a, b).statistic)


class HookedLike(torch.nn.Module):
    """A module with only a ``W_E`` parameter, as TransformerLens's HookedTransformer exposes."""

    def __init__(self, W_E: torch.Tensor):
        super().__init__()
        self.W_E = torch.nn.Parameter(W_E.clone())


def test_rho_next_equals_an_independent_computation_for_every_kind_of_model(corpus):
    windows, tokenizer = corpus["windows"], corpus["tokenizer"]
    tokens = monitor_tokens(tokenizer, windows, k=30)
    llama = lm_train_model(tokenizer.vocab_size)
    W_E = llama.get_input_embeddings().weight
    # Embedding rows built from the signatures (plus noise), so that ρ_next is far from 0 and a wrong
    # token order, normalisation or triangle would show.
    rng = np.random.default_rng(1)
    counts = np.zeros((W_E.shape[0],) * 2)
    np.add.at(counts, (windows[:, :-1].ravel(), windows[:, 1:].ravel()), 1)
    W = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1) @ rng.normal(size=(W_E.shape[0], 16))
    with torch.no_grad():
        W_E.copy_(torch.from_numpy(W + 0.05 * rng.normal(size=W.shape)))
    expected = independent_rho(W_E.detach().numpy(), windows, tokens)
    assert expected[0] > 0.5
    monitor = StaircaseMonitor(windows, tokens, probe=False, paths=False)
    # Bitwise the number of lm.analysis.rho_next, which the LM runs and analyze-model report.
    phi = next_token_signature(windows, tokenizer.vocab_size, tokens=tokens)
    rows = W_E.detach().numpy()[tokens].astype(np.float64)
    assert monitor.measure(llama)["rho_next"] == primitives.rho_next(rows, phi)["pearson"][0]
    for model in (llama, HookedLike(W_E.detach())):
        values = monitor.measure(model)
        assert values["rho_next"] == pytest.approx(expected[0], abs=1e-9), type(model).__name__
        assert values["rho_next_spearman"] == pytest.approx(expected[1], abs=1e-9), type(model).__name__


def test_monitor_tokens_reads_a_transformers_tokenizer_as_our_own(corpus):
    from transformers import PreTrainedTokenizerFast

    windows, tokenizer = corpus["windows"], corpus["tokenizer"]
    ours = monitor_tokens(tokenizer, windows, k=30)
    assert ours.size == 30 and tokenizer.word_like(ours).all()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer)
    assert monitor_tokens(fast, torch.from_numpy(windows), k=30).tolist() == ours.tolist()


def test_importing_the_monitor_package_loads_no_torch():
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import ctxstair.monitor"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    imported = re.findall(r"\|\s*(\S+)\s*$", done.stderr, flags=re.M)
    assert "ctxstair.monitor" in imported and "torch" not in imported and "transformers" not in imported


def test_a_model_in_training_mode_is_measured_without_dropout():
    # GPT-2 ships with dropout 0.1 after its embeddings, attention and MLPs: measured in training mode,
    # the path measures would draw from the training's random stream and change with every draw.
    model = family_model("gpt2", dtype=torch.float32)
    assert model.config.resid_pdrop > 0
    windows = torch.randint(0, model.config.vocab_size, (32, 16), generator=torch.Generator().manual_seed(0))
    monitor = StaircaseMonitor(windows, list(range(12)), vocab_size=model.config.vocab_size, probe=False,
                               attention_windows=8, path_windows=2)
    in_eval_mode = monitor.measure(model)
    model.train()
    rng_state = torch.get_rng_state()
    assert monitor.measure(model) == in_eval_mode
    assert torch.equal(torch.get_rng_state(), rng_state) and model.training
    assert "path_share/unembed" in in_eval_mode


def test_measure_reads_the_model_without_changing_it(corpus):
    from transformers import AutoConfig, AutoModelForCausalLM

    windows, tokenizer = corpus["windows"], corpus["tokenizer"]
    monitor = StaircaseMonitor(windows, monitor_tokens(tokenizer, windows, k=20), probe_steps=20)
    hf = lm_train_model(tokenizer.vocab_size)
    hf.train()
    hf.model.layers[0].eval()  # a frozen part in eval mode must stay so
    weights = {name: p.detach().clone() for name, p in hf.named_parameters()}
    rng_state = torch.get_rng_state()
    values = monitor.measure(hf)
    assert hf.training and not hf.model.layers[0].training and hf.model.layers[1].training
    assert all(torch.equal(p, weights[name]) and p.grad is None for name, p in hf.named_parameters())
    assert torch.equal(torch.get_rng_state(), rng_state)
    assert set(values) == {"rho_next", "rho_next_spearman", "probe_heldout_mse", "probe_shuffled_mse",
                           "attention_path_corr/0", "attention_path_null/0", "attention_path_corr/1",
                           "attention_path_null/1", "path_share/embed", "path_share/attn.0", "path_share/mlp.0",
                           "path_share/attn.1", "path_share/mlp.1", "unembedding_alignment"}
    assert monitor.skipped is None
    assert sum(v for k, v in values.items() if k.startswith("path_share/")) == pytest.approx(1.0)

    bloom = AutoModelForCausalLM.from_config(AutoConfig.for_model("bloom", vocab_size=tokenizer.vocab_size,
                                                                  hidden_size=16, n_layer=1, n_head=2))
    values = monitor.measure(bloom)
    assert set(values) == {"rho_next", "rho_next_spearman", "probe_heldout_mse", "probe_shuffled_mse"}
    assert monitor.skipped.startswith("no model view") and "'bloom'" in monitor.skipped
    assert set(monitor.measure(hf, probe=False, paths=False)) == {"rho_next", "rho_next_spearman"}


def test_numpy_runs_on_one_blas_thread_while_the_monitor_measures(corpus, monkeypatch):
    """Multi-threaded OpenBLAS calls left worker threads spinning into the next training step
    (benchmarks/RESULTS.md): inside measure every BLAS library has one thread, afterwards its own again."""
    from threadpoolctl import threadpool_info, threadpool_limits

    windows, tokenizer = corpus["windows"], corpus["tokenizer"]
    monitor = StaircaseMonitor(windows, monitor_tokens(tokenizer, windows, k=20), probe=False)
    seen = []

    def recording(*args, **kwargs):
        seen.append({info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"})
        return rho_next_against(*args, **kwargs)

    rho_next_against = primitives.rho_next_against
    monkeypatch.setattr(primitives, "rho_next_against", recording)
    with threadpool_limits(limits=2, user_api="blas"):
        monitor.measure(lm_train_model(tokenizer.vocab_size))
        after = {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}
    assert len(seen) == 1 and seen[0] and set(seen[0].values()) == {1}
    assert set(after) == set(seen[0]) and set(after.values()) == {2}


@pytest.mark.parametrize(("make", "message"), [
    (lambda w, t: StaircaseMonitor(w[0], t), r"windows must be a 2-D integer array .* shape \(32,\)"),
    (lambda w, t: StaircaseMonitor(w.astype(float), t), "windows must be a 2-D integer array .*float64"),
    (lambda w, t: StaircaseMonitor(w[:, :1], t), "at least one window of T >= 2 tokens"),
    (lambda w, t: StaircaseMonitor(-w, t), "negative token id"),
    (lambda w, t: StaircaseMonitor(w, t[:3]), "at least 4 token ids"),
    (lambda w, t: StaircaseMonitor(w, np.r_[t, t[0]]), "duplicate token ids"),
    (lambda w, t: StaircaseMonitor(w, t[None]), "tokens must be a non-empty 1-D list"),
    (lambda w, t: StaircaseMonitor(w, t, path_windows=200), "path_windows must be an integer in 1..128"),
    (lambda w, t: StaircaseMonitor(w, np.r_[t, 5000], probe=False).measure(lm_train_model(300)),
     "tokens hold id 5000, but the model has only 300 embedding rows"),
    (lambda w, t: StaircaseMonitor(w, t, probe=False).measure(torch.nn.Linear(3, 3)),
     "Linear has no input embeddings"),
    (lambda w, t: StaircaseMonitor(w, t, probe=False).measure(lm_train_model(300), probe=True), "probe=False"),
    (lambda w, t: StaircaseMonitor(w, t, probe=False, vocab_size=400).measure(lm_train_model(300)),
     "300 embedding rows, but the staircase setup's signatures are over vocab_size=400"),
    (lambda w, t: Cadence(0), "max_steps must be an integer >= 1"),
    (lambda w, t: Cadence(10, every=0), "every must be an integer >= 1"),
    (lambda w, t: StaircaseCallback(None), "monitor must be a StaircaseMonitor"),
])
def test_bad_input_is_an_input_error_naming_the_problem(corpus, make, message):
    windows = corpus["windows"]
    with pytest.raises(InputError, match=message) as error:
        make(windows, monitor_tokens(corpus["tokenizer"], windows, k=20))
    assert "\n" not in str(error.value)


def test_the_cadence_measures_rho_next_log_spaced_and_the_expensive_parts_sparsely():
    assert monitor_steps(1000) == snapshot_schedule(1000, 24, 250)
    cadence = Cadence(2600)
    assert cadence.parts(6) is None and 6 not in cadence  # not a log-spaced step
    assert cadence.parts(7) == {"probe": False, "paths": False}
    assert cadence.parts(750) == {"probe": False, "paths": False}
    assert cadence.parts(1000) == cadence.parts(2600) == {"probe": False, "paths": True}  # a multiple; the last step
    every = Cadence(100, log_points=3, every=10, paths_every=1, probe_every=20)
    assert every.steps == [0, 1, 3, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert [s for s in every.steps if every.parts(s)["probe"]] == [0, 20, 40, 60, 80, 100]
    assert all(every.parts(s)["paths"] for s in every.steps)


@pytest.fixture(scope="module")
def trainer_run(corpus, tmp_path_factory):
    """The example's Trainer run, shortened: 12 steps of a tiny Llama with the callback and TensorBoard."""
    module = example()
    out = tmp_path_factory.mktemp("trainer") / "run"
    args = module.parser().parse_args([*TINY_ARGS, "--out", str(out), "--corpus", str(corpus["path"])])
    trainer, callback = module.build_trainer(args, corpus["tokenizer"], corpus["windows"])
    result = trainer.train()
    return {"module": module, "args": args, "out": out, "trainer": trainer, "callback": callback, "result": result}


def test_the_trainer_callback_logs_into_log_history_and_tensorboard(trainer_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history = trainer_run["trainer"].state.log_history
    live = {row["step"]: row for row in history if "staircase/rho_next" in row}
    assert sorted(live) == STEPS == trainer_run["callback"].measured_steps
    assert [row["step"] for row in history].count(5) == 1  # added to the step's own entry, not a new one
    assert sorted(s for s, row in live.items() if "staircase/attention_path_corr/0" in row) == PATH_STEPS
    assert all("staircase/probe_heldout_mse" not in row for row in live.values())  # the probe's default: never
    assert all("loss" in row for row in live.values())  # the Trainer logged at those steps because we asked

    (events,) = list(trainer_run["out"].glob("runs/*/events.out.tfevents.*"))
    accumulator = EventAccumulator(str(events.parent)).Reload()
    assert "train/staircase/rho_next" in accumulator.Tags()["scalars"]
    scalars = accumulator.Scalars("train/staircase/rho_next")
    assert [e.step for e in scalars] == STEPS
    assert [e.value for e in scalars] == pytest.approx([live[s]["staircase/rho_next"] for s in STEPS], rel=1e-6)
    assert [e.step for e in accumulator.Scalars("train/staircase/path_share/embed")] == PATH_STEPS

    settings = json.loads((trainer_run["out"] / "staircase_monitor.json").read_text())
    assert settings["cadence"]["steps"] == [0, *STEPS]
    assert len(settings["token_strings"]) == len(settings["monitor"]["tokens"]) == 20


def test_the_monitor_does_not_change_the_training(trainer_run, corpus, tmp_path):
    """The same run without the callback ends with bitwise the same weights."""
    module, args = trainer_run["module"], trainer_run["args"]
    args = module.parser().parse_args([*TINY_ARGS, "--out", str(tmp_path / "plain"), "--corpus", str(corpus["path"]),
                                       "--report-to", "none"])
    plain, _ = module.build_trainer(args, corpus["tokenizer"], corpus["windows"], monitored=False)
    result = plain.train()
    for (name, p), q in zip(plain.model.named_parameters(), trainer_run["trainer"].model.parameters()):
        assert torch.equal(p, q), name
    # The mean loss is summed in float32 between logs, so more logs only regroup the sum.
    assert result.training_loss == pytest.approx(trainer_run["result"].training_loss, rel=1e-6)
    assert not any("loss" in row for row in plain.state.log_history[:-1])  # it logged nothing: logging_steps 100


def test_the_live_curve_equals_analyze_model_on_the_saved_checkpoints(trainer_run, corpus):
    out, args = trainer_run["out"], trainer_run["args"]
    live = {row["step"]: row for row in trainer_run["trainer"].state.log_history if "staircase/rho_next" in row}
    posthoc = analyze_model(out, text=corpus["path"].read_text(), k=args.k, window=args.window,
                            max_tokens=args.max_tokens)
    assert [c["step"] for c in posthoc["checkpoints"]] == PATH_STEPS  # save_steps 5 and the last step
    assert posthoc["setup"]["tokens"] == trainer_run["callback"].monitor.tokens.tolist()
    for checkpoint in posthoc["checkpoints"]:
        row = live[checkpoint["step"]]
        # The same names, the logged ones with the staircase/ prefix (a checkpoint row also names its
        # embedding's SHA-256, an identity rather than a measure).
        names = {name for name in checkpoint
                 if name not in ("name", "step", "embedding_sha256", "probe_heldout_mse", "probe_shuffled_mse")}
        assert {f"staircase/{name}" for name in names} == {name for name in row if name.startswith("staircase/")} - \
            {"staircase/seconds"}
        for name in names:
            assert checkpoint[name] == pytest.approx(row[f"staircase/{name}"], abs=1e-6), name
    rho = [live[s]["staircase/rho_next"] for s in PATH_STEPS]
    assert len(set(rho)) == 3  # the curve moves: equal values at three checkpoints would prove little
    # The probe (not live by default) agrees too, on the final model.
    monitor = StaircaseMonitor(corpus["windows"], posthoc["setup"]["tokens"], paths=False)
    probe = monitor.measure(trainer_run["trainer"].model)
    assert probe["probe_heldout_mse"] == pytest.approx(posthoc["checkpoints"][-1]["probe_heldout_mse"], abs=1e-6)
    assert probe["probe_shuffled_mse"] == pytest.approx(posthoc["checkpoints"][-1]["probe_shuffled_mse"], abs=1e-6)


def test_ctxstair_report_draws_a_trainer_output(trainer_run, tmp_path, capsys):
    out = trainer_run["out"]
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert (out / "figures" / "staircase.png").read_bytes().startswith(b"\x89PNG")
    rho = [row["staircase/rho_next"] for row in trainer_run["trainer"].state.log_history if "staircase/rho_next" in row]
    assert f"ρ<sub>next</sub> went from {rho[0]:+.3f} at step 1" in html  # typeset (report.typeset)
    assert "largest attention-path correlation" in html and "staircase_monitor.json" not in html
    assert "&quot;cadence&quot;" in html  # the callback's settings are shown as the run's configuration

    empty = tmp_path / "no-monitor" / "checkpoint-3"
    empty.mkdir(parents=True)
    (empty / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": [{"loss": 1.0, "step": 3}]}))
    capsys.readouterr()
    assert main(["report", str(empty.parent)]) == 2
    err = capsys.readouterr().err
    assert "no staircase/* entries in its log_history" in err and err.count("\n") == 1


def test_a_callback_added_after_the_integrations_warns_and_tensorboard_misses_it(corpus, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import Trainer, TrainingArguments

    module = example()
    monitor = StaircaseMonitor(corpus["windows"], monitor_tokens(corpus["tokenizer"], corpus["windows"], k=20),
                               probe=False, paths=False)
    model = module.small_llama(corpus["tokenizer"].vocab_size, 32, 16, 1, 1.0, 1.5)
    training = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                                 report_to="tensorboard", use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=module.WindowDataset(corpus["windows"]),
                      callbacks=[StaircaseCallback(monitor)])
    with pytest.warns(UserWarning, match="after the report_to integrations"):
        trainer.train()
    assert [r["step"] for r in trainer.state.log_history if "staircase/rho_next" in r] == [1, 2, 3]
    (events,) = list(tmp_path.glob("runs/*/events.out.tfevents.*"))
    assert not any("staircase" in tag for tag in EventAccumulator(str(events.parent)).Reload().Tags()["scalars"])


@pytest.mark.extended  # a two-process job
def test_two_process_ddp_measures_once_on_rank_0_without_deadlock(corpus, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           str(HELPERS / "monitor_ddp_worker.py"), str(tmp_path), str(corpus["path"])],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["measured_steps"] == ranks[0]["logged_steps"] == STEPS
    assert ranks[1]["measured_steps"] == ranks[1]["logged_steps"] == []
    saved = json.loads((tmp_path / "checkpoint-12" / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in saved if "staircase/rho_next" in row] == STEPS


def test_the_lightning_callback_logs_to_every_logger(corpus, tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger

    from ctxstair.monitor import StaircaseLightningCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = lm_train_model(corpus["tokenizer"].vocab_size)

        def training_step(self, batch, _):
            return next_token_loss(self.model(input_ids=batch).logits, batch)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    windows = corpus["windows"]
    monitor = StaircaseMonitor(windows, monitor_tokens(corpus["tokenizer"], windows, k=20), probe=False)
    callback = StaircaseLightningCallback(monitor, log_points=4, every=5, paths_every=5)
    trainer = pl.Trainer(max_steps=12, logger=CSVLogger(tmp_path), callbacks=[callback], accelerator="cpu",
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), torch.utils.data.DataLoader(torch.from_numpy(windows), batch_size=8))
    assert [row["step"] for row in callback.history] == STEPS
    (metrics,) = list(tmp_path.rglob("metrics.csv"))
    lines = metrics.read_text().splitlines()
    header = lines[0].split(",")
    rho = [line.split(",") for line in lines[1:]]
    column = header.index("staircase/rho_next")
    logged = {int(r[header.index("step")]): float(r[column]) for r in rho if r[column]}
    assert logged == pytest.approx({row["step"]: row["staircase/rho_next"] for row in callback.history})


def readme_snippets() -> list[str]:
    """The README's ```py blocks that use ctxstair.monitor (```python blocks run in tests/project/test_readme.py)."""
    readme = (ROOT / "README.md").read_text()
    return [block for block in re.findall(r"```py\n(.*?)```", readme, flags=re.S) if "ctxstair.monitor" in block]


def test_the_readme_uses_in_a_trainer_and_in_a_plain_loop_run_as_written(corpus, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer_snippet, loop_snippet = readme_snippets()
    monkeypatch.chdir(tmp_path)
    module = example()
    windows, tokenizer = corpus["windows"][:24], corpus["tokenizer"]
    model = module.small_llama(tokenizer.vocab_size, 32, 16, 1, 1.0, 1.5)
    names = {"windows": windows, "tokenizer": tokenizer, "model": model, "data": module.WindowDataset(windows)}
    exec(compile(trainer_snippet, "README.md", "exec"), names)
    logged = [r["step"] for r in names["trainer"].state.log_history if "staircase/rho_next" in r]
    assert logged == [1, 2, 3, 4, 5, 7, 9]  # 3 epochs of 3 batches: the default cadence's log-spaced steps up to 9

    llama = lm_train_model(tokenizer.vocab_size)
    optimizer = torch.optim.SGD(llama.parameters(), lr=0.1)
    batch = torch.from_numpy(windows[:8])

    def train_step():
        optimizer.zero_grad()
        next_token_loss(llama(input_ids=batch).logits, batch).backward()
        optimizer.step()

    names = {"windows": windows, "tokenizer": tokenizer, "model": llama, "max_steps": 12, "train_step": train_step}
    exec(compile(loop_snippet, "README.md", "exec"), names)
    names["writer"].close()
    (events,) = list(tmp_path.glob("runs/my-run/events.out.tfevents.*"))
    steps = [e.step for e in EventAccumulator(str(events.parent)).Reload().Scalars("staircase/rho_next")]
    assert steps == [1, 2, 3, 4, 5, 7, 9, 11, 12]  # the default cadence's log-spaced steps up to 12, and the last


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_on_cuda_gives_the_cpu_numbers(corpus):
    windows = corpus["windows"]
    monitor = StaircaseMonitor(windows, monitor_tokens(corpus["tokenizer"], windows, k=20), probe_steps=20)
    llama = lm_train_model(corpus["tokenizer"].vocab_size)
    on_cpu = monitor.measure(llama)
    assert monitor.measure(copy.deepcopy(llama).cuda()) == pytest.approx(on_cpu, abs=1e-6)


@pytest.mark.parametrize(("n", "chunk", "world"), [(128, 1024, 2), (128, 40, 2), (5, 1024, 8), (7, 3, 3), (1, 1, 2)])
def test_the_path_sample_is_cut_so_that_every_rank_counts_a_share(n, chunk, world):
    from ctxstair.monitor.staircase import path_parts

    sample = np.arange(n * 3).reshape(n, 3)
    parts = path_parts(sample, chunk, world)
    np.testing.assert_array_equal(np.concatenate(parts), sample)  # every window once, in order
    assert all(1 <= len(part) <= chunk for part in parts)
    assert len(parts) >= min(n, world)  # no rank idles while another counts the whole sample
