"""Gloss-labelled clips served as CTC batches (ClipSequences): each clip's frames sampled, decoded on a pool of threads
(video.py), augmented as the CSLR recipes (VAC, CorrNet, TFNet) do it, padded in a batch to its longest clip.

A batch is (x, y): x the clips, uint8 (or float32 when normalised) (N, T, C, H, W), or float32 (N, T, F) keypoint
sequences, zeros past each clip's end; y int64 (N, 1 + S): y[:, 0] the clip's number of real frames, y[:, 1:] its
gloss ids (1..V; 0 is the CTC blank) padded with -1. `sequence_lengths_in_target` says so to the loss.

Augmentation (a training split's): the temporal rescaling of VAC's TemporalRescale, a length drawn in [1 - r, 1 + r]
x the clip's sampled frames, that many frames taken at random (a shorter clip: frames dropped; a longer one: frames
repeated), in order; then one draw of the spatial `transforms` list (crop, flip, colour: config key transforms'
names) applied to every frame of the clip. Every draw is a function of (seed, epoch, clip): a resume is bitwise.

CTC needs an output step per gloss, and a blank between two equal glosses: a clip of L glosses, R of them repeating
the one before, needs ceil(f / temporal_stride) >= L + R for the fewest frames f its sampling can give (the
temporal rescaling's shortest); a clip that cannot is refused, or left out by name (on_error skip), never a NaN or
infinite loss.
"""
from __future__ import annotations

import copy
import math
import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _C
from .. import transforms as transforms_list
from ..errors import ConfigError
from .sign_layouts import GlossClip, clip_kind, encode_glosses
from .tensor_inputs import pixel_stats
from .torch_samples import padded_clips, sample_seed
from .video import Clip, ClipError, decode_clip, decode_clips, probe_clip, read_keypoints


