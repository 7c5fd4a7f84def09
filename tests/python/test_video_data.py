"""Clips read by gpucore.data.video: real encoded .mp4 files (moving shapes, made with PyAV's encoder) decoded to the
decoder's own output bit for bit, lossless ones to the frames written, frame folders of real photo crops to Pillow's
reading, keypoint files to numpy's; only kept frames converted, at the size asked (a 1080p clip never held at 1080p);
each bad clip a ClipError naming its file."""
import os
import re
import sys
import tracemalloc

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import require
from gpucore.data.synthetic import moving_shapes
from gpucore.data.video import ClipError, decode_clip, decode_clips, encode_clip, probe_clip, read_keypoints
from gpucore.errors import ConfigError

av = require("av")


def _mp4(folder, name="clip.mp4", frames=16, height=48, width=64, seed=0):
    path = os.path.join(folder, name)
    encode_clip(path, moving_shapes(frames, height, width, seed=seed))
    return path


def _pyav_frames(path, width, height, pixel_format="rgb24"):
    """Every frame of a video as plain PyAV converts it (the reference): (T, H, W, C) uint8."""
    with av.open(path) as container:
        return np.stack([frame.to_ndarray(width=width, height=height, format=pixel_format, interpolation="AREA")
                         for frame in container.decode(video=0)])


def test_kept_frames_equal_pyavs_own_conversion_bit_for_bit(tmp_path):
    path = _mp4(tmp_path, frames=20)
    clip = probe_clip(path, "video")
    assert clip.frames == 20
    indices = [0, 3, 3, 4, 11, 19]  # repeats: a temporal up-sampling
    frames = decode_clip(clip, indices, (24, 32))
    reference = _pyav_frames(path, 32, 24)[indices]
    assert frames.dtype == torch.uint8
    assert torch.equal(frames, torch.from_numpy(reference).permute(0, 3, 1, 2))
    grey = decode_clip(clip, [2, 5], (24, 32), channels=1)
    assert torch.equal(grey[:, 0], torch.from_numpy(_pyav_frames(path, 32, 24, "gray")[[2, 5]]))


def test_lossless_clip_decodes_to_the_frames_written(tmp_path):
    written = moving_shapes(12, 32, 40, seed=3)
    path = os.path.join(tmp_path, "lossless.mkv")
    encode_clip(path, written, codec="ffv1")
    clip = probe_clip(path, "video")
    frames = decode_clip(clip, range(12))
    assert torch.equal(frames, written.permute(0, 3, 1, 2))
    # a moving shape: consecutive frames differ, so an off-by-one frame index could not pass
    assert not torch.equal(frames[0], frames[1])


def test_frames_are_resized_as_they_are_converted_never_held_at_1080p(tmp_path):
    path = os.path.join(tmp_path, "hd.mp4")
    encode_clip(path, moving_shapes(3, 1080, 1920, seed=1))
    clip = probe_clip(path, "video")
    tracemalloc.start()
    frames = decode_clip(clip, [0, 2], (32, 32))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert frames.shape == (2, 3, 32, 32)
    assert torch.equal(frames, torch.from_numpy(_pyav_frames(path, 32, 32)[[0, 2]]).permute(0, 3, 1, 2))
    assert peak < 1920 * 1080 * 3 // 4  # one RGB frame at 1080p is 6 MB; what was held is a fraction of it


def test_clips_decoded_on_threads_equal_one_by_one(tmp_path):
    clips = [probe_clip(_mp4(tmp_path, f"{i}.mp4", frames=10 + i, seed=i), "video") for i in range(4)]
    tasks = [lambda clip=clip: decode_clip(clip, range(0, clip.frames, 2), (16, 16)) for clip in clips]
    pooled, alone = decode_clips(tasks, 2), [task() for task in tasks]
    assert all(torch.equal(a, b) for a, b in zip(pooled, alone))
    assert [len(frames) for frames in pooled] == [5, 6, 6, 7]


