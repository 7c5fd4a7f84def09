"""Clips as model input, one clip at a time: video files decoded by FFmpeg through PyAV (gpucore's `video` extra),
frame folders (one folder of numbered images per clip, as PHOENIX-2014 ships; decoded by gpucore's own image
readers) and keypoint sequences (a T x F float .npy per clip, as MediaPipe exports them).

Only the frames a sampling keeps are converted: a video's other frames are decoded (inter-frame prediction needs
them) but never converted to RGB nor resized, and decoding stops after the last kept frame; a frame folder's other
images are not read at all. Each kept frame is brought to the clip size the model needs as it is converted (FFmpeg's
swscale, area interpolation), so a 1080p clip is never held at 1080p: one decoded frame at a time, in FFmpeg's own
buffer. Decoding releases the GIL (PyAV's FFmpeg calls, gpucore's C++ image readers), so clips are decoded on
threads (decode_clips), one core per clip. Why PyAV rather than torchcodec or OpenCV: docs/guides/data.md.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _C
from ..errors import ConfigError
from .class_folders import IMAGE_EXTENSIONS, is_system_file

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")
PYAV_INSTALL = "pip install 'gpucore[video]' (PyAV, FFmpeg's decoders: pip install av)"


def require_av():
    """PyAV, imported; a ConfigError saying how to install it where it is missing."""
    try:
        import av
    except ImportError:
        raise ConfigError(f"reading video clips ({', '.join(VIDEO_EXTENSIONS)}) needs PyAV: {PYAV_INSTALL}") from None
    return av


class ClipError(ConfigError):
    """One clip cannot be read (it does not decode, has no frames, or the wrong width), naming the file: a data set
    reading with on_error skip leaves that clip out and counts it."""


@dataclass(frozen=True)
class Clip:
    """One clip: a video file, a frame folder (its image files, in frame order) or a keypoint .npy."""

    path: str
    kind: str  # "video", "frames" or "keypoints"
    frames: int  # its number of frames (a video's packets, a folder's images, a keypoint file's rows)
    files: Tuple[str, ...] = ()  # a frame folder's images, in order


def encode_clip(path: str, frames, fps: int = 25, codec: Optional[str] = None) -> None:
    """Writes uint8 (T, H, W, 3) RGB frames as a video file with FFmpeg's encoders (PyAV): H.264 (libx264, yuv420p)
    for .mp4/.mov/.mkv/.avi unless `codec` says another (e.g. "ffv1", lossless, in .mkv). Height and width must be
    even for yuv420p. The test and example clips are made with this."""
    av = require_av()
    frames = np.asarray(frames.numpy() if isinstance(frames, torch.Tensor) else frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3 or frames.shape[0] == 0:
        raise ConfigError(f"encode_clip: frames must be uint8 (T, H, W, 3) with T >= 1, got {frames.dtype} "
                          f"{frames.shape}")
    codec = codec or "libx264"
    pixel_format = {"ffv1": "bgr0", "libx264rgb": "rgb24", "png": "rgb24"}.get(codec, "yuv420p")
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width, stream.pix_fmt = frames.shape[1], frames.shape[2], pixel_format
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def numbered_images(folder: str) -> List[str]:
    """A frame folder's images in frame order: by the numbers in their names ("images0002.png" before
    "images0010.png", padded or not), system files left out."""
    if not os.path.isdir(folder):
        raise ClipError(f"frame folder '{folder}' does not exist")
    names = [name for name in os.listdir(folder) if name.lower().endswith(IMAGE_EXTENSIONS)
             and not is_system_file(name)]

    def order(name: str):
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]

    return [os.path.join(folder, name) for name in sorted(names, key=order)]


def probe_clip(path: str, kind: str, keypoint_width: Optional[int] = None) -> Clip:
    """A clip's frame count, read without decoding it whole: a video's packets counted by demuxing (its first frame
    decoded, so that a clip FFmpeg cannot decode is found here), a frame folder's images, a keypoint file's rows.

    Raises:
        ClipError: a file that does not open or decode, a clip of zero frames, a keypoint file that is not T x F float
            numbers or not `keypoint_width` wide; each naming the file.
    """
    if kind == "frames":
        files = numbered_images(path)
        if not files:
            raise ClipError(f"frame folder '{path}' holds no images ({', '.join(IMAGE_EXTENSIONS)}): a clip of zero "
                            "frames")
        return Clip(path, kind, len(files), tuple(files))
    if kind == "keypoints":
        return Clip(path, kind, read_keypoints(path, keypoint_width).shape[0])
    if kind != "video":
        raise ConfigError(f"clip kind must be video, frames or keypoints, got {kind!r}")
    av = require_av()
    if not os.path.isfile(path):
        raise ClipError(f"video clip '{path}' does not exist")
    packets, decoded = 0, False
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise ClipError(f"video clip '{path}' holds no video stream: a clip of zero frames")
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if packet.size == 0:  # the flush packet at the end
                    continue
                packets += 1
                decoded = decoded or bool(packet.decode())
    except av.FFmpegError as error:
        raise ClipError(f"video clip '{path}' does not decode: {error}") from None
    if packets == 0:
        raise ClipError(f"video clip '{path}' has zero frames")
    if not decoded:
        raise ClipError(f"video clip '{path}' does not decode: none of its {packets} packets gives a frame")
    return Clip(path, kind, packets)


def read_keypoints(path: str, width: Optional[int] = None) -> np.ndarray:
    """A keypoint sequence: float32 (T, F) from a .npy (T x F, or T x K x D flattened to T x K*D, as MediaPipe's
    landmarks are saved).

    Raises:
        ClipError: a file numpy cannot read, not numbers, zero rows, or rows not `width` wide; naming the file.
    """
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ClipError(f"keypoint file '{path}' does not read as a .npy array: {error}") from None
    if array.ndim < 2 or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ClipError(f"keypoint file '{path}' holds {array.dtype} {array.shape}; expected T x F numbers (frames x "
                        "features)")
    if array.shape[0] == 0:
        raise ClipError(f"keypoint file '{path}' has zero frames")
    array = array.reshape(array.shape[0], -1).astype(np.float32)
    if width is not None and array.shape[1] != width:
        raise ClipError(f"keypoint file '{path}' has {array.shape[1]} features per frame, expected {width} (those of "
                        "the data set's other files, or of a trained model's inputs)")
    if not np.isfinite(array).all():
        raise ClipError(f"keypoint file '{path}' holds NaN or infinite values")
    return array


def decode_clip(clip: Clip, indices: Sequence[int], size: Optional[Tuple[int, int]] = None,
                channels: int = 3) -> torch.Tensor:
    """The frames at `indices` (sorted, repeats allowed: a temporal up-sampling) of a clip.

    Args:
        clip: the clip (probe_clip).
        indices: frame numbers, non-decreasing, each < clip.frames.
        size: (height, width) each frame is brought to as it is converted; None: the clip's own size (a video's
            frames, a folder's images of one size). Keypoints have no size.
        channels: 3 (RGB) or 1 (grey); images only.

    Returns:
        uint8 (T, channels, height, width) frames, or float32 (T, F) keypoints, T = len(indices).

    Raises:
        ClipError: a clip that does not decode, or has fewer frames than probed; naming the file.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (indices[0] < 0 or indices[-1] >= clip.frames or np.any(np.diff(indices) < 0)):
        raise ConfigError(f"decode_clip: frame indices must be non-decreasing in [0, {clip.frames}) for '{clip.path}'")
    if clip.kind == "keypoints":
        return torch.from_numpy(read_keypoints(clip.path)[indices])
    if channels not in (1, 3):
        raise ConfigError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
    if clip.kind == "frames":
        return _decode_frame_files(clip, indices, size, channels)
    return _decode_video(clip, indices, size, channels)


