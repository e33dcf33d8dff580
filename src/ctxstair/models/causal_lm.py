"""A ``transformers`` causal LM of any family with a model view, built from an LM run's sizes and
γ-initialised by role (SPEC §4-5): what ``lm train`` trains.

The architecture is the family's own code (``AutoModelForCausalLM.from_config``), so a run's model is
what ``from_pretrained``, vLLM, TransformerLens or nnsight open, and every measure reads it through
its view (:mod:`ctxstair.models.view`). What is ours:

* **the config** (:func:`family_config`): the family's defaults (its norm, activation, rotary
  fraction and base, tying: GPT-2, Gemma and SmolLM3 tie ``W_U`` to ``W_E``) with the run's sizes
  (``d_model``, ``n_layers``, ``n_heads``, ``head_dim``, ``d_mlp``), vocabulary and window as the
  longest position; every key/value head its own (no grouping); no dropout anywhere (the
  gradient-flow theory has none, and a run is then a function of its seed alone); no special token
  ids (the run's tokenizer has its own). Or a given ``config.json`` (``model.hf_config``) with the
  run's vocabulary and window;
* **the initialization** (:func:`initialise`): every weight matrix drawn from N(0, d_in^{-2γ}) with
  the γ of its role — ``embedding`` (``W_E``, and GPT-2's position embeddings, which enter the stream
  beside it), ``unembedding`` (an untied ``W_U``), ``qk`` and ``ov`` (the parts of the attention's
  matrices, as the family's layout says: :mod:`ctxstair.models.view.adapter`), ``mlp`` (every other
  matrix of a block) —, d_in the matrix's input width (d for the embeddings, SPEC §4), one generator
  seeded by the run's seed, drawn matrix by matrix in the model's parameter order. Norm gains and
  biases stay as the family's own initialization leaves them: gains 1 (Gemma stores 1 + w with
  w = 0), biases 0.
"""

from __future__ import annotations

import torch

from ctxstair.errors import InputError
from ctxstair.models.init import realised_std, resolve_gamma
from ctxstair.models.view import ModelView, registry, supported_families

__all__ = ["ROLES", "SIZES", "build", "family_config", "gammas_of", "init_parts", "init_stds", "initialise",
           "load_state", "state_of", "trainable_families"]

#: The sizes an LM run sets (``model.<size>``).
SIZES = ("d_model", "n_layers", "n_heads", "head_dim", "d_mlp")
#: The γ roles of SPEC §4, as ``model.init.<role>`` names them.
ROLES = ("embedding", "unembedding", "qk", "ov", "mlp")
#: Families whose attention width is d_model itself (their configs have no head_dim).
_WIDTH_IS_D_MODEL = ("gpt2", "gpt_neox")


def trainable_families() -> list[str]:
    """Every family with a model view: ``lm train`` builds any of them."""
    return supported_families()


def family_config(family: str, vocab_size: int, positions: int, sizes: dict[str, int], hf_config: str = ""):
    """The ``transformers`` config of a run's model (module docstring).

    Args:
        family: a ``model_type`` of :func:`trainable_families`.
        vocab_size: V, the tokenizer's vocabulary.
        positions: the longest window (the run's ``corpus.window``).
        sizes: ``d_model``, ``n_layers``, ``n_heads``, ``head_dim``, ``d_mlp``.
        hf_config: a ``config.json`` (or its folder) whose family and sizes replace these.

    Raises:
        InputError: an unknown family, or sizes the family cannot take (one line naming the key).
    """
    from transformers import AutoConfig

    if hf_config:
        try:
            config = AutoConfig.from_pretrained(hf_config, local_files_only=True, trust_remote_code=False)
        except (OSError, ValueError) as error:
            raise InputError(f"model.hf_config: cannot read {hf_config} as a transformers config: "
                             f"{str(error).splitlines()[0]}") from None
        if config.model_type != family:
            raise InputError(f"model.hf_config {hf_config} is a {config.model_type!r} config, but model.family is "
                             f"{family!r}: set model.family={config.model_type}")
        _check_family(family)
        config.vocab_size, config.max_position_embeddings = vocab_size, positions
    else:
        _check_family(family)
        d, heads = sizes["d_model"], sizes["n_heads"]
        if family in _WIDTH_IS_D_MODEL and heads * sizes["head_dim"] != d:
            raise InputError(f"model.head_dim={sizes['head_dim']}: a {family} model's heads split d_model, so head_dim "
                             f"must be model.d_model / model.n_heads = {d} / {heads}; set model.head_dim={d // heads} "
                             "or other d_model, n_heads" if d % heads == 0 else
                             f"model.n_heads={heads} does not divide model.d_model={d}, as a {family} model needs")
        common = dict(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=sizes["n_layers"],
                      num_attention_heads=heads, intermediate_size=sizes["d_mlp"], max_position_embeddings=positions)
        if family == "gpt2":
            common = dict(vocab_size=vocab_size, n_embd=d, n_layer=sizes["n_layers"], n_head=heads,
                          n_inner=sizes["d_mlp"], n_positions=positions)
        elif family not in _WIDTH_IS_D_MODEL:
            common.update(head_dim=sizes["head_dim"], num_key_value_heads=heads)
        config = AutoConfig.for_model(family, **common, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        for name, value in config.to_dict().items():
            if ("dropout" in name or "pdrop" in name) and isinstance(value, float):
                setattr(config, name, 0.0)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, name, None)
    config.use_cache = False  # training and measuring read whole windows: no key/value cache
    return config


