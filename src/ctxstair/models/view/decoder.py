"""The view of our own :class:`~ctxstair.models.DecoderLM` (SPEC §6.4): the same interface as
:class:`~ctxstair.models.view.ModelView`, read from the decoder's own methods, so its numbers are
the ones measured before the view existed, bit for bit."""

from __future__ import annotations

import contextlib

import torch

from ctxstair.models.decoder import DecoderLM
from ctxstair.models.view import fsdp2


class DecoderView:
    """A :class:`~ctxstair.models.DecoderLM` seen as :class:`~ctxstair.models.view.ModelView` sees a
    ``transformers`` model (same attributes and methods); untied, no learned positions."""

    family = "ctxstair-decoder"
    tied = sharded = False
    rows = staticmethod(fsdp2.rows)

    def __init__(self, model: DecoderLM):
        self.model = model
        self.n_layers, self.n_heads = model.cfg.n_layers, model.cfg.n_heads
        self.positions = model.cfg.max_seq_len
        self.embedding, self.unembedding = model.W_E, model.W_U

    @property
    def vocab_size(self) -> int:
        """V, the embedding rows."""
        return int(self.embedding.shape[0])

    def forward(self, tokens: torch.Tensor, patterns: bool = False):
        """:meth:`ModelView.forward`: the summands of :meth:`DecoderLM.residual_contributions`, their
        sum as the stream (as ``DecoderLM.forward`` adds them) and its logits; no patterns."""
        from ctxstair.models.view import Forward

        summands = self.model.residual_contributions(tokens)
        stream = sum(summands.values())
        return Forward(summands, stream, self.model.logits_from_stream(stream), None, None, self.model.W_E), []

    def starting_at(self, summand: str):
        """:meth:`ModelView.starting_at`: nothing to gather."""
        return contextlib.nullcontext()

    def attention_pattern(self, tokens: torch.Tensor) -> torch.Tensor:
        """:meth:`DecoderLM.attention_pattern`: (n_layers, n, H, T, T)."""
        return self.model.attention_pattern(tokens)

    def value_output(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_V, W_O)`` of a block: (H·hd, d) and (d, H·hd)."""
        block = self.model.blocks[layer]
        return block.W_V, block.W_O
