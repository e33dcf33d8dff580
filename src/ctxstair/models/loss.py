"""The next-token loss every language model of the project trains and is measured on (SPEC §5, §7)."""

from __future__ import annotations

import torch

__all__ = ["next_token_loss"]


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ``tokens[:, s+1]`` from ``logits[:, s]`` over all s < T-1.

    Args:
        logits: (n, T, V); tokens: int (n, T) with T >= 2.
    """
    # The targets are shifted instead of the logits: slicing (n, T, V) logits would copy them all.
    targets = torch.nn.functional.pad(tokens[:, 1:], (0, 1), value=-100)  # the last position predicts nothing
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
