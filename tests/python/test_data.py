"""The native readers and data sets: round trips with files written here, every corrupt case, errors that name the file."""
import gzip
import os
import struct

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data, transforms
from gpucore.data.png import encode_png
from conftest import assert_no_growth, assert_resume_matches, require


def write_idx(path, array, compress=False):
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}
    header = struct.pack(">BBBB", 0, 0, codes[array.dtype.type], array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    with (gzip.open if compress else open)(path, "wb") as handle:
        handle.write(payload)


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


def test_idx_data_set_and_training_on_an_idx_folder(tmp_path):
    (images, labels), (val_images, val_labels) = gpucore.data.builtin.synthetic_fashion(train_size=600, val_size=100)
    write_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), images[:, 0].numpy(), compress=True)
    write_idx(str(tmp_path / "train-labels-idx1-ubyte.gz"), labels.numpy().astype(np.uint8), compress=True)
    write_idx(str(tmp_path / "t10k-images-idx3-ubyte"), val_images[:, 0].numpy())
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte"), val_labels.numpy().astype(np.uint8))
    dataset = data.read_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), str(tmp_path / "train-labels-idx1-ubyte.gz"))
    assert torch.equal(dataset.inputs, images) and torch.equal(dataset.targets, labels)
    result = gpucore.train(dict(data=str(tmp_path), epochs=1, progress=False, run_dir=str(tmp_path / "runs")))
    # validation ran on the t10k files: the trained model's accuracy on them, computed here, is what was reported
    model = result.model.eval().cpu()  # trained wherever device auto chose
    stats = gpucore.data.tensor_inputs.input_stats(images)
    mean, std = torch.tensor(stats[0])[:, None, None], torch.tensor(stats[1])[:, None, None]
    with torch.no_grad():
        predicted = model((val_images.float() / 255 - mean) / std).argmax(1)
    assert result.history[0]["val_accuracy"] == pytest.approx((predicted == val_labels).float().mean().item(), abs=0.011)
    write_idx(str(tmp_path / "short-labels"), labels.numpy()[:10].astype(np.uint8))
    with pytest.raises(gpucore.ConfigError, match="short-labels"):
        data.read_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), str(tmp_path / "short-labels"))


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


def write_png(path, image):
    with open(path, "wb") as handle:
        handle.write(encode_png(image))


def test_png_round_trip_grey_and_rgb(tmp_path):
    rgb = torch.randint(0, 256, (9, 13, 3), dtype=torch.uint8)
    grey = torch.randint(0, 256, (9, 13), dtype=torch.uint8)
    write_png(tmp_path / "rgb.png", rgb)
    write_png(tmp_path / "grey.png", grey)
    assert torch.equal(_C.decode_image(str(tmp_path / "rgb.png"), 3), rgb)
    assert torch.equal(_C.decode_image(str(tmp_path / "grey.png"), 1)[..., 0], grey)
    assert torch.equal(_C.decode_image(str(tmp_path / "grey.png"), 3), grey[..., None].expand(9, 13, 3))


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
    assert len(skipped) == 2 and "neither PNG nor JPEG" in skipped[1]


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


def make_image_folder(root, classes=3, per_class=12, size=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for label in range(classes):
        os.makedirs(root / f"class_{label}", exist_ok=True)
        for i in range(per_class):
            image = torch.randint(0, 60, (size, size, 3), generator=generator, dtype=torch.uint8)
            image[:, :, label] += 150  # the class is the dominant colour
            write_png(root / f"class_{label}" / f"{i:03d}.png", image)


def test_image_folder_same_for_1_and_4_threads_and_trains(tmp_path):
    make_image_folder(tmp_path / "data" / "train")
    make_image_folder(tmp_path / "data" / "val", per_class=4, seed=1)
    one = data.read_image_folder(str(tmp_path / "data" / "train"), threads=1)
    four = data.read_image_folder(str(tmp_path / "data" / "train"), threads=4)
    assert torch.equal(one.inputs, four.inputs) and torch.equal(one.targets, four.targets)
    assert one.classes == ["class_0", "class_1", "class_2"] and one.inputs.shape == (36, 3, 10, 10)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(300, 3))
    result = gpucore.train(dict(data=str(tmp_path / "data"), epochs=10, batch_size=12, progress=False,
                                run_dir=str(tmp_path / "runs"), lr=0.01), model=net)
    assert result.best_metric == 1.0