class ClipSequences(torch.utils.data.Dataset):
    """Gloss-labelled clips as a sequence data set for CTC.

    Args:
        clips: the labelled clips (sign_layouts.read_sign_layout's splits), all of one kind.
        vocabulary: the gloss names, entry 0 "<blank>" (sign_layouts.gloss_vocabulary).
        split: the split's name, for messages.
        size: (height, width) every frame is brought to as it is decoded (an int: square); keypoints: unused.
        channels: 3 (RGB) or 1 (grey).
        frame_stride: keep every frame_stride-th frame (1: all).
        max_frames: keep at most this many frames, evenly spread (0: no bound).
        temporal_stride: the model's (its output steps for f frames: ceil(f / temporal_stride)), for the CTC check
            (fit_ctc checks again for another).
        rescale: temporal rescaling (a training split's), lengths in [1 - rescale, 1 + rescale] x (0: none).
        batch_by_length: a run's training batches of clips of similar lengths (LengthBatches), less padding.
        threads: decoding threads (default: the CPU count).
        keypoint_width: keypoints: the features per frame every file must have (a trained model's; default: the
            first readable file's).
        on_error: "raise": a clip that does not read, or cannot fit CTC, is a ConfigError naming it; "skip": left out,
            named in `skipped`.

    Raises:
        ConfigError: mixed clip kinds, keypoint files of different widths, a bad clip (on_error raise), no clip left.
    """

    sequence_lengths_in_target = True

    def __init__(self, clips: Sequence[GlossClip], vocabulary: Sequence[str], *, split: str = "train",
                 size: Any = 112, channels: int = 3, frame_stride: int = 1, max_frames: int = 0,
                 temporal_stride: int = 1, rescale: float = 0.0, batch_by_length: bool = False,
                 threads: Optional[int] = None, keypoint_width: Optional[int] = None, on_error: str = "raise"):
        for name, value, least in (("frame_stride", frame_stride, 1), ("max_frames", max_frames, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}")
        if not isinstance(rescale, (int, float)) or not 0 <= rescale < 1:
            raise ConfigError(f"rescale must be a number in [0, 1) (0.2: clip lengths drawn in [0.8, 1.2] x), got "
                              f"{rescale!r}")
        if not isinstance(batch_by_length, bool):
            raise ConfigError(f"batch_by_length must be true or false, got {batch_by_length!r}")
        self.batch_by_length = batch_by_length
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if not clips:
            raise ConfigError(f"the {split} split has no clips")
        kinds = sorted({clip_kind(c.path) for c in clips})
        if len(kinds) > 1:
            raise ConfigError(f"the {split} split mixes clip kinds ({', '.join(kinds)})")
        self.kind, self.split = kinds[0], split
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        if len(self.size) != 2 or not all(isinstance(s, int) and s > 0 for s in self.size):
            raise ConfigError(f"size must be an integer or [height, width] > 0, got {size!r}")
        if channels not in (1, 3):
            raise ConfigError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
        self.channels, self.frame_stride, self.max_frames = channels, frame_stride, max_frames
        self.rescale = float(rescale)
        self.specs, self.mean, self.std = [], [], []  # served(): the transforms and normalisation of an epoch
        self.vocabulary = list(vocabulary)
        self.threads = threads or os.cpu_count() or 1
        self.on_error, self.skipped = on_error, []
        self.seed, self.epoch = 0, 0
        self.keypoint_width = None
        if self.kind == "keypoints":  # the width asked for, else the first readable file's is the data set's
            self.keypoint_width = keypoint_width or next((w for w in map(_keypoint_width, clips) if w is not None),
                                                         None)
        probed = decode_clips([lambda c=c: _probe(c, self.kind, self.keypoint_width) for c in clips], self.threads)
        targets = encode_glosses(clips, self.vocabulary, split)
        self.clips: List[Clip] = []
        self.targets: List[List[int]] = []
        self.labels: List[GlossClip] = []
        for labelled, clip, ids in zip(clips, probed, targets):
            if isinstance(clip, str):
                self._refuse(f"{labelled.where}: {clip}")
                continue
            self.clips.append(clip)
            self.targets.append(ids)
            self.labels.append(labelled)
        self.fit_ctc(temporal_stride)

    @property
    def classes(self) -> List[str]:
        """The gloss vocabulary (entry 0 the CTC blank): what a run records as its class names."""
        return self.vocabulary

    def fit_ctc(self, temporal_stride: int) -> None:
        """Refuses (on_error raise) or leaves out (skip) the clips that cannot fit CTC for a model of
        `temporal_stride` at their fewest frames.

        Raises:
            ConfigError: a bad temporal_stride, a clip that cannot fit (on_error raise), no clip left.
        """
        if isinstance(temporal_stride, bool) or not isinstance(temporal_stride, int) or temporal_stride < 1:
            raise ConfigError(f"temporal_stride must be an integer >= 1, got {temporal_stride!r}")
        self.temporal_stride = temporal_stride
        fits = []
        for clip, ids, labelled in zip(self.clips, self.targets, self.labels):
            problem = self._ctc_problem(clip, ids)
            if problem:
                self._refuse(f"{labelled.where}: {problem}")
            fits.append(not problem)
        self.clips, self.targets, self.labels = ([v for v, fit in zip(values, fits) if fit]
                                                 for values in (self.clips, self.targets, self.labels))
        if not self.clips:
            raise ConfigError(f"the {self.split} split has no clip left: {len(self.skipped)} left out, e.g. "
                              f"{self.skipped[0]}")

    def served(self, transforms: Any, normalization: Optional[Tuple[list, list]], seed: int) -> "ClipSequences":
        """These clips as a run's epochs serve them: every clip through `transforms` (config key transforms' list, in
        the plan's training or deterministic form), one draw per clip from (seed, epoch, clip), then normalised by
        `normalization` (per-channel (mean, std) of [0, 1] pixels: float32 frames; None: uint8). Set `epoch` before
        each epoch."""
        specs = transforms_list.specs(list(transforms or []))
        if specs and self.kind == "keypoints":
            raise ConfigError("transforms apply to video frames and frame folders; keypoint sequences get the "
                              "temporal rescaling only (data_kwargs rescale)")
        served = copy.copy(self)
        served.specs, served.seed, served.epoch = specs, seed, 0
        served.mean, served.std = (list(v) for v in normalization) if normalization else ([], [])
        return served

    def deterministic(self) -> "ClipSequences":
        """These clips without the temporal rescaling (a validation or evaluation set's form)."""
        plain = copy.copy(self)
        plain.rescale = 0.0
        return plain

    def subset(self, index: Sequence[int]) -> "ClipSequences":
        """The clips at `index` (a val_fraction split)."""
        part = copy.copy(self)
        part.clips, part.targets, part.labels = ([values[i] for i in index]
                                                 for values in (self.clips, self.targets, self.labels))
        return part

    def joined(self, other: "ClipSequences") -> "ClipSequences":
        """These clips, then `other`'s (evaluate's split all: every split as one), read alike.

        Raises:
            ConfigError: clips of another kind, size or vocabulary.
        """
        mine, theirs = (self.kind, self.frame_shape(), self.vocabulary), (other.kind, other.frame_shape(),
                                                                           other.vocabulary)
        if mine != theirs:
            raise ConfigError(f"the {self.split} and {other.split} splits are read differently ({mine[:2]} and "
                              f"{theirs[:2]}, or another vocabulary): they cannot be scored as one")
        whole = copy.copy(self)
        whole.clips, whole.targets, whole.labels = (self.clips + other.clips, self.targets + other.targets,
                                                    self.labels + other.labels)
        whole.split = f"{self.split}+{other.split}"
        return whole

    def normalization_stats(self, clips: int = 16) -> Tuple[list, list]:
        """Per-channel (mean, std) of the pixels scaled to [0, 1] of the middle frame of up to `clips` clips spread
        evenly over the set."""
        if self.kind == "keypoints":
            raise ConfigError("keypoint sequences are not normalised per channel (they are not pixels)")
        step = max(1, len(self) // clips)
        chosen = list(range(0, len(self), step))[:clips]
        frames = decode_clips([lambda i=i: decode_clip(self.clips[i], [self.clips[i].frames // 2], self.size,
                                                       self.channels) for i in chosen], self.threads)
        return pixel_stats(f[0].reshape(self.channels, -1) for f in frames)

    def frame_shape(self) -> List[int]:
        """One frame as the set serves it before the transforms: [channels, height, width], or [features]."""
        return [self.keypoint_width] if self.kind == "keypoints" else [self.channels, *self.size]

    def _refuse(self, problem: str) -> None:
        if self.on_error == "raise":
            raise ClipError(f"{problem} (data_kwargs on_error: skip leaves such clips out)")
        self.skipped.append(problem)

    def _ctc_problem(self, clip: Clip, ids: List[int]) -> str:
        """Why a clip cannot fit CTC at its fewest frames, or ""."""
        fewest = max(1, int(self.sampled_frames(clip.frames) * (1 - self.rescale)))
        steps = math.ceil(fewest / self.temporal_stride)
        needed = len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))
        if steps >= needed:
            return ""
        return (f"clip '{clip.path}' gives {steps} output steps at its fewest ({fewest} frames"
                f"{f' after rescaling by {1 - self.rescale:g}' if self.rescale else ''}, temporal_stride "
                f"{self.temporal_stride}), fewer than CTC needs for its {len(ids)} glosses ({needed}: one step each, "
                "and a blank between two equal ones)")

    def sampled_frames(self, frames: int) -> int:
        """How many frames a clip of `frames` gives before augmentation (frame_stride, max_frames)."""
        kept = math.ceil(frames / self.frame_stride)
        return min(kept, self.max_frames) if self.max_frames else kept

    def frame_indices(self, index: int) -> np.ndarray:
        """Clip `index`'s frames in this epoch: its sampling (frame_stride, max_frames), then, in training, the
        temporal rescaling drawn from (seed, epoch, clip)."""
        frames = self.clips[index].frames
        kept = np.arange(0, frames, self.frame_stride)
        if self.max_frames and len(kept) > self.max_frames:
            kept = kept[np.linspace(0, len(kept) - 1, self.max_frames).round().astype(np.int64)]
        if not self.rescale:
            return kept
        draw = np.random.default_rng(sample_seed(self.seed, self.epoch, index))
        length = max(1, int(len(kept) * (1 - self.rescale + 2 * self.rescale * draw.random())))
        if length <= len(kept):  # frames dropped at random
            chosen = draw.choice(len(kept), length, replace=False)
        else:  # frames repeated at random
            chosen = draw.choice(len(kept), length, replace=True)
        return kept[np.sort(chosen)]

    def __len__(self) -> int:
        return len(self.clips)

    def lengths(self) -> List[int]:
        """Each clip's frames before augmentation (for batching by length)."""
        return [self.sampled_frames(clip.frames) for clip in self.clips]

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, List[int]]:
        return self._sample(index)

    def __getitems__(self, indices: Sequence[int]) -> List[Tuple[torch.Tensor, List[int]]]:
        """A batch's samples, decoded on the thread pool (torch's DataLoader calls this for a batch)."""
        samples = decode_clips([lambda i=i: self._sample(i, skip=True) for i in indices], self.threads)
        kept = [sample for sample in samples if sample is not None]
        if not kept:
            raise ConfigError(f"every clip of a batch failed to decode: {'; '.join(self.skipped[-len(indices):])}")
        return kept

    def _sample(self, index: int, skip: bool = False):
        """(frames, gloss ids) of clip `index` in this epoch; None for a clip that fails now, left out (on_error
        skip)."""
        clip = self.clips[index]
        try:
            frames = decode_clip(clip, self.frame_indices(index), self.size, self.channels)
        except ClipError as error:
            if not skip or self.on_error == "raise":
                raise
            self.skipped.append(f"{self.labels[index].where}: {error}")
            return None
        if clip.kind != "keypoints" and (self.specs or self.mean):
            frames = self._transformed(frames, index)
        return frames, self.targets[index]

    def _transformed(self, frames: torch.Tensor, index: int) -> torch.Tensor:
        """The clip's frames through the spatial transforms, one draw for every frame (each frame transformed with
        the same seed draws the same crop, flip and colour), then normalised."""
        if not self.specs:
            out, _ = _C.apply_transforms(frames, [], self.mean, self.std, 0, 0, None)
            return out
        seed = sample_seed(self.seed, self.epoch, index)
        return torch.cat([_C.apply_transforms(frame[None], self.specs, self.mean, self.std, seed, 0, None)[0]
                          for frame in frames])

    def collate(self, batch: List[Tuple[torch.Tensor, List[int]]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of a batch: clips padded with zeros to the longest, y[:, 0] the frame counts, y[:, 1:] the gloss
        ids padded with -1 (padded_clips, as a torch Dataset's clips)."""
        return padded_clips([frames for frames, _ in batch],
                            [torch.tensor([frames.shape[0], *ids], dtype=torch.int64) for frames, ids in batch])


def _keypoint_width(clip: GlossClip) -> Optional[int]:
    """The features per frame of a keypoint file, None where it does not read (probing names it)."""
    try:
        return read_keypoints(clip.path).shape[1]
    except ClipError:
        return None


def _probe(clip: GlossClip, kind: str, keypoint_width: Optional[int]):
    """The clip probed, or why it cannot be read."""
    try:
        return probe_clip(clip.path, kind, keypoint_width)
    except ClipError as error:
        return str(error)


class LengthBatches(torch.utils.data.Sampler):
    """Batches of clips of similar lengths (less padding): each epoch's order drawn from (seed, epoch) (or in order),
    cut into pools of `pool` batches, each pool sorted by length and cut into batches, the batches then in an order
    drawn from (seed, epoch). set_epoch(epoch) before each epoch."""

    def __init__(self, lengths: Sequence[int], batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 seed: int = 0, pool: int = 50):
        self.lengths, self.batch_size, self.shuffle = list(lengths), batch_size, shuffle
        self.drop_last, self.seed, self.pool, self.epoch = drop_last, seed, pool, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        whole, rest = divmod(len(self.lengths), self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)

    def __iter__(self):
        draw = np.random.default_rng(sample_seed(self.seed, self.epoch, -1))
        order = draw.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        lengths = np.asarray(self.lengths)
        batches = []
        span = self.batch_size * self.pool
        for start in range(0, len(order), span):
            chunk = order[start:start + span]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in draw.permutation(len(batches))]
        return iter(batches)
