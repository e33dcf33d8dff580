"""``ctxstair lm train`` of a ``transformers`` model of any family (``model.family``, SPEC §5, §7): a
tiny run of each kind of residual-stream layout trains, is analysed with every measure and reported;
sizes a family cannot take are refused before anything is written; ``model.hf_config`` gives the
architecture; and a run directory of the retired DecoderLM is refused in one line."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
import transformers
from lm_helpers import TINY, tiny

from ctxstair import rundir
from ctxstair.analysis import analyse
from ctxstair.analysis.lm_staircase import read_lm_analysis
from ctxstair.cli import main
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.errors import InputError
from ctxstair.lm.train import train_lm
from ctxstair.models import causal_lm
from ctxstair.run import Run


def lm_train(out, **overrides) -> list[str]:
    """The command line of ``ctxstair lm train`` into ``out`` with the tiny settings and ``overrides``."""
    settings = {**TINY, **overrides}
    return ["lm", "train", "--out", str(out), *sum((["--set", f"{k}={v}"] for k, v in settings.items()), [])]


@pytest.mark.parametrize("family", ["gpt_neox", "gpt2", "qwen2", "olmo2"])
def test_a_model_of_the_family_trains_is_analysed_with_every_measure_and_reported(tmp_path, capsys, family):
    # GPT-NeoX: parallel residual, fused per-head projection; GPT-2: learned positions, Conv1D, tied;
    # Qwen2: q/k/v biases; OLMo-2: norms after each sublayer.
    out = tmp_path / family
    assert main(lm_train(out, **{"model.family": family, "train.steps": 10})) == 0
    run = Run(out)
    steps = run.snapshot_times()
    model = run.model_at(steps[-1])
    assert run.config.model.family == model.config.model_type == family
    tied = family == "gpt2"  # as each family ships: GPT-2 ties W_U to W_E
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    # The snapshot is the model's own state dict, a tied weight once.
    assert sorted(run.snapshot(steps[-1])) == sorted(causal_lm.state_of(model))
    members = list(csv.DictReader(io.StringIO((out / "members.csv").read_text())))
    assert {row["role"] for row in members} == set(causal_lm.ROLES) - ({"unembedding"} if tied else set())

    table = read_lm_analysis(out)
    measured = set(zip(table["measure"].tolist(), table["part"].tolist()))
    paths = ["embed", "attn.0", "mlp.0"] + (["unembed"] if tied else [])
    assert measured == {("rho_next", ""), ("rho_next_spearman", ""), ("probe_heldout_mse", ""),
                        ("probe_shuffled_mse", ""), ("attention_path_corr", "0"), ("attention_path_null", "0"),
                        ("unembedding_alignment", "")} | {("path_share", path) for path in paths}
    for measure, part in measured:  # every measure at every snapshot, a number
        keep = (table["measure"] == measure) & (table["part"] == part)
        assert sorted(table["step"][keep].tolist()) == steps, (measure, part)
        assert np.isfinite(table["value"][keep]).all(), (measure, part)
    for step in steps:
        shares = table["value"][(table["measure"] == "path_share") & (table["step"] == step)]
        assert shares.sum() == pytest.approx(1.0)
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(
        f"{name}.{kind}" for name in ("attention_path", "path_shares", "probe", "rho_next") for kind in ("png", "svg"))


def test_a_head_size_the_family_cannot_take_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "lm"
    # The default d_model 64 and 4 heads: GPT-2's heads split d_model, so head_dim must be 16.
    assert main(["lm", "train", "--out", str(out), "--set", "model.family=gpt2", "--set", "model.head_dim=8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctxstair: error: model.head_dim=8:") and "Traceback" not in err
    assert "set model.head_dim=16" in err
    assert not out.exists()


def test_lm_training_builds_the_model_of_a_hugging_face_config(tmp_path):
    shape = transformers.LlamaConfig(vocab_size=7, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                                     num_attention_heads=3, head_dim=8, max_position_embeddings=32)
    shape.save_pretrained(tmp_path / "shape")
    cfg = apply_overrides(LMConfig(), {**TINY, "train.steps": 3, "analysis.enabled": False,
                                       "model.hf_config": str(tmp_path / "shape")})
    state = Run(train_lm(cfg, tmp_path / "run")).snapshot(3)
    vocab = cfg.corpus.vocab_size  # from our tokenizer, not the config's 7
    assert state["model.embed_tokens.weight"].shape == state["lm_head.weight"].shape == (vocab, 24)
    assert state["model.layers.1.self_attn.q_proj.weight"].shape == (3 * 8, 24)
    assert state["model.layers.1.mlp.down_proj.weight"].shape == (24, 40)
    assert not any(name.startswith("model.layers.2.") for name in state)
    with pytest.raises(InputError, match="model.hf_config: cannot read .*missing"):
        apply_overrides(LMConfig(), {"model.hf_config": str(tmp_path / "missing")})


@pytest.fixture(scope="module")
def retired_run(tmp_path_factory):
    """A tiny LM run whose snapshots hold the embedding under the name the retired DecoderLM gave it,
    ``W_E``: a run directory of an earlier ctxstair."""
    run = train_lm(tiny(**{"train.steps": 10}), tmp_path_factory.mktemp("retired") / "run")
    key = LMConfig().model.embedding_key()
    for step in rundir.snapshot_times(run):
        state = rundir.load_snapshot(run, step)
        rundir.save_snapshot(run, step, {"W_E" if name == key else name: t for name, t in state.items()}, "step")
    return run


def test_analyze_model_refuses_a_run_of_the_retired_decoder_in_one_line(retired_run, tmp_path, capsys):
    assert main(["analyze-model", str(retired_run), "--out", str(tmp_path / "analysed")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctxstair: error: ") and "DecoderLM" in err
    assert "Traceback" not in err
    with pytest.raises(InputError, match="DecoderLM"):
        Run(retired_run).model_at(0)


def test_the_runs_analysis_refuses_a_run_of_the_retired_decoder_in_one_line(retired_run, capsys):
    with pytest.raises(InputError, match="DecoderLM") as refused:
        analyse(retired_run, ["lm_staircase"])
    assert "\n" not in str(refused.value)
    # From the command line: resuming the complete run analyses it.
    assert main([*lm_train(retired_run, **{"train.steps": 10}), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DecoderLM" in err and "Traceback" not in err