def test_files_captcha_names_csv_and_segmentation(tmp_path):
    for text in ("ab12", "9zz0"):
        write_png(tmp_path / f"{text}.png", torch.zeros(4, 8, 3, dtype=torch.uint8))
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    captcha = data.read_files(sorted(str(p) for p in tmp_path.glob("*.png")),
                         label_from_name=data.captcha_labels(alphabet, 4))
    assert captcha.targets.tolist() == [[9, 35, 35, 0], [10, 11, 1, 2]]
    with pytest.raises(gpucore.ConfigError, match="'toolong' is not 4 characters"):
        data.captcha_labels(alphabet, 4)("toolong")
    (tmp_path / "list.csv").write_text("image,label\nab12.png,3\n9zz0.png,5\n")
    listed = data.read_csv(str(tmp_path / "list.csv"))
    assert listed.targets.tolist() == [3, 5]
    images, masks = tmp_path / "img", tmp_path / "mask"
    images.mkdir()
    masks.mkdir()
    mask = torch.zeros(5, 5, dtype=torch.uint8)
    mask[1:3, 1:4] = 255
    for name in ("a", "b"):
        write_png(images / f"{name}.png", torch.randint(0, 256, (5, 5, 3), dtype=torch.uint8))
        write_png(masks / f"{name}.png", mask)
    pairs = data.read_segmentation(str(images), str(masks))
    assert pairs.inputs.shape == (2, 3, 5, 5) and pairs.targets.shape == (2, 5, 5)
    assert pairs.targets.sum().item() == 2 * 6
    write_png(images / "c.png", torch.zeros(5, 5, 3, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match="'c' has an image or a mask but not both"):
        data.read_segmentation(str(images), str(masks))


def test_npy_folder_and_dataset_objects_in_train(tmp_path):
    (images, labels), _ = gpucore.data.builtin.synthetic_fashion(train_size=256, val_size=1)
    np.save(tmp_path / "x.npy", images[:, 0].numpy())
    np.save(tmp_path / "y.npy", labels.numpy())
    loaded = data.read_npy(str(tmp_path / "x.npy"), str(tmp_path / "y.npy"))
    assert torch.equal(loaded.inputs, images)
    result = gpucore.train(dict(epochs=1, progress=False, run_dir=str(tmp_path / "r"), val_fraction=0.0),
                           train_data=loaded)
    assert result.steps == 4


def augment_reference(x, offsets, flips, padding, mean, std):
    out = []
    for i in range(x.shape[0]):
        image = x[i].float() / 255 if x.dtype == torch.uint8 else x[i].float()
        padded = torch.nn.functional.pad(image, (padding,) * 4)
        crop = padded[:, offsets[i, 0]:offsets[i, 0] + x.shape[2], offsets[i, 1]:offsets[i, 1] + x.shape[3]]
        if flips[i]:
            crop = crop.flip(-1)
        if mean:
            crop = (crop - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
        out.append(crop)
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_augment_op_matches_pytorch(dtype):
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, 3, 9, 11), generator=generator).to(dtype)
    offsets = torch.randint(0, 7, (6, 2), generator=generator)
    flips = torch.randint(0, 2, (6,), generator=generator).bool()
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    ours = torch.ops.gpucore.augment(x, offsets, flips, 3, mean, std, torch.float32)
    torch.testing.assert_close(ours, augment_reference(x, offsets, flips, 3, mean, std), rtol=1e-5, atol=1e-5)
    half = torch.ops.gpucore.augment(x, offsets, flips, 3, [], [], torch.bfloat16)
    assert half.dtype == torch.bfloat16  # the float32 reference rounded once to bfloat16: equal
    assert torch.equal(half, augment_reference(x, offsets, flips, 3, [], []).to(torch.bfloat16))
    half = torch.ops.gpucore.augment(x, offsets, flips, 3, mean, std, torch.bfloat16)
    torch.testing.assert_close(half, augment_reference(x, offsets, flips, 3, mean, std).to(torch.bfloat16),
                               rtol=2 ** -7, atol=2 ** -8)  # at most one bfloat16 step apart
    torch.library.opcheck(torch.ops.gpucore.augment, (x, offsets, flips, 3, mean, std, torch.float32))
    with pytest.raises(RuntimeError, match="offsets must be int64 N x 2"):
        torch.ops.gpucore.augment(x, offsets[:2], flips, 3, [], [], torch.float32)
    with pytest.raises(RuntimeError, match="one value per channel"):
        torch.ops.gpucore.augment(x, offsets, flips, 3, [0.5], [0.5], torch.float32)


