"""What a model's outputs predict, for each built-in loss: the rules the engine's metrics score by.

cross_entropy: the class (N,). multilabel_soft_margin with heads (captcha): one class per head (N, heads).
ctc: greedy decoding, best class per step, repeats collapsed, blanks (0) dropped, padded with -1 (N, T).
bce_with_logits: the labels whose logit is positive (N, K) bool. dice_bce (segmentation): the mask (N, H, W),
a pixel's class (one output channel: logit > 0).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from ..errors import ConfigError


def predicted(outputs: torch.Tensor, loss: str, heads: int = 0) -> torch.Tensor:
    if loss == "cross_entropy":
        _expect(outputs, 2, loss, "N x classes")
        return outputs.argmax(1)
    if loss == "multilabel_soft_margin":
        _expect(outputs, 2, loss, "N x (heads x classes)")
        if heads <= 0:
            return outputs > 0
        if outputs.shape[1] % heads:
            raise ConfigError(f"{outputs.shape[1]} outputs do not split into {heads} heads (config key 'heads')")
        return outputs.reshape(outputs.shape[0], heads, -1).argmax(-1)
    if loss == "ctc":
        _expect(outputs, 3, loss, "N x steps x classes")
        return ctc_greedy(outputs.argmax(-1))
    if loss == "bce_with_logits":
        return outputs > 0
    if loss == "dice_bce":
        _expect(outputs, 4, loss, "N x K x H x W")
        return (outputs[:, 0] > 0).long() if outputs.shape[1] == 1 else outputs.argmax(1)
    raise ConfigError(f"no prediction rule for loss '{loss}'")


def ctc_greedy(best: torch.Tensor) -> torch.Tensor:
    """(N, T) best classes per step -> (N, T) decoded sequences, left-aligned and padded with -1."""
    steps = best.shape[1]
    previous = torch.cat([torch.full_like(best[:, :1], -1), best[:, :-1]], 1)
    keep = (best != 0) & (best != previous)
    slot = torch.where(keep, keep.cumsum(1) - 1, steps)  # dropped steps all land in the extra last column
    decoded = torch.full((best.shape[0], steps + 1), -1, dtype=best.dtype, device=best.device)
    return decoded.scatter_(1, slot, best)[:, :steps]


def as_text(sequences: torch.Tensor, alphabet: Optional[Sequence[str]] = None) -> List[str]:
    """(N, L) class indices (-1: padding) -> strings: the names in `alphabet` run together when each is one character
    (captcha), else separated by spaces; the indices themselves without an alphabet."""
    names = list(alphabet) if alphabet else None
    joiner = "" if names and all(len(name) == 1 for name in names) else " "
    return [joiner.join(names[i] if names else str(i) for i in row if 0 <= i and (names is None or i < len(names)))
            for row in sequences.tolist()]


def _expect(outputs: torch.Tensor, dims: int, loss: str, layout: str) -> None:
    if outputs.dim() != dims:
        raise ConfigError(f"loss '{loss}' needs model outputs of {layout}, got shape {tuple(outputs.shape)}")
