"""Decoding helpers the tasks share: CTC's greedy decoding and class-index sequences as text."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch


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