@pytest.mark.needs_cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_augment_op_on_cuda_matches_the_cpu(dtype):
    # images (3 channels, normalised) and masks (1 channel, no mean/std), into float32 and bfloat16
    generator = torch.Generator().manual_seed(251)
    for channels, mean, std in ((3, [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]), (1, [], [])):
        x = torch.randint(0, 256, (7, channels, 9, 11), generator=generator).to(dtype)
        offsets = torch.randint(0, 7, (7, 2), generator=generator)
        flips = torch.randint(0, 2, (7,), generator=generator).bool()
        for out in (torch.float32, torch.bfloat16):
            cpu = torch.ops.gpucore.augment(x, offsets, flips, 3, mean, std, out)
            cuda = torch.ops.gpucore.augment(x.cuda(), offsets.cuda(), flips.cuda(), 3, mean, std, out)
            assert cuda.device.type == "cuda" and cuda.dtype == out
            torch.testing.assert_close(cuda.cpu(), cpu, rtol=1e-6 if out == torch.float32 else 2 ** -7,
                                       atol=1e-6 if out == torch.float32 else 2 ** -8,
                                       msg=lambda m: f"{channels} channels, {out}, seed 251: {m}")


def test_augmentation_depends_on_sample_and_epoch_not_batch_size():
    x = torch.randint(0, 256, (20, 1, 6, 6), dtype=torch.uint8)
    y = torch.arange(20)

    def epoch(batch_size, epoch_index):
        config = _C.AugmentConfig()
        config.enabled = True
        config.transforms = transforms.specs(transforms.training_form([], 2, True, (6, 6)))
        batches = _C.TensorBatches(x, y, batch_size, True, False, 3, torch.device("cpu"), config)
        batches.start_epoch(epoch_index)
        served = {}
        while (batch := batches.next()) is not None:
            for image, label in zip(*batch):
                served[int(label)] = image
        return served

    small, large = epoch(3, 1), epoch(7, 1)
    assert all(torch.equal(small[k], large[k]) for k in range(20))
    other = epoch(3, 2)
    assert any(not torch.equal(small[k], other[k]) for k in range(20))


@pytest.mark.slow
def test_training_with_crop_and_flip_resumes_exactly(tmp_path):
    class Stop:
        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 1:
                raise KeyboardInterrupt

    config = dict(data="synthetic_fashion", data_kwargs={"train_size": 512, "val_size": 128}, epochs=2,
                  crop_padding=2, hflip=True, progress=False, batch_size=64)
    assert_resume_matches(tmp_path, config, Stop())
    with pytest.raises(gpucore.ConfigError, match="crop_padding, hflip and transforms need N x C x H x W"):
        gpucore.train(dict(progress=False, run_dir=str(tmp_path / "c"), hflip=True),
                      model=torch.nn.Linear(4, 2), train_data=(torch.randn(8, 4), torch.randint(0, 2, (8,))))


def image_set(n=50, seed=0, size=8):
    generator = torch.Generator().manual_seed(seed)
    return data.from_tensors(torch.randint(0, 256, (n, 3, size, size), generator=generator, dtype=torch.uint8),
                             torch.arange(n))


def test_dataloader_yields_normalised_batches_on_the_device():
    dataset = image_set()
    loader = gpucore.DataLoader(dataset, batch_size=16, shuffle=False, device="cpu")
    assert len(loader) == 4
    batches = list(loader)
    x, y = batches[0]
    mean, std = gpucore.data.tensor_inputs.input_stats(dataset.inputs)
    expected = (dataset.inputs[:16].float() / 255 - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(y, torch.arange(16))
    assert torch.equal(torch.cat([b[1] for b in batches]), torch.arange(50))
    host = gpucore.DataLoader(dataset, batch_size=16, shuffle=False, device="cpu", cache="host")
    assert torch.equal(next(iter(host))[0], x)


def test_dataloader_shards_cover_every_sample_with_equal_lengths():
    dataset = image_set(50)
    seen, lengths = [], []
    for rank in range(3):
        loader = gpucore.DataLoader(dataset, batch_size=4, device="cpu", seed=9, rank=rank, world_size=3)
        labels = torch.cat([y for _, y in loader])
        lengths.append(labels.numel())
        seen.extend(labels.tolist())
    assert lengths == [17, 17, 17]
    assert set(seen) == set(range(50))
    with pytest.raises(gpucore.ConfigError, match="rank must be in"):
        gpucore.DataLoader(dataset, batch_size=4, device="cpu", rank=3, world_size=3)


def test_dataloader_resumes_mid_epoch_exactly():
    dataset = image_set(40)
    options = dict(batch_size=8, device="cpu", seed=4, crop_padding=2, hflip=True)
    whole = gpucore.DataLoader(dataset, **options)
    list(whole)  # epoch 0
    expected = list(whole)  # epoch 1
    first = gpucore.DataLoader(dataset, **options)
    list(first)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(2)]
    state = first.state_dict()
    assert state == {"epoch": 1, "position": 2}
    resumed = gpucore.DataLoader(dataset, **options)
    resumed.load_state_dict(state)
    rest = list(resumed)
    for (x, y), (ex, ey) in zip(taken + rest, expected):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert resumed.state_dict() == {"epoch": 2, "position": 0}


