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
from gpucore.data.video import ClipError, decode_clip, decode_clips, encode_clip, probe_clip
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


@pytest.mark.parametrize("case", ["not_a_video", "truncated", "zero_frames", "empty_folder", "keypoints_width",
                                  "keypoints_empty", "keypoints_nan", "keypoints_text"])
def test_each_bad_clip_is_a_clip_error_naming_its_file(tmp_path, case):
    if case == "not_a_video":
        path, kind = str(tmp_path / "noise.mp4"), "video"
        (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif case == "truncated":
        whole = open(_mp4(tmp_path, frames=12), "rb").read()
        path, kind = str(tmp_path / "cut.mp4"), "video"
        (tmp_path / "cut.mp4").write_bytes(whole[:len(whole) // 3])
    elif case == "zero_frames":  # a container whose encoder was never given a frame
        path, kind = str(tmp_path / "zero.mp4"), "video"
        container = av.open(path, "w")
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        container.start_encoding()  # the header written, no frame after it
        for packet in stream.encode():
            container.mux(packet)
        container.close()
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
                      "zero_frames": "zero frames",
                      "empty_folder": "zero frames", "keypoints_width": "10 features per frame",
                      "keypoints_empty": "zero frames", "keypoints_nan": "NaN",
                      "keypoints_text": "expected T x F numbers"}[case], str(error.value))


def test_without_pyav_a_config_error_names_the_package(tmp_path, monkeypatch):
    path = _mp4(tmp_path)
    monkeypatch.setitem(sys.modules, "av", None)  # import av now raises ImportError
    with pytest.raises(ConfigError, match=r"needs PyAV: pip install 'gpucore\[video\]'"):
        probe_clip(path, "video")


# ---- ClipSequences: the sequence batches of the CTC contract ------------------------------------------------------

from gpucore.data.clip_sequences import ClipSequences, LengthBatches  # noqa: E402
from gpucore.data.sign_layouts import BLANK, UNKNOWN, GlossClip  # noqa: E402

VOCABULARY = [BLANK, "a", "b", "c", UNKNOWN]


def _labelled(path, glosses, line=2):
    return GlossClip(str(path), tuple(glosses), f"CSV 'labels.csv' line {line}")


def _lossless(folder, name, frames):
    path = os.path.join(folder, name)
    encode_clip(path, frames, codec="ffv1")
    return path


def test_batches_pad_to_the_longest_clip_with_frame_counts_in_column_0(tmp_path):
    paths = [_mp4(tmp_path, f"{i}.mp4", frames=frames, height=32, width=32, seed=i)
             for i, frames in enumerate((8, 12, 16))]
    glosses = [["a"], ["b", "c", "a"], ["c", "c"]]
    data = ClipSequences([_labelled(p, g) for p, g in zip(paths, glosses)], VOCABULARY, size=24, threads=2)
    loader = torch.utils.data.DataLoader(data, batch_size=3, collate_fn=data.collate)
    x, y = next(iter(loader))  # torch's loader fetches the batch through __getitems__: the thread pool
    assert x.dtype == torch.uint8 and x.shape == (3, 16, 3, 24, 24)
    assert y.tolist() == [[8, 1, -1, -1], [12, 2, 3, 1], [16, 3, 3, -1]]
    for row, (path, frames) in enumerate(zip(paths, (8, 12, 16))):
        reference = torch.from_numpy(_pyav_frames(path, 24, 24)).permute(0, 3, 1, 2)
        assert torch.equal(x[row, :frames], reference)
        assert not x[row, frames:].any()  # zeros past the clip's end
    assert ClipSequences.sequence_lengths_in_target is True


def test_frame_stride_and_max_frames_keep_frames_evenly(tmp_path):
    path = _mp4(tmp_path, frames=20, height=32, width=32)
    data = ClipSequences([_labelled(path, ["a"])], VOCABULARY, size=16, frame_stride=3)
    assert data.frame_indices(0).tolist() == [0, 3, 6, 9, 12, 15, 18]
    capped = ClipSequences([_labelled(path, ["a"])], VOCABULARY, size=16, frame_stride=2, max_frames=4)
    assert capped.frame_indices(0).tolist() == [0, 6, 12, 18]  # 10 kept frames, 4 spread over them
    frames, _ = capped[0]
    assert torch.equal(frames, torch.from_numpy(_pyav_frames(path, 16, 16)[[0, 6, 12, 18]]).permute(0, 3, 1, 2))


def _photo_clip(frames, moving=True):
    """A clip of real photo crops (scikit-learn's china.jpg), panning 2 pixels a frame, or still."""
    from sklearn.datasets import load_sample_image
    photo = load_sample_image("china.jpg")
    return np.stack([photo[120 + 2 * t * moving:152 + 2 * t * moving, 200:232] for t in range(frames)])


TRANSFORMS = [{"RandomResizedCrop": {"size": 24, "scale": [0.3, 0.9]}}, {"RandomHorizontalFlip": {"p": 0.5}},
              {"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}}]


def test_one_spatial_draw_per_clip_applied_to_every_frame(tmp_path):
    require("sklearn")
    still = _lossless(tmp_path, "still.mkv", _photo_clip(6, moving=False))
    plain_set = ClipSequences([_labelled(still, ["a"])] * 4, VOCABULARY, size=32)
    data = plain_set.served(TRANSFORMS, None, seed=7)
    outputs = []
    for clip in range(4):
        frames, _ = data[clip]
        assert frames.shape == (6, 3, 24, 24)
        # the same picture in every frame: one crop, flip and colour for the whole clip leaves them equal
        assert all(torch.equal(frames[0], frame) for frame in frames[1:])
        outputs.append(frames[0])
    assert len({tuple(o.flatten().tolist()) for o in outputs}) == 4  # each clip its own draw
    plain, _ = plain_set[0]
    written = torch.from_numpy(_photo_clip(6, moving=False)).permute(0, 3, 1, 2)
    assert torch.equal(plain, written)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    normalised, _ = plain_set.served([], (mean, std), seed=0)[0]
    by_hand = (written.float() / 255 - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    torch.testing.assert_close(normalised, by_hand, atol=1e-6, rtol=1e-5)


def test_draws_are_a_function_of_seed_epoch_and_clip(tmp_path):
    require("sklearn")
    path = _lossless(tmp_path, "pan.mkv", _photo_clip(10))
    clips = [_labelled(path, ["a", "b"])] * 3

    def epoch_batches(epoch, seed=3):
        data = ClipSequences(clips, VOCABULARY, size=32, rescale=0.2).served(
            TRANSFORMS, ([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]), seed)
        data.epoch = epoch
        sampler = LengthBatches(data.lengths(), 2, seed=seed)
        sampler.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=data.collate)
        return list(loader)

    first, again = epoch_batches(2), epoch_batches(2)  # a resume: fresh objects, same (seed, epoch)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert first[0][0].dtype == torch.float32
    other = epoch_batches(3)
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(first, other))


def test_temporal_rescaling_drops_or_repeats_frames_in_order(tmp_path):
    require("sklearn")
    written = _photo_clip(10)
    path = _lossless(tmp_path, "pan.mkv", written)
    data = ClipSequences([_labelled(path, ["a"])], VOCABULARY, size=32, rescale=0.2)
    reference = torch.from_numpy(written).permute(0, 3, 1, 2)
    lengths = set()
    for epoch in range(30):
        data.epoch = epoch
        indices = data.frame_indices(0)
        assert 8 <= len(indices) <= 12 and np.all(np.diff(indices) >= 0)
        frames, _ = data[0]
        assert torch.equal(frames, reference[torch.from_numpy(indices)])  # the decoded frames, in order
        lengths.add(len(indices))
    assert min(lengths) < 10 < max(lengths)  # frames dropped in some epochs, repeated in others


def test_clips_that_cannot_fit_ctc_refused_or_skipped_by_name(tmp_path):
    short = _mp4(tmp_path, "short.mp4", frames=4, height=32, width=32)
    fine = _mp4(tmp_path, "fine.mp4", frames=12, height=32, width=32)
    clips = [_labelled(short, ["a", "a", "b"], line=2), _labelled(fine, ["a", "b"], line=3)]
    assert len(ClipSequences(clips, VOCABULARY, size=16)) == 2  # 4 frames: a, blank, a, b
    with pytest.raises(ClipError, match=r"line 2: clip '.*short\.mp4' gives 2 output steps .*temporal_stride 2.* "
                                        r"3 glosses \(4"):
        ClipSequences(clips, VOCABULARY, size=16, temporal_stride=2)
    with pytest.raises(ClipError, match=r"short\.mp4' gives 3 output steps at its fewest \(3 frames after rescaling"):
        ClipSequences(clips, VOCABULARY, size=16, rescale=0.2)
    kept = ClipSequences(clips, VOCABULARY, size=16, temporal_stride=2, on_error="skip")
    assert [c.path for c in kept.clips] == [fine] and len(kept.skipped) == 1 and "short.mp4" in kept.skipped[0]


def test_bad_clips_among_good_ones_named_and_skipped_with_a_count(tmp_path):
    good = _mp4(tmp_path, "good.mp4", frames=8, height=32, width=32)
    noise = tmp_path / "noise.mp4"
    noise.write_bytes(np.random.default_rng(1).integers(0, 256, 2048, dtype=np.uint8).tobytes())
    clips = [_labelled(good, ["a"], 2), _labelled(noise, ["b"], 3)]
    with pytest.raises(ClipError, match=r"line 3: video clip '.*noise\.mp4' does not decode"):
        ClipSequences(clips, VOCABULARY, size=16)
    data = ClipSequences(clips, VOCABULARY, size=16, on_error="skip")
    assert len(data) == 1 and len(data.skipped) == 1 and "noise.mp4" in data.skipped[0]
    for width, name in ((6, "a.npy"), (6, "b.npy"), (5, "c.npy")):
        np.save(str(tmp_path / name), np.ones((4, width), np.float32))
    keypoints = [_labelled(tmp_path / n, ["a"], line) for line, n in enumerate(("a.npy", "b.npy", "c.npy"), 2)]
    with pytest.raises(ClipError, match=r"line 4: keypoint file '.*c\.npy' has 5 features per frame, expected 6"):
        ClipSequences(keypoints, VOCABULARY)
    data = ClipSequences(keypoints, VOCABULARY, on_error="skip")
    x, y = data.collate([data[0], data[1]])
    assert x.dtype == torch.float32 and x.shape == (2, 4, 6) and torch.equal(x, torch.ones(2, 4, 6))
    assert y.tolist() == [[4, 1], [4, 1]]


def test_length_batches_group_similar_lengths_and_cover_every_clip_once():
    lengths = [5, 40, 6, 41, 7, 42, 8, 43]
    sampler = LengthBatches(lengths, 2, seed=0, pool=4)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert all(abs(lengths[b[0]] - lengths[b[1]]) <= 2 for b in batches)  # short with short, long with long
    assert list(LengthBatches(lengths, 2, seed=0, pool=4)) == batches  # a function of (seed, epoch)
    sampler.set_epoch(1)
    assert list(sampler) != batches
    assert list(LengthBatches(lengths, 3, shuffle=False, pool=2)) == [[0, 2, 4], [1, 3, 5], [6, 7]]


def test_a_clip_damaged_after_probing_names_the_frames_it_decoded(tmp_path):
    path = os.path.join(tmp_path, "clip.mkv")
    encode_clip(path, moving_shapes(12, 32, 32, seed=2), codec="ffv1")
    clip = probe_clip(path, "video")
    whole = open(path, "rb").read()
    with open(path, "wb") as handle:  # the file cut short after its frame count was read
        handle.write(whole[:len(whole) // 2])
    with pytest.raises(ClipError, match=r"clip\.mkv' decoded \d+ frames of the 12 its container holds \(frame 11 is "
                                        r"needed\): a truncated or damaged file"):
        decode_clip(clip, [0, 11])
    assert decode_clip(clip, []).shape == (0, 3, 0, 0)


def test_a_runs_clip_batches_decoded_ahead_are_the_samples_in_the_epochs_order(tmp_path):
    """A run's training clips are decoded `prefetch` batches ahead on a thread: the batches are those of the epoch's
    shuffled order, read one by one; an iteration left early ends the thread."""
    import threading

    import gpucore
    from gpucore.data.epoch_data import training_set

    glosses = (["a"], ["b"], ["c", "a"], ["b", "b"], ["a", "b", "c"])
    clips = [_labelled(_mp4(tmp_path, f"{i}.mp4", frames=6 + 2 * i, height=32, width=32, seed=i), g, line=i + 2)
             for i, g in enumerate(glosses)]
    data = ClipSequences(clips, VOCABULARY, size=16, threads=2)
    config = gpucore.load_config({"data": str(tmp_path), "loss": "ctc", "batch_size": 2, "seed": 5, "prefetch": 2,
                                  "shuffle": True, "drop_last": False})
    train_set = training_set(data, config, torch.device("cpu"))
    batches = list(train_set.batches(epoch=3))
    served = data.served([], train_set.plan.normalization, seed=5)
    served.epoch = 3
    order = torch.randperm(5, generator=torch.Generator().manual_seed(5 * 1000003 + 3)).tolist()  # RandomSampler's
    expected = [served.collate([served[i] for i in order[start:start + 2]]) for start in range(0, 5, 2)]
    assert [y[:, 0].tolist() for _, y in batches] == [[6 + 2 * i for i in order[s:s + 2]] for s in range(0, 5, 2)]
    for (x, y), (x_expected, y_expected) in zip(batches, expected, strict=True):
        assert torch.equal(x, x_expected) and torch.equal(y, y_expected)

    def prefetching():
        return [t for t in threading.enumerate() if t.name == "gpucore-clip-prefetch"]

    iterator = train_set.batches(epoch=3)
    x, y = next(iterator)
    assert torch.equal(x, expected[0][0]) and len(prefetching()) == 1
    iterator.close()  # a report taking one batch, an interrupt
    assert not prefetching()


def test_prefetched_batches_come_in_order_and_an_error_where_its_batch_was():
    from gpucore.data.epoch_data import _Prefetched

    class Batches:
        def __len__(self):
            return 6

        def __iter__(self):
            for index in range(6):
                if index == 4:
                    raise ClipError("video clip 'broken.mp4' does not decode")
                yield index

    received = []
    with pytest.raises(ClipError, match="broken.mp4"):
        for batch in _Prefetched(Batches(), 2):
            received.append(batch)
    assert received == [0, 1, 2, 3] and len(_Prefetched(Batches(), 2)) == 6
