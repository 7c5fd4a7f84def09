"""Decoding helpers the tasks share: CTC's greedy decoding and prefix beam search, and class-index sequences as
text."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch


def ctc_greedy(best: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(N, T) best classes per step -> (N, T) decoded sequences, left-aligned and padded with -1; `lengths` (N,):
    each sample's output steps, the steps past them read as blanks (None: all T)."""
    steps = best.shape[1]
    if lengths is not None:
        best = torch.where(torch.arange(steps, device=best.device) < lengths.to(best.device).unsqueeze(1), best, 0)
    previous = torch.cat([torch.full_like(best[:, :1], -1), best[:, :-1]], 1)
    keep = (best != 0) & (best != previous)
    slot = torch.where(keep, keep.cumsum(1) - 1, steps)  # dropped steps all land in the extra last column
    decoded = torch.full((best.shape[0], steps + 1), -1, dtype=best.dtype, device=best.device)
    return decoded.scatter_(1, slot, best)[:, :steps]


def ctc_beam_search(log_probs: torch.Tensor, lengths: Optional[torch.Tensor] = None, width: int = 10) -> torch.Tensor:
    """(N, T, C) log-probabilities (blank 0) -> (N, T) the most probable labelling each CTC prefix beam search of
    `width` prefixes finds (Hannun et al. 2014: a prefix's probability sums all its alignments, ending in a blank or
    not), left-aligned and padded with -1; `lengths` as ctc_greedy's. With `width` at least the number of distinct
    prefixes it is exact: the labelling of the highest probability."""
    log_probs = log_probs.detach().to("cpu", torch.float64)
    n, steps, _ = log_probs.shape
    decoded = torch.full((n, steps), -1, dtype=torch.int64)
    for i in range(n):
        length = steps if lengths is None else min(int(lengths[i]), steps)
        labels = _beam_search_one(log_probs[i, :length], width)
        decoded[i, :len(labels)] = torch.tensor(labels, dtype=torch.int64)
    return decoded


def _beam_search_one(log_probs: torch.Tensor, width: int) -> Tuple[int, ...]:
    """One sample's (T, C) log-probabilities -> the best labelling of the beam search."""
    classes = log_probs.shape[1]
    minus_inf = float("-inf")
    # Each kept prefix's log-probabilities of its alignments so far ending in a blank (blank) or in its last label.
    prefixes: List[Tuple[int, ...]] = [()]
    blank = torch.tensor([0.0], dtype=torch.float64)
    label = torch.tensor([minus_inf], dtype=torch.float64)
    for step in log_probs:
        total = torch.logaddexp(blank, label)
        last = torch.tensor([p[-1] if p else -1 for p in prefixes])
        # Extending prefix b by class c: from any alignment, except a repeat of its last label, which needs a blank
        # in between (from the blank-ending ones only).
        extend = torch.where(torch.arange(classes).unsqueeze(0) == last.unsqueeze(1), blank.unsqueeze(1),
                             total.unsqueeze(1)) + step.unsqueeze(0)
        extend[:, 0] = minus_inf  # the blank extends nothing
        stay_blank = total + step[0]
        stay_label = torch.where(last >= 0, label + step[last.clamp_min(0)], minus_inf)  # the last label repeated
        # An extension that is another kept prefix adds to that prefix's label-ending alignments.
        index: Dict[Tuple[int, ...], int] = {p: b for b, p in enumerate(prefixes)}
        for b, prefix in enumerate(prefixes):
            parent = index.get(prefix[:-1]) if prefix else None
            if parent is not None:
                stay_label[b] = torch.logaddexp(stay_label[b], extend[parent, prefix[-1]])
                extend[parent, prefix[-1]] = minus_inf
        scores = torch.cat([torch.logaddexp(stay_blank, stay_label), extend.flatten()])
        kept = torch.topk(scores, min(width, int(torch.isfinite(scores).sum()) or 1)).indices.tolist()
        new_prefixes, new_blank, new_label = [], [], []
        for k in kept:
            if k < len(prefixes):
                new_prefixes.append(prefixes[k])
                new_blank.append(stay_blank[k])
                new_label.append(stay_label[k])
            else:
                b, c = divmod(k - len(prefixes), classes)
                new_prefixes.append(prefixes[b] + (c,))
                new_blank.append(torch.tensor(minus_inf, dtype=torch.float64))
                new_label.append(extend[b, c])
        prefixes, blank, label = new_prefixes, torch.stack(new_blank), torch.stack(new_label)
    return prefixes[int(torch.logaddexp(blank, label).argmax())]


def as_text(sequences: torch.Tensor, alphabet: Optional[Sequence[str]] = None) -> List[str]:
    """(N, L) class indices (-1: padding) -> strings: the names in `alphabet` run together when each is one character
    (captcha), else separated by spaces; the indices themselves without an alphabet."""
    names = list(alphabet) if alphabet else None
    joiner = "" if names and all(len(name) == 1 for name in names) else " "
    return [joiner.join(names[i] if names else str(i) for i in row if 0 <= i and (names is None or i < len(names)))
            for row in sequences.tolist()]
