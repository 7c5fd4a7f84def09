"""A web download as it comes: JPEG, PNG, WebP, BMP, GIF and TIFF side by side (and HEIC, what phones write), read
by gpucore as torchvision's ImageFolder counts them (ImageFolder leaves GIF out; gpucore reads its first frame) and
decoded bit for bit as Pillow's `exif_transpose(image).convert(mode)` gives them: in memory, resized, streamed on the
reader threads, and as predict's inputs. A format whose reader is not installed is named with its install command;
a corrupt WebP or TIFF is that file's error, as a broken JPEG is. Files are crops of real photos."""
import io
import json
import os
import sys
import warnings

import numpy as np
import pytest
import torch

import gpucore
from gpucore import data
from gpucore.data import pillow_formats
import forked_python
from conftest import require
from test_decoding import first_batch, photo

Image = require("PIL.Image")
ImageOps = require("PIL.ImageOps")

SIZE = 24


def pillow(path, mode="RGB"):
    """Pillow's pixels of a file, upright, H x W x channels: what gpucore must give."""
    with Image.open(path) as image:
        pixels = np.asarray(ImageOps.exif_transpose(image).convert(mode))
    return pixels.reshape(*pixels.shape[:2], -1)


def crop(index):
    """A SIZE x SIZE crop of a real photo, different for every index."""
    name = ("astronaut", "coffee", "chelsea")[index % 3]
    return Image.fromarray(photo(name, top=30 + 11 * index, left=60 + 17 * index, height=SIZE, width=SIZE))


def exif(orientation):
    tags = Image.Exif()
    tags[0x0112] = orientation
    return tags.tobytes()


def with_alpha(image):
    """RGBA: the photo with its own luma as a (varying) alpha."""
    rgba = image.convert("RGBA")
    rgba.putalpha(image.convert("L"))
    return rgba


# Each format as the web has it, two variants each: (extension, how crop i is saved there).
SAVERS = {
    "jpg": lambda im, p, i: im.save(p, quality=90),
    "png": lambda im, p, i: (with_alpha(im) if i % 2 else im).save(p),
    "webp": lambda im, p, i: (im.save(p, lossless=True, exif=exif(6)) if i % 2 else
                              with_alpha(im).save(p, quality=80)),
    "bmp": lambda im, p, i: (im.convert("L") if i % 2 else im).save(p),
    "gif": lambda im, p, i: (im.save(p, save_all=True, append_images=[crop(i + 7)]) if i % 2 else
                             im.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(p, transparency=3)),
    "tiff": lambda im, p, i: (im.convert("CMYK").save(p, compression="tiff_lzw") if i % 2 else
                              im.save(p, compression="tiff_adobe_deflate", exif=exif(3))),
}


def web_folder(root, per_format=2):
    """Two class folders, each with `per_format` files of every format of SAVERS (an animated GIF's first frame, an
    RGBA WebP, EXIF-turned WebP and TIFF, a CMYK TIFF, a palette GIF with transparency, a grey BMP among them)."""
    for label, name in enumerate(("cat", "dog")):
        os.makedirs(os.path.join(root, name))
        for i in range(per_format):
            for extension, save in SAVERS.items():
                index = 10 * label + i
                save(crop(index), os.path.join(root, name, f"{extension}{i}.{extension}"), i)
    return str(root)