def test_dataloader_memory_is_flat_across_epochs():
    # One epoch's batches are 7.4 MB (600 x 3 x 32 x 32 float32); 8 epochs may grow the process by a quarter
    # of one epoch: keeping even one batch per epoch alive (8 x 614 KB) fails, as does keeping an epoch.
    loader = gpucore.DataLoader(image_set(600, size=32), batch_size=50, device="cpu", crop_padding=2, hflip=True)
    epoch_bytes = sum(x.nbytes + y.nbytes for x, y in loader)

    def epoch():
        for _ in loader:
            pass

    assert_no_growth(epoch, 8, epoch_bytes // 4, warmup=2, what=f"after each epoch of {epoch_bytes} bytes")


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


def write_fashion_mnist(folder, train=40, test=12, seed=0):
    """Fashion-MNIST-named IDX files (gzip, as Debian ships them) of random images; returns the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", train), ("t10k", test)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)
        write_idx(str(folder / f"{split}-images-idx3-ubyte.gz"), images, compress=True)
        write_idx(str(folder / f"{split}-labels-idx1-ubyte.gz"), labels, compress=True)
        arrays[split] = (images, labels)
    return arrays


def test_fashion_mnist_is_found_by_path_environment_and_places(tmp_path, monkeypatch):
    from gpucore.data import builtin as builtin_data

    arrays = write_fashion_mnist(tmp_path / "fm")
    monkeypatch.delenv(builtin_data.FASHION_MNIST_ENV, raising=False)
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [str(tmp_path / "nowhere"), str(tmp_path / "fm")])
    for kwargs in ({"path": str(tmp_path / "fm")}, {}):
        (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", kwargs, val_fraction=0.1, seed=0)
        assert torch.equal(x[:, 0], torch.from_numpy(arrays["train"][0])) and x.shape == (40, 1, 28, 28)
        assert torch.equal(yv, torch.from_numpy(arrays["t10k"][1]).long())  # the test set is the validation split
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [])
    monkeypatch.setenv(builtin_data.FASHION_MNIST_ENV, str(tmp_path / "fm"))
    (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {"train_size": 8, "val_size": 5}, val_fraction=0.1, seed=0)
    assert torch.equal(x[:, 0], torch.from_numpy(arrays["train"][0][:8])) and xv.shape == (5, 1, 28, 28)
    with pytest.raises(gpucore.ConfigError, match=r"path '.*empty' holds no Fashion-MNIST IDX files"):
        builtin_data.load_data("fashion_mnist", {"path": str(tmp_path / "empty")}, val_fraction=0.1, seed=0)


def test_fashion_mnist_nowhere_warns_where_to_put_it_and_uses_the_synthetic_set(tmp_path, monkeypatch):
    from gpucore.data import builtin as builtin_data

    monkeypatch.delenv(builtin_data.FASHION_MNIST_ENV, raising=False)
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [str(tmp_path / "nowhere")])
    with pytest.warns(RuntimeWarning, match=r"Fashion-MNIST's files were not found .*dataset-fashion-mnist.*SYNTHETIC"):
        (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {"train_size": 30, "val_size": 10}, 0.1, 0)
    synthetic = builtin_data.synthetic_fashion(train_size=30, val_size=10)
    assert torch.equal(x, synthetic[0][0]) and xv.shape[0] == 10


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"), reason="dataset-fashion-mnist not installed")
def test_the_real_fashion_mnist_from_debians_package():
    from gpucore.data import builtin as builtin_data

    (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {}, val_fraction=0.1, seed=0)
    assert x.shape == (60000, 1, 28, 28) and xv.shape == (10000, 1, 28, 28)
    assert torch.bincount(y).tolist() == [6000] * 10 and torch.bincount(yv).tolist() == [1000] * 10
