"""The native readers (IDX, NPY, NPZ, PNG, JPEG): round trips with files written here, every corrupt case, errors
that name the file, a format built without its library."""
import json
import os

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data
from gpucore.data.png import encode_png
from conftest import require, write_idx, write_png


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64, np.int16])
def test_idx_round_trip(tmp_path, compress, dtype):
    array = (np.random.default_rng(0).random((5, 4, 3)) * 100).astype(dtype)
    path = str(tmp_path / ("a.idx.gz" if compress else "a.idx"))
    write_idx(path, array, compress)
    assert np.array_equal(_C.read_idx(path).numpy(), array)


def test_idx_errors_name_the_file(tmp_path):
    good = tmp_path / "good.idx"
    write_idx(str(good), np.zeros((3, 2, 2), np.uint8))
    payload = good.read_bytes()
    cases = {"truncated.idx": payload[:-2], "extra.idx": payload + b"\x00", "magic.idx": b"\x01\x02" + payload[2:],
             "type.idx": payload[:2] + b"\x07" + payload[3:], "header.idx": payload[:6]}
    messages = {"truncated.idx": "truncated", "extra.idx": "more data", "magic.idx": "not an IDX file",
                "type.idx": "unknown data type", "header.idx": "truncated in its header"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(gpucore.ConfigError, match=messages[name]) as info:
            _C.read_idx(str(tmp_path / name))
        assert name in str(info.value)
    with pytest.raises(gpucore.ConfigError, match="cannot open"):
        _C.read_idx(str(tmp_path / "missing.idx"))


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.float64, np.bool_, np.int16])
def test_npy_round_trip(tmp_path, dtype):
    array = (np.random.default_rng(0).random((3, 5)) * 10).astype(dtype)
    np.save(tmp_path / "a.npy", array)
    assert np.array_equal(_C.read_npy(str(tmp_path / "a.npy")).numpy(), array)


def test_npy_errors(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.float32))
    content = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(content[:-8])
    with pytest.raises(gpucore.ConfigError, match="cut.npy' is truncated"):
        _C.read_npy(str(tmp_path / "cut.npy"))
    (tmp_path / "bad.npy").write_bytes(b"not numpy at all")
    with pytest.raises(gpucore.ConfigError, match="bad.npy' is not a .npy file"):
        _C.read_npy(str(tmp_path / "bad.npy"))
    np.save(tmp_path / "complex.npy", np.zeros(3, np.complex64))
    with pytest.raises(gpucore.ConfigError, match="complex.npy' holds dtype c8"):
        _C.read_npy(str(tmp_path / "complex.npy"))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((3, 2), np.float32)))
    with pytest.raises(gpucore.ConfigError, match="Fortran order"):
        _C.read_npy(str(tmp_path / "fortran.npy"))


def test_png_round_trip_grey_and_rgb(tmp_path):
    rgb = torch.randint(0, 256, (9, 13, 3), dtype=torch.uint8)
    grey = torch.randint(0, 256, (9, 13), dtype=torch.uint8)
    write_png(tmp_path / "rgb.png", rgb)
    write_png(tmp_path / "grey.png", grey)
    assert torch.equal(_C.decode_image(str(tmp_path / "rgb.png"), 3), rgb)
    assert torch.equal(_C.decode_image(str(tmp_path / "grey.png"), 1)[..., 0], grey)
    assert torch.equal(_C.decode_image(str(tmp_path / "grey.png"), 3), grey[..., None].expand(9, 13, 3))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "P"])