def _decode_frame_files(clip: Clip, indices: np.ndarray, size: Optional[Tuple[int, int]],
                        channels: int) -> torch.Tensor:
    """The images at `indices` of a frame folder, each read once by gpucore's image decoder (resized there)."""
    kept, where = np.unique(indices, return_inverse=True)
    height, width = size or (0, 0)
    try:
        images, _, _ = _C.decode_images([clip.files[i] for i in kept], channels, 1, False, height, width)
    except ConfigError as error:
        raise ClipError(f"frame folder '{clip.path}': {error}") from None
    return images[torch.from_numpy(where)].permute(0, 3, 1, 2).contiguous()


def _decode_video(clip: Clip, indices: np.ndarray, size: Optional[Tuple[int, int]], channels: int) -> torch.Tensor:
    if not len(indices):
        return torch.empty(0, channels, *(size or (0, 0)), dtype=torch.uint8)
    av = require_av()
    pixel_format = "rgb24" if channels == 3 else "gray"
    frames: List[np.ndarray] = []
    index = -1
    try:
        with av.open(clip.path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "NONE"  # one core per clip: decode_clips spreads clips over the cores
            height, width = size or (stream.codec_context.height, stream.codec_context.width)
            position = 0
            for index, frame in enumerate(container.decode(stream)):
                if indices[position] != index:
                    continue  # decoded for the frames after it, never converted
                array = frame.to_ndarray(width=width, height=height, format=pixel_format, interpolation="AREA")
                while position < len(indices) and indices[position] == index:
                    frames.append(array)
                    position += 1
                if position == len(indices):
                    break  # the last kept frame: the rest is never decoded
    except av.FFmpegError as error:
        raise ClipError(f"video clip '{clip.path}' does not decode: {error}") from None
    if len(frames) < len(indices):
        raise ClipError(f"video clip '{clip.path}' decoded {index + 1} frames of the {clip.frames} its container holds "
                        f"(frame {indices[len(frames)]} is needed): a truncated or damaged file")
    stacked = torch.from_numpy(np.stack(frames))
    return stacked.unsqueeze(1) if channels == 1 else stacked.permute(0, 3, 1, 2).contiguous()


def decode_clips(tasks: Sequence[Callable[[], torch.Tensor]], threads: int) -> List[torch.Tensor]:
    """Runs each clip's decoding (a function of no arguments, e.g. a decode_clip call) on `threads` threads, results
    in order. The decoders release the GIL, so clips decode on every core at once."""
    if threads <= 1 or len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(min(threads, len(tasks))) as pool:
        return list(pool.map(lambda task: task(), tasks))
