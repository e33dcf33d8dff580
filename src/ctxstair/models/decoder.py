"""A toy-size decoder-only language model of the Qwen2/Llama family (SPEC §5, §6.4).

Pre-norm blocks with RMSNorm (learned weight, eps ``rms_eps``, default 1e-6), multi-head causal
self-attention with rotary positions (RoPE, base ``rope_base``, default 10000, rotate-half
convention) and a SwiGLU MLP
``W_down (silu(W_gate x) ⊙ W_up x)``; untied ``W_E`` (V, d) and ``W_U`` (V, d); no biases, no
dropout. The residual stream is written as a sum of named contributions,

    stream = embed + attn.0 + mlp.0 + attn.1 + mlp.1 + ...,    logits = W_U RMSNorm_final(stream),

which is what the path decomposition of the embedding gradient (SPEC §6.4,
:mod:`ctxstair.theory.decoder_paths`) splits along.

Weights follow the (out, in) convention of ``x @ W.T`` (TransformerLens names, Hugging Face
layout): ``W_Q, W_K, W_V`` (H·hd, d), ``W_O`` (d, H·hd), ``W_gate, W_up`` (d_mlp, d), ``W_down``
(d, d_mlp). ``W_E`` and ``W_U`` are row matrices (V, d) as everywhere in the project (SPEC §1).
So the input dimension of every weight matrix is its second axis — for ``W_E`` that is the
embedding width d, the SPEC §4 convention for embeddings — and γ-initialization draws each matrix
from N(0, (shape[1])^{-2γ}) with γ chosen per component (embedding, unembedding, qk, ov, mlp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ctxstair.checks import check_vocab_size
from ctxstair.errors import InputError
from ctxstair.models.loss import next_token_loss  # noqa: F401 - where the decoder's users found it
from ctxstair.models.init import gamma_normal_, realised_std, resolve_gamma

#: RoPE frequency base and RMSNorm epsilon of the Qwen2/Llama family: the defaults of
#: :class:`DecoderConfig` (released models set others, e.g. SmolLM2: 100000 and 1e-5).
ROPE_BASE = 10000.0
RMS_EPS = 1e-6

#: The γ component (SPEC §4 overrides) of each weight matrix, by parameter name (last part).
_COMPONENT = {"W_E": "embedding", "W_U": "unembedding", "W_Q": "qk", "W_K": "qk", "W_V": "ov", "W_O": "ov",
              "W_gate": "mlp", "W_up": "mlp", "W_down": "mlp"}


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes and γ-initialization of a :class:`DecoderLM` (SPEC §4-5).

    ``gamma`` applies to every weight matrix; ``gamma_embedding`` (W_E), ``gamma_unembedding``
    (W_U), ``gamma_qk`` (W_Q, W_K), ``gamma_ov`` (W_V, W_O) and ``gamma_mlp`` (W_gate, W_up,
    W_down) override it when given. ``seed`` fixes every initial weight. ``rope_base`` and
    ``rms_eps`` are the RoPE frequency base and the RMSNorm epsilon of every norm; the trainer
    keeps the defaults, :func:`ctxstair.models.decoder_hf.from_hf` sets a released model's.
    """

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    head_dim: int = 16
    d_mlp: int = 256
    max_seq_len: int = 256
    gamma: float = 1.0
    gamma_embedding: float | None = None
    gamma_unembedding: float | None = None
    gamma_qk: float | None = None
    gamma_ov: float | None = None
    gamma_mlp: float | None = None
    seed: int = 0
    rope_base: float = ROPE_BASE
    rms_eps: float = RMS_EPS

    def __post_init__(self):
        check_vocab_size(self.vocab_size)
        for name in ("d_model", "n_layers", "n_heads", "head_dim", "d_mlp", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        for name in ("rope_base", "rms_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise InputError(f"{name} must be a positive finite number, got {value!r}")
        if self.head_dim % 2:
            raise InputError(f"head_dim must be even (RoPE rotates coordinate pairs), got {self.head_dim}")
        for component in ("embedding", "unembedding", "qk", "ov", "mlp"):
            if not math.isfinite(self.gamma_of(component)):
                raise InputError(f"γ of {component} must be a finite number, got {self.gamma_of(component)!r}")

    def gamma_of(self, component: str) -> float:
        """γ of one component: ``embedding``, ``unembedding``, ``qk``, ``ov`` or ``mlp``."""
        return resolve_gamma(self.gamma, getattr(self, f"gamma_{component}"))


# ``x W^T`` for weights stored (out, in). ``linear``'s backward yields the weight gradient in the
# weight's own layout; with ``x @ W.T`` the same step's matmuls took 11 % longer in a profile.
linear = torch.nn.functional.linear


class RMSNorm(torch.nn.Module):
    """``weight ⊙ x / sqrt(mean(x²) + eps)`` over the last axis; ``weight`` (d,) starts at 1."""

    def __init__(self, d: int, dtype: torch.dtype, eps: float = RMS_EPS):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., d); PyTorch's fused kernel of that formula."""
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rotary_tables(max_seq_len: int, head_dim: int, dtype: torch.dtype,
                  base: float = ROPE_BASE) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles, each (max_seq_len, head_dim), rotate-half layout.

    Coordinate i and i + hd/2 form a pair rotated by angle ``pos · base^{-2i/hd}``.
    """
    inv_freq = float(base) ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (hd/2,)
    angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq  # (T_max, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T_max, hd)
    # Angles in float64 first: in float32, pos · inv_freq loses digits at long positions.
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys x (n, H, T, hd) by their positions; cos, sin (T, hd)."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated_half * sin


class DecoderBlock(torch.nn.Module):
    """One pre-norm block: ``ln_attn``, ``W_Q``, ``W_K``, ``W_V``, ``W_O``, ``ln_mlp``, ``W_gate``,
    ``W_up``, ``W_down`` (shapes in the module docstring). Weights start empty: :class:`DecoderLM`
    draws them, in one fixed order from one generator."""

    def __init__(self, cfg: DecoderConfig, dtype: torch.dtype):
        super().__init__()
        d, inner, m = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.d_mlp
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.ln_attn = RMSNorm(d, dtype, cfg.rms_eps)
        self.W_Q = torch.nn.Parameter(torch.empty(inner, d, dtype=dtype))
        self.W_K = torch.nn.Parameter(torch.empty(inner, d, dtype=dtype))
        self.W_V = torch.nn.Parameter(torch.empty(inner, d, dtype=dtype))
        self.W_O = torch.nn.Parameter(torch.empty(d, inner, dtype=dtype))
        self.ln_mlp = RMSNorm(d, dtype, cfg.rms_eps)
        self.W_gate = torch.nn.Parameter(torch.empty(m, d, dtype=dtype))
        self.W_up = torch.nn.Parameter(torch.empty(m, d, dtype=dtype))
        self.W_down = torch.nn.Parameter(torch.empty(d, m, dtype=dtype))

    def attention(self, stream: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  with_pattern: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention output (n, T, d) for the residual stream (n, T, d), and with ``with_pattern`` the
        post-softmax pattern (n, H, T_query, T_key) (else None); cos, sin (T, hd) from :func:`rotary_tables`.

        Without the pattern, PyTorch's fused ``scaled_dot_product_attention`` computes the same
        causal softmax attention (equal up to rounding) without materialising the (T, T) scores."""
        n, T, _ = stream.shape
        x = self.ln_attn(stream)

        def heads(W: torch.Tensor) -> torch.Tensor:  # (n, T, d) -> (n, H, T, hd)
            return linear(x, W).view(n, T, self.n_heads, self.head_dim).transpose(1, 2)

        q, k, v = apply_rotary(heads(self.W_Q), cos, sin), apply_rotary(heads(self.W_K), cos, sin), heads(self.W_V)
        if with_pattern:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (n, H, T, T)
            future = torch.ones(T, T, dtype=torch.bool, device=stream.device).triu(1)
            pattern = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)
            z = pattern @ v
        else:
            pattern, z = None, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return linear(z.transpose(1, 2).reshape(n, T, -1), self.W_O), pattern  # z: (n, H, T, hd)

    def mlp(self, stream: torch.Tensor) -> torch.Tensor:
        """SwiGLU MLP output (n, T, d) for the residual stream (n, T, d)."""
        x = self.ln_mlp(stream)
        return linear(torch.nn.functional.silu(linear(x, self.W_gate)) * linear(x, self.W_up), self.W_down)

    def forward(self, stream: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, with_pattern: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One layer on the residual stream (n, T, d): the stream after it, the attention and MLP
        outputs it added (each (n, T, d)) and the pattern of :meth:`attention`. A module call (rather
        than the two methods) is what wrappers such as FSDP2 hook to gather a layer's weights."""
        attn_out, pattern = self.attention(stream, cos, sin, with_pattern)
        stream = stream + attn_out
        mlp_out = self.mlp(stream)
        return stream + mlp_out, attn_out, mlp_out, pattern


class DecoderLM(torch.nn.Module):
    """Decoder-only LM: ``W_E`` (V, d), ``blocks`` (n_layers × :class:`DecoderBlock`),
    ``ln_final`` (RMSNorm), ``W_U`` (V, d). Token windows are int (n, T) with T <= max_seq_len."""

    def __init__(self, cfg: DecoderConfig, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.W_E = torch.nn.Parameter(torch.empty(cfg.vocab_size, d, dtype=dtype))
        self.blocks = torch.nn.ModuleList(DecoderBlock(cfg, dtype) for _ in range(cfg.n_layers))
        self.ln_final = RMSNorm(d, dtype, cfg.rms_eps)
        self.W_U = torch.nn.Parameter(torch.empty(cfg.vocab_size, d, dtype=dtype))
        cos, sin = rotary_tables(cfg.max_seq_len, cfg.head_dim, dtype, cfg.rope_base)
        # Derived from the config: not learned and not worth saving in checkpoints.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        generator = torch.Generator().manual_seed(cfg.seed)
        for _, W, gamma in self._init_plan():
            gamma_normal_(W, W.shape[1], gamma, generator)

    def _init_plan(self) -> list[tuple[str, torch.nn.Parameter, float]]:
        """(name, matrix, γ) of every weight matrix, in registration order (the order of the draws);
        d_in is the matrix's second axis."""
        return [(name, W, self.cfg.gamma_of(_COMPONENT[name.rsplit(".", 1)[-1]]))
                for name, W in self.named_parameters() if W.ndim == 2]

    def target_stds(self) -> dict[str, float]:
        """Intended standard deviation ``d_in^{-γ}`` of every weight matrix, by parameter name (SPEC §4)."""
        return {name: W.shape[1] ** -gamma for name, W, gamma in self._init_plan()}

    def init_stds(self) -> dict[str, float]:
        """Realised standard deviation of every weight matrix, by parameter name (SPEC §4: call it
        at step 0 and record it). Norm weights are not listed: they start at exactly 1."""
        return {name: realised_std(W) for name, W, _ in self._init_plan()}

    def _run(self, tokens: torch.Tensor,
             with_patterns: bool = False) -> tuple[dict[str, torch.Tensor], list[torch.Tensor | None]]:
        """The one forward pass: residual contributions (each (n, T, d)) and, with ``with_patterns``, the
        attention patterns (otherwise fused attention and a list of None)."""
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype not in (torch.int32, torch.int64):
            raise InputError(f"tokens must be an integer torch tensor (n, T), got {type(tokens).__name__} "
                             f"{getattr(tokens, 'dtype', '')} shape {tuple(getattr(tokens, 'shape', ()))}")
        T = tokens.shape[1]
        if not 1 <= T <= self.cfg.max_seq_len:
            raise InputError(f"window length T must be in 1..{self.cfg.max_seq_len} (max_seq_len), got {T}")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        stream = torch.nn.functional.embedding(tokens, self.W_E)  # (n, T, d); its backward is a fused scatter
        contributions, patterns = {"embed": stream}, []
        for layer, block in enumerate(self.blocks):
            stream, attn_out, mlp_out, pattern = block(stream, cos, sin, with_patterns)
            contributions[f"attn.{layer}"], contributions[f"mlp.{layer}"] = attn_out, mlp_out
            patterns.append(pattern)
        return contributions, patterns

    def residual_contributions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Summands of the final residual stream, each (n, T, d), in the order
        ``embed, attn.0, mlp.0, attn.1, ...``; summed in that order they are the stream bit for bit."""
        return self._run(tokens)[0]

    def attention_pattern(self, tokens: torch.Tensor) -> torch.Tensor:
        """Post-softmax attention (n_layers, n, H, T_query, T_key) (SPEC §7 attention paths)."""
        return torch.stack(self._run(tokens, with_patterns=True)[1])

    def logits_from_stream(self, stream: torch.Tensor) -> torch.Tensor:
        """Logits (..., V) from a final residual stream (..., d): ``W_U RMSNorm_final(stream)``."""
        return linear(self.ln_final(stream), self.W_U)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (n, T, V) for token windows (n, T); position s predicts token s + 1."""
        return self.logits_from_stream(sum(self.residual_contributions(tokens).values()))