def _photo_frames(count):
    """`count` 24 x 32 crops of a real photo, each shifted 3 pixels from the last (a panning clip)."""
    from sklearn.datasets import load_sample_image
    photo = load_sample_image("china.jpg")
    return [photo[100 + 3 * t:124 + 3 * t, 200 + 3 * t:232 + 3 * t] for t in range(count)]


def test_frame_folder_read_in_frame_order_equal_to_pillow(tmp_path):
    require("sklearn")
    folder = tmp_path / "clip"
    folder.mkdir()
    frames = _photo_frames(12)
    for t, frame in enumerate(frames):  # unpadded numbers: "images10" after "images9", not after "images1"
        Image.fromarray(frame).save(folder / f"images{t}.png")
    (folder / ".DS_Store").write_bytes(b"\0")
    clip = probe_clip(str(folder), "frames")
    assert clip.frames == 12
    decoded = decode_clip(clip, [1, 9, 10, 10, 11])
    assert torch.equal(decoded, torch.from_numpy(np.stack([frames[i] for i in (1, 9, 10, 10, 11)])).permute(0, 3, 1, 2))
    resized = decode_clip(clip, [0, 10], (12, 16))
    from gpucore import _C
    reference, _, _ = _C.decode_images([str(folder / "images0.png"), str(folder / "images10.png")], 3, 1, False, 12, 16)
    assert torch.equal(resized, reference.permute(0, 3, 1, 2))


def test_keypoints_read_as_numpy_saved_them(tmp_path):
    values = np.random.default_rng(0).normal(size=(9, 21, 3)).astype(np.float64)
    path = str(tmp_path / "k.npy")
    np.save(path, values)
    clip = probe_clip(path, "keypoints", keypoint_width=63)
    assert clip.frames == 9
    got = decode_clip(clip, [0, 4, 4, 8])
    assert got.dtype == torch.float32
    assert torch.equal(got, torch.from_numpy(values.reshape(9, 63)[[0, 4, 4, 8]].astype(np.float32)))


@pytest.mark.parametrize("case", ["not_a_video", "truncated", "empty_folder", "keypoints_width", "keypoints_empty",
                                  "keypoints_nan", "keypoints_text"])
def test_each_bad_clip_is_a_clip_error_naming_its_file(tmp_path, case):
    if case == "not_a_video":
        path, kind = str(tmp_path / "noise.mp4"), "video"
        (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif case == "truncated":
        whole = open(_mp4(tmp_path, frames=12), "rb").read()
        path, kind = str(tmp_path / "cut.mp4"), "video"
        (tmp_path / "cut.mp4").write_bytes(whole[:len(whole) // 3])
    elif case == "empty_folder":
        (tmp_path / "clip").mkdir()
        path, kind = str(tmp_path / "clip"), "frames"
    else:
        path, kind = str(tmp_path / "k.npy"), "keypoints"
        array = {"keypoints_width": np.zeros((5, 10)), "keypoints_empty": np.zeros((0, 12)),
                 "keypoints_nan": np.full((5, 12), np.nan), "keypoints_text": np.array([["a"] * 12] * 5)}[case]
        np.save(path, array)
    with pytest.raises(ClipError, match=os.path.basename(path)) as error:
        probe_clip(path, kind, keypoint_width=12 if kind == "keypoints" else None)
    assert re.search({"not_a_video": "does not decode", "truncated": "does not decode|zero frames",
                      "empty_folder": "zero frames", "keypoints_width": "10 features per frame",
                      "keypoints_empty": "zero frames", "keypoints_nan": "NaN",
                      "keypoints_text": "expected T x F numbers"}[case], str(error.value))


def test_without_pyav_a_config_error_names_the_package(tmp_path, monkeypatch):
    path = _mp4(tmp_path)
    monkeypatch.setitem(sys.modules, "av", None)  # import av now raises ImportError
    with pytest.raises(ConfigError, match=r"needs PyAV: pip install 'gpucore\[video\]'"):
        probe_clip(path, "video")