def test_a_web_folder_is_read_whole_as_imagefolder_counts_it_and_pillow_decodes_it(tmp_path):
    torchvision = require("torchvision")
    root = web_folder(tmp_path / "web")
    reference = torchvision.datasets.ImageFolder(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out, nothing to say
        files = data.read_image_folder(root)
    gifs = sorted(os.path.join(root, c, f) for c in ("cat", "dog") for f in os.listdir(os.path.join(root, c))
                  if f.endswith(".gif"))
    assert len(reference) == 20 and len(gifs) == 4  # ImageFolder's extensions have no .gif
    assert len(files) == len(reference) + len(gifs) == 24
    assert sorted(files.paths) == sorted([p for p, _ in reference.samples] + gifs)
    labels = dict(reference.samples)
    assert all(int(y) == labels.get(p, os.path.basename(os.path.dirname(p)) == "dog")
               for p, y in zip(files.paths, files.targets))
    for mode, channels in (("RGB", 3), ("L", 1)):
        decoded = data.read_image_folder(root, channels=channels).inputs.permute(0, 2, 3, 1).numpy()
        for path, image in zip(files.paths, decoded):
            np.testing.assert_array_equal(image, pillow(path, mode), err_msg=f"{path} {mode}")
    # streamed: decoded on the reader threads (cache none), the same pixels
    streamed, targets = first_batch(files, cache="none")
    np.testing.assert_array_equal(streamed, np.stack([pillow(p) for p in files.paths]))
    assert torch.equal(targets, files.targets)


@pytest.mark.kernel_build
def test_other_formats_resize_and_read_at_their_own_sizes_as_png_does(tmp_path):
    image = crop(4)
    paths = []
    for extension, options in (("png", {}), ("webp", {"lossless": True}), ("bmp", {}), ("tiff", {}),
                               ("ppm", {})):
        paths.append(str(tmp_path / f"same.{extension}"))
        image.save(paths[-1], **options)
    resized = data.read_files(paths, [0] * len(paths), size=(15, 20)).inputs
    for other in resized[1:]:  # the same pixels, so the same resize as the PNG's
        assert torch.equal(other, resized[0])
    with pytest.warns(UserWarning, match="5 of 5 images have a shorter side longer than max_resolution 12"):
        bounded = data.read_files(paths, [0] * len(paths), max_resolution=12).images_at_own_size()
    assert all(torch.equal(i, bounded[0]) for i in bounded[1:]) and bounded[0].shape == (12, 12, 3)


def test_the_max_image_pixels_guard_holds_for_other_formats(tmp_path):
    path = str(tmp_path / "big.webp")
    crop(0).save(path, lossless=True)
    before = data.max_image_pixels()
    data.set_max_image_pixels(SIZE * SIZE - 1)
    try:
        with pytest.raises(gpucore.ConfigError, match=rf"big.webp'.*claims {SIZE}x{SIZE} = {SIZE * SIZE} pixels, "
                                                      rf"more than the limit of {SIZE * SIZE - 1}"):
            data.read_files([path], [0]).inputs  # noqa: B018
    finally:
        data.set_max_image_pixels(before)


def test_a_web_folder_trains_streamed_and_predict_reads_a_webp_as_the_same_png(tmp_path):
    from gpucore.data.input_files import read_input_images

    root = web_folder(tmp_path / "web", per_format=1)
    def linear():
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 2))

    torch.manual_seed(0)
    result = gpucore.train(dict(data=root, cache="none", epochs=1, device="cpu", precision="32", progress=False,
                                batch_size=4, report=False, normalize=False, val_fraction=0.25,
                                data_kwargs={"size": [16, 16]}, run_dir=str(tmp_path / "runs")), model=linear())
    with open(result.stats_path) as stats:
        assert json.load(stats)["validation"]["samples"] == 12  # every format, the GIFs too
    assert not result.skipped_files
    image = crop(5)
    image.save(tmp_path / "photo.webp", lossless=True)
    image.save(tmp_path / "photo.png")
    webp = read_input_images(str(tmp_path / "photo.webp"), 3)
    np.testing.assert_array_equal(webp.images[0].permute(1, 2, 0).numpy(), pillow(tmp_path / "photo.png"))
    loaded = gpucore.load(os.path.join(result.checkpoint_dir, "last.pt"), "cpu", model=linear())
    from_webp = gpucore.predict(loaded, str(tmp_path / "photo.webp"))
    from_png = gpucore.predict(loaded, str(tmp_path / "photo.png"))
    assert torch.equal(from_webp.outputs, from_png.outputs)
    assert from_webp.names == ["photo.webp"]