def _check_family(family: str) -> None:
    if family not in registry():
        raise InputError(f"model.family={family!r} is not a family lm train builds; choose one of "
                         f"{', '.join(trainable_families())}")


def build(config, gammas: dict[str, float], seed: int, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The float32 causal LM of ``config`` (:func:`family_config`) on ``device``, γ-initialised
    (:func:`initialise`) with ``gammas`` (role -> γ, :data:`ROLES`) from ``seed``, in training mode.
    The training's random streams are not touched."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):  # the family's own init draws from the global generator
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    initialise(model, gammas, seed)
    return model.to(device).train()


def init_parts(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter, object, str, int]]:
    """``(name, matrix, index, role, d_in)`` of every part of every weight matrix, in parameter order:
    ``matrix[index]`` has γ role ``role`` (module docstring) and input width ``d_in`` (a ``Conv1D``
    stores (in, out), everything else (out, in); embeddings (rows, d)). InputError for a matrix no
    role covers (a family whose adapter says too little)."""
    view = ModelView(model)
    adapter = view.adapter
    roles: dict[int, list[tuple[object, str]]] = {id(view.embedding): [(..., "embedding")]}
    if adapter.positions:
        roles[id(model.get_submodule(adapter.positions).weight)] = [(..., "embedding")]
    if view.unembedding is not None and not view.tied:
        roles[id(view.unembedding)] = [(..., "unembedding")]
    for block in view.blocks:
        attention = block.get_submodule(adapter.attention)
        attention_roles = adapter.layout.roles(attention, model.config)
        for name, p in attention.named_parameters():
            if name in attention_roles:
                roles[id(p)] = attention_roles[name]
        for p in block.parameters():
            roles.setdefault(id(p), [(..., "mlp")])
    parts = []
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if p.ndim < 2 or any(p is seen for _, seen, *_ in parts):
                continue
            full = f"{module_name}.{name}" if module_name else name
            if id(p) not in roles:
                raise InputError(f"no γ role for {full} {tuple(p.shape)} of this {model.config.model_type} model: "
                                 f"its adapter ({adapter.source}) does not place it")
            d_in = p.shape[0] if type(module).__name__ == "Conv1D" else p.shape[1]
            parts += [(full, p, index, role, d_in) for index, role in roles[id(p)]]
    return parts


def initialise(model: torch.nn.Module, gammas: dict[str, float], seed: int) -> None:
    """Draw every weight matrix of ``model`` (module docstring) from one generator seeded by ``seed``:
    a matrix of one role is drawn as N(0, d_in^{-2γ}) directly, a fused one as N(0, 1) then each
    part scaled by its d_in^{-γ}."""
    generator = torch.Generator().manual_seed(seed)
    parts = init_parts(model)
    with torch.no_grad():
        for matrix in dict.fromkeys(p for _, p, *_ in parts):  # each matrix once, in order
            mine = [(index, role, d_in) for _, p, index, role, d_in in parts if p is matrix]
            if len(mine) == 1:
                _, role, d_in = mine[0]
                matrix.normal_(0.0, float(d_in) ** -gammas[role], generator=generator)
                continue
            noise = torch.empty_like(matrix).normal_(0.0, 1.0, generator=generator)
            for index, role, d_in in mine:
                noise[index] *= float(d_in) ** -gammas[role]
            matrix.copy_(noise)


def gammas_of(init) -> dict[str, float]:
    """Role -> γ of an :class:`~ctxstair.config.InitConfig` (``model.init``)."""
    return {role: resolve_gamma(init.gamma, getattr(init, role)) for role in ROLES}


def init_stds(model: torch.nn.Module, gammas: dict[str, float]) -> list[tuple[str, str, float, float]]:
    """``(tensor, role, realised std, intended std d_in^{-γ})`` of every part (SPEC §4: recorded at
    step 0); norm gains and biases are not listed."""
    return [(name, role, realised_std(p.detach()[index]), float(d_in) ** -gammas[role])
            for name, p, index, role, d_in in init_parts(model)]


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict with a tied weight once (under its first name, ``W_E``'s), as
    ``save_pretrained`` writes it: what a snapshot holds."""
    state, seen = {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            state[name] = tensor
    return state


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor], where: str) -> torch.nn.Module:
    """``model`` holding ``state`` (:func:`state_of`: a tied weight once); InputError naming ``where``
    unless ``state`` is exactly the model's tensors, with their shapes."""
    expected = {name: tuple(t.shape) for name, t in state_of(model).items()}
    missing = [name for name in expected if name not in state]
    wrong = [name for name in expected if name in state and tuple(state[name].shape) != expected[name]]
    extra = [name for name in state if name not in expected]
    if missing or wrong or extra:
        example = (f"no {missing[0]}" if missing else
                   f"{wrong[0]} of shape {tuple(state[wrong[0]].shape)}, not {expected[wrong[0]]}" if wrong else
                   f"{extra[0]}, which the model does not have")
        raise InputError(f"{where} is not the whole state of the {model.config.model_type} model its run describes "
                         f"({len(missing)} tensors missing, {len(wrong)} of another shape, {len(extra)} unknown; "
                         f"{example})")
    model.load_state_dict(state, strict=False)  # a tied weight's second name is the same tensor
    return model