def test_png_converts_as_pillow_does(tmp_path, mode):
    """Grey from colour with Pillow's ITU-R 601-2 weights, alpha dropped (not composited on black), palettes
    through their colours: a PNG reads as Pillow's convert('L') and convert('RGB') of it, to the value."""
    Image = require("PIL.Image")
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (11, 17, 4), dtype=np.uint8)
    rgba[0, 0] = [255, 255, 255, 0]  # a transparent white pixel: white to Pillow, black when composited
    picture = Image.fromarray(rgba, "RGBA")
    picture = picture.convert(mode) if mode != "P" else picture.convert("RGB").quantize(64)
    picture.save(tmp_path / "a.png")
    for channels, pil_mode in ((3, "RGB"), (1, "L")):
        ours = _C.decode_image(str(tmp_path / "a.png"), channels).numpy()
        theirs = np.asarray(Image.open(tmp_path / "a.png").convert(pil_mode)).reshape(11, 17, channels)
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{mode} read with {channels} channel(s)")
    if mode == "RGBA":
        assert _C.decode_image(str(tmp_path / "a.png"), 3)[0, 0].tolist() == [255, 255, 255]


def test_jpeg_matches_pillow(tmp_path):
    Image = require("PIL.Image")
    pixels = np.random.default_rng(0).integers(0, 256, (16, 20, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.jpg", quality=90)
    ours = _C.decode_image(str(tmp_path / "a.jpg"), 3).numpy().astype(int)
    theirs = np.asarray(Image.open(tmp_path / "a.jpg").convert("RGB")).astype(int)
    assert np.abs(ours - theirs).max() <= 1  # same libjpeg family; IDCT rounding may differ by one


def test_corrupt_images_name_the_file_or_are_skipped(tmp_path):
    folder = tmp_path / "cls"
    folder.mkdir()
    for i in range(4):
        write_png(folder / f"{i}.png", torch.full((6, 6, 3), i * 40, dtype=torch.uint8))
    good = (folder / "0.png").read_bytes()
    (folder / "4_cut.png").write_bytes(good[:40])
    (folder / "5_text.png").write_bytes(b"hello")
    paths = sorted(str(p) for p in folder.iterdir())
    with pytest.raises(gpucore.ConfigError, match=r"4_cut.png' \(index 4\): corrupt PNG"):
        _C.decode_images(paths, 3, 2, False)
    images, kept, skipped = _C.decode_images(paths, 3, 2, True)
    assert images.shape == (4, 6, 6, 3) and kept == [0, 1, 2, 3]
    assert len(skipped) == 2 and "5_text.png: neither PNG, JPEG, WebP, BMP, GIF, TIFF, PPM, HEIC nor AVIF" in skipped[1]


def test_a_format_built_without_its_library_fails_before_decoding_naming_the_library(tmp_path, monkeypatch):
    write_png(tmp_path / "a.png", torch.zeros(6, 6, 3, dtype=torch.uint8))
    Image = require("PIL.Image")
    Image.fromarray(np.zeros((6, 6, 3), dtype=np.uint8)).save(tmp_path / "b.jpg")
    has_jpeg = "jpeg" in gpucore._build_info.IMAGE_FORMATS
    monkeypatch.setattr(gpucore._build_info, "IMAGE_FORMATS", ("jpeg",) if has_jpeg else ())
    # A readable JPEG first (where this build reads JPEGs): the PNG after it is still refused up front.
    files = ([str(tmp_path / "b.jpg")] if has_jpeg else []) + [str(tmp_path / "a.png")]
    for on_error in ("raise", "skip"):  # a missing reader is never a file to skip
        with pytest.raises(gpucore.ConfigError, match=r"a.png' is a PNG file, but gpucore was built without libpng"
                                                      r"[\s\S]*apt-get install libpng-dev"):
            data.read_files(files, list(range(len(files))), on_error=on_error)
    if has_jpeg:  # the other format still reads
        assert data.read_files([str(tmp_path / "b.jpg")], [0]).inputs.shape == (1, 3, 6, 6)


@pytest.mark.skipif("png" in gpucore._build_info.IMAGE_FORMATS, reason="this build has the PNG reader")
def test_native_reader_without_libpng_names_the_library(tmp_path):
    (tmp_path / "a.png").write_bytes(encode_png(torch.zeros(4, 4, 3, dtype=torch.uint8)))
    for call in (lambda: _C.decode_image(str(tmp_path / "a.png"), 3),
                 lambda: _C.decode_images([str(tmp_path / "a.png")], 3, 2, True)):
        with pytest.raises(gpucore.ConfigError, match=r"a.png' is a PNG file, but gpucore was built without libpng"):
            call()


def test_mixed_sizes_are_an_error(tmp_path):
    write_png(tmp_path / "a.png", torch.zeros(6, 6, 3, dtype=torch.uint8))
    write_png(tmp_path / "b.png", torch.zeros(7, 6, 3, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match=r"b.png' is 7x6 but .*a.png' is 6x6"):
        _C.decode_images([str(tmp_path / "a.png"), str(tmp_path / "b.png")], 3, 1, False)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_round_trip_and_corrupt_archives(tmp_path, save):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (7, 5, 4), dtype=np.uint8), "y_train": rng.integers(0, 9, 7),
              "scale": rng.random(3).astype(np.float32)}
    save(tmp_path / "a.npz", **arrays)
    loaded = _C.read_npz(str(tmp_path / "a.npz"))
    assert list(loaded) == list(arrays)
    for name, array in arrays.items():
        assert np.array_equal(loaded[name].numpy(), array)
    dataset = data.read_npz(str(tmp_path / "a.npz"), "x_train", "y_train")
    assert dataset.inputs.shape == (7, 1, 5, 4) and dataset.targets.dtype == torch.long
    with pytest.raises(gpucore.ConfigError, match="has no array 'x'; it holds"):
        data.read_npz(str(tmp_path / "a.npz"))
    content = (tmp_path / "a.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(content[: len(content) // 2])
    with pytest.raises(gpucore.ConfigError, match="cut.npz' is not a .npz file"):
        _C.read_npz(str(tmp_path / "cut.npz"))
    flipped = bytearray(content)
    first_data = 30 + int.from_bytes(content[26:28], "little") + int.from_bytes(content[28:30], "little")
    flipped[first_data + 100] ^= 0xFF  # inside x_train's array (or its compressed stream)
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    with pytest.raises(gpucore.ConfigError, match=r"flipped.npz:x_train.npy' is corrupt"):
        _C.read_npz(str(tmp_path / "flipped.npz"))
    with pytest.raises(gpucore.ConfigError, match="cannot open .npz file"):
        _C.read_npz(str(tmp_path / "missing.npz"))


def _csv_images(folder, count):
    """`count` distinct 4 x 4 grey PNGs img0.png ... in `folder`."""
    from gpucore.data.png import encode_png

    for index in range(count):
        (folder / f"img{index}.png").write_bytes(encode_png(torch.full((4, 4), index * 10, dtype=torch.uint8)))


def test_csv_multi_label_by_name_by_id_and_by_column(tmp_path):
    _csv_images(tmp_path, 4)
    (tmp_path / "names.csv").write_text("image,tags\nimg0.png,dog cat\nimg1.png,\nimg2.png,bird\nimg3.png,cat  bird dog\n")
    named = gpucore.data.read_csv(str(tmp_path / "names.csv"), label_column="tags", channels=1, multi_label=True)
    assert named.classes == ["bird", "cat", "dog"]  # the names found, sorted
    by_hand = torch.tensor([[0, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    assert named.targets.dtype == torch.float32 and torch.equal(named.targets, by_hand)
    assert [int(v) for v in named.inputs[:, 0, 0, 0]] == [0, 10, 20, 30]  # the rows' images, in order
    # classes fixes the order (and allows indices into it)
    ordered = gpucore.data.read_csv(str(tmp_path / "names.csv"), label_column="tags", channels=1, multi_label=True,
                                    classes=["dog", "cat", "bird", "fish"])
    assert ordered.classes == ["dog", "cat", "bird", "fish"]
    assert torch.equal(ordered.targets, torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [1, 1, 1, 0]],
                                                     dtype=torch.float32))
    # integer class ids, spaces or ';' between them
    (tmp_path / "ids.csv").write_text("image,label\nimg0.png,0 2\nimg1.png,1;3\nimg2.png,3\n")
    ids = gpucore.data.read_csv(str(tmp_path / "ids.csv"), channels=1, multi_label=True)
    assert ids.classes is None
    assert torch.equal(ids.targets, torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 0, 1]], dtype=torch.float32))
    # one 0/1 column per class
    (tmp_path / "columns.csv").write_text("image,cat,dog,bird\nimg0.png,1,1,0\nimg1.png,0,0,0\nimg2.png,0,0,1\n")
    columns = gpucore.data.read_csv(str(tmp_path / "columns.csv"), label_column=["cat", "dog", "bird"], channels=1)
    assert columns.classes == ["cat", "dog", "bird"]
    assert torch.equal(columns.targets, torch.tensor([[1, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=torch.float32))


def test_csv_multi_label_trains_with_multilabel_soft_margin(tmp_path):
    _csv_images(tmp_path, 16)  # each image once: a file listed twice is refused
    (tmp_path / "tags.csv").write_text("image,tags\n" + "".join(
        f"img{i}.png,{['a', 'b', 'a b', ''][i % 4]}\n" for i in range(16)))
    data = gpucore.data.read_csv(str(tmp_path / "tags.csv"), label_column="tags", channels=1, multi_label=True)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
    result = gpucore.train(dict(run_dir=str(tmp_path / "runs"), epochs=1, batch_size=4, progress=False, report=False,
                                device="cpu", precision="32", loggers=[], loss="multilabel_soft_margin", top_k=0),
                           model=model, train_data=data, val_data=data)
    assert result.status == "completed"
    loaded = gpucore.load(os.path.join(result.checkpoint_dir, "last.pt"), "cpu", model=model)
    assert loaded.classes == ["a", "b"]
    with torch.no_grad():  # the loss the run reports is the loss of those targets, computed here by hand
        expected = torch.nn.functional.multilabel_soft_margin_loss(loaded(data.inputs), data.targets)
    history = [json.loads(line) for line in open(os.path.join(result.run_dir, "metrics.jsonl"))]
    assert history[-1]["val_loss"] == pytest.approx(float(expected), rel=1e-4)


def test_csv_multi_label_errors_name_the_row_and_what_is_valid(tmp_path):
    _csv_images(tmp_path, 2)
    cases = [
        ("image,tags\nimg0.png,dog 1\n", {"label_column": "tags", "multi_label": True},
         r"column 'tags' mixes class names \('dog'\) and integer class ids \('1'\)"),
        ("image,tags\nimg0.png,dog\nimg1.png,fish\n", {"label_column": "tags", "multi_label": True,
                                                       "classes": ["dog", "cat"]},
         r"line 3: column 'tags' has label 'fish', not a class; expected one of dog, cat or an index 0 to 1"),
        ("image,cat,dog\nimg0.png,1,2\n", {"label_column": ["cat", "dog"]},
         r"line 2: column 'dog' is '2'; expected 0 or 1"),
        ("image,cat\nimg0.png,1\n", {"label_column": ["cat", "dog"]},
         r"has columns \['image', 'cat'\]; expected 'image', 'cat', 'dog' \(missing: dog\)"),
        ("image,label\nimg0.png,1 2\n", {}, r"line 2: 'label' is '1 2', which looks like several labels: for "
                                            r"multi-label data set loss bce_with_logits \(or data_kwargs multi_label: "
                                            r"true; read_label_file's multi_label=True\)"),
        ("image,label\nimg0.png,1\n", {"label_column": []}, r"label_column must be a column name or a non-empty list"),
    ]
    for index, (text, kwargs, message) in enumerate(cases):
        (tmp_path / f"case{index}.csv").write_text(text)
        with pytest.raises(gpucore.ConfigError, match=message):
            gpucore.data.read_csv(str(tmp_path / f"case{index}.csv"), channels=1, **kwargs)