def test_corrupt_and_truncated_webp_and_tiff_are_that_files_error(tmp_path):
    good = str(tmp_path / "good.png")
    crop(1).save(good)
    broken = []
    for extension in ("webp", "tiff"):
        buffer = io.BytesIO()
        crop(2).save(buffer, format=extension.upper())
        path = str(tmp_path / f"cut.{extension}")
        open(path, "wb").write(buffer.getvalue()[:len(buffer.getvalue()) // 2])
        broken.append(path)
    files = data.read_files([good] + broken, [0, 1, 1], on_error="skip")
    assert len(files.inputs) == 1 and [s.split(": ")[0] for s in files.skipped] == broken
    assert "corrupt WebP" in files.skipped[0] and "corrupt TIFF" in files.skipped[1]
    for path in broken:
        with pytest.raises(gpucore.ConfigError, match=rf"image '{path}' \(index 0\): corrupt .*on_error: skip"):
            data.read_files([path], [0]).inputs  # noqa: B018


def heic_plugin():
    pillow_heif = require("pillow_heif")
    pillow_heif.register_heif_opener()
    return pillow_heif


def test_heic_reads_as_pillow_heif_decodes_it(tmp_path):
    heic_plugin()
    paths = [str(tmp_path / f"phone{i}.heic") for i in range(2)]
    for i, path in enumerate(paths):
        crop(i).save(path, format="HEIF", quality=90)
    files = data.read_files(paths, [0, 1])
    for path, image in zip(paths, files.inputs.permute(0, 2, 3, 1).numpy()):
        np.testing.assert_array_equal(image, pillow(path))


def test_without_its_plugin_a_heic_is_named_with_the_install_command(tmp_path, monkeypatch):
    heic_plugin()
    folder = tmp_path / "phone" / "cat"
    folder.mkdir(parents=True)
    crop(0).save(folder / "IMG_0001.heic", format="HEIF")
    crop(1).save(folder / "IMG_0002.jpg")
    # as if pillow-heif were not installed: Pillow knows no HEIF and the plugin cannot be imported
    monkeypatch.setitem(sys.modules, "pillow_heif", None)
    monkeypatch.delitem(Image.OPEN, "HEIF")
    monkeypatch.setattr(pillow_formats, "_plugins_tried", {})
    with pytest.warns(UserWarning, match=r"1 image files in formats gpucore cannot decode here are left out \(1 "
                                         r"\.heic: cat/IMG_0001\.heic\): is a HEIC file, which Pillow reads with a "
                                         r"plugin that is not installed: pip install pillow-heif"):
        files = data.read_image_folder(str(tmp_path / "phone"))
    assert files.paths == [str(folder / "IMG_0002.jpg")]
    with pytest.raises(gpucore.ConfigError, match=r"IMG_0001.heic' is a HEIC file.*pip install pillow-heif"):
        data.read_files([str(folder / "IMG_0001.heic")], [0], on_error="skip").inputs  # noqa: B018


def test_without_pillow_the_other_formats_name_its_install_command(tmp_path, monkeypatch):
    path = str(tmp_path / "photo.webp")
    crop(3).save(path)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(gpucore.ConfigError, match=r"photo.webp' is a WebP file; gpucore reads WebP, BMP, GIF, TIFF, "
                                                  r"PPM and .* through Pillow, which is not installed: pip install "
                                                  r"pillow"):
        data.read_files([path], [0], on_error="skip").inputs  # noqa: B018


def test_avif_reads_as_pillow_decodes_it(tmp_path):
    features = require("PIL.features")
    if not features.check("avif"):
        pytest.skip("this Pillow reads no AVIF (pip install -U pillow: its wheels read AVIF since 11.3)")
    path = str(tmp_path / "phone.avif")
    crop(6).save(path, quality=80)
    np.testing.assert_array_equal(data.read_files([path], [0]).inputs[0].permute(1, 2, 0).numpy(), pillow(path))


def test_palette_masks_in_other_formats_read_as_their_indices_and_colour_ones_are_refused(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    ids = []
    for i in range(3):
        image = crop(i)
        image.save(tmp_path / "images" / f"{i}.webp", lossless=True)
        ids.append((np.asarray(image.convert("L")) // 86).astype(np.uint8))  # classes 0, 1, 2 by brightness
        mask = Image.fromarray(ids[-1], "P")
        mask.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [0] * 759)
        mask.save(tmp_path / "masks" / f"{i}.{('bmp', 'tiff', 'bmp')[i]}")
    pairs = data.read_segmentation(str(tmp_path / "images"), str(tmp_path / "masks"))
    assert torch.equal(pairs.targets, torch.from_numpy(np.stack(ids)).long())
    np.testing.assert_array_equal(pairs.inputs.permute(0, 2, 3, 1).numpy(),
                                  np.stack([pillow(tmp_path / "images" / f"{i}.webp") for i in range(3)]))
    crop(0).save(tmp_path / "masks" / "0.bmp")  # an RGB photo as a mask
    with pytest.raises(gpucore.ConfigError, match=r"mask '.*0.bmp'.*is a BMP mask of mode RGB, whose pixels are not "
                                                  r"class ids"):
        data.read_segmentation(str(tmp_path / "images"), str(tmp_path / "masks")).targets  # noqa: B018


def test_a_streamed_loader_dropped_while_its_readers_decode_through_pillow_does_not_hang(tmp_path):
    # Dropping the loader joins its reader threads with the GIL held by Python; a reader inside Pillow needs the GIL
    # to finish, so the join must let it go. Photos large enough that the readers are still decoding the batches
    # they prefetch when the loader is dropped; a hang is the failure: a child process with a timeout tells.
    whole = Image.fromarray(photo("astronaut", top=0, left=0, height=512, width=512))
    for i in range(24):
        whole.rotate(15 * i).save(tmp_path / f"{i:02d}.webp", quality=80)
    script = f"""
import glob, gc, gpucore
paths = sorted(glob.glob({str(tmp_path)!r} + "/*.webp"))
files = gpucore.data.read_files(paths, [i % 2 for i in range(len(paths))], threads=2)
for _ in range(2):
    loader = gpucore.DataLoader(files, batch_size=8, shuffle=False, device="cpu", cache="none")
    next(iter(loader))
    del loader
    gc.collect()
print("dropped")
"""
    done = forked_python.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "dropped", done.stderr[-2000:]
