"""Every image decoded as Pillow and torchvision give it, compared to the value on real photo crops: 16-bit PNGs
(torchvision's decode_image + ToDtype(uint8, scale=True)), CMYK and YCCK JPEGs (Pillow's convert("RGB")), the eight
EXIF orientations of JPEG and PNG (PIL.ImageOps.exif_transpose), and masks as class ids (a palette's indices, grey
values; JPEG and colour masks refused); in memory and streamed."""
import struct
import zlib

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data
from conftest import require

Image = require("PIL.Image")
ImageOps = require("PIL.ImageOps")


def photo(name="astronaut", top=40, left=150, height=36, width=52):
    """A crop of a real photo, uint8 H x W x 3: scikit-image's sample photos by name, or scikit-learn's china.jpg."""
    if name == "china":
        image = require("sklearn.datasets").load_sample_image("china.jpg")
    else:
        image = getattr(require("skimage.data"), name)()
    return np.ascontiguousarray(image[top:top + height, left:left + width])


def ours(path, channels=3, **options):
    """gpucore's decode, H x W x channels."""
    return _C.decode_image(str(path), channels, **options).numpy()


def pillow(path, mode="RGB", upright=True):
    """Pillow's decode, converted to `mode`, turned upright by its EXIF orientation unless `upright` is False; H x W x
    channels."""
    with Image.open(path) as image:
        converted = (ImageOps.exif_transpose(image) if upright else image).convert(mode)
        pixels = np.asarray(converted)
    return pixels.reshape(*pixels.shape[:2], -1)


def luma(rgb):
    """Pillow's convert("L") of uint8 RGB pixels (its L24 weights, in integers)."""
    rgb = rgb.astype(np.uint32)
    return ((rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16).astype(np.uint8)


def png_bytes(samples, colour_type, bit_depth=8):
    """A PNG of `samples` (H x W x C integers) as they are, for layouts neither Pillow nor OpenCV write (16-bit grey +
    alpha, grey of 1, 2 or 4 bits): IHDR, one IDAT of unfiltered rows, IEND."""
    height, width = samples.shape[:2]
    if bit_depth == 16:
        rows = samples.astype(">u2").reshape(height, -1).view(np.uint8)
    elif bit_depth == 8:
        rows = samples.astype(np.uint8).reshape(height, -1)
    else:  # packed, the first pixel in the high bits
        per_byte = 8 // bit_depth
        padded = np.zeros((height, -(-width // per_byte) * per_byte), np.uint8)
        padded[:, :width] = samples.reshape(height, width)
        shifts = (8 - bit_depth * (np.arange(per_byte) + 1)).astype(np.uint8)
        rows = (padded.reshape(height, -1, per_byte) << shifts).sum(-1).astype(np.uint8)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def to_uint8_as_torchvision(samples):
    """torchvision's v2.ToDtype(torch.uint8, scale=True) of uint16 samples, as its decode_image gives a 16-bit PNG."""
    functional = require("torchvision.transforms.v2.functional")
    as_uint16 = torch.from_numpy(samples.astype(np.int32)).to(torch.uint16)
    return functional.to_dtype(as_uint16, torch.uint8, scale=True).numpy()


# ---- 16-bit PNG ------------------------------------------------------------------------------------------------------

def test_16_bit_pngs_read_as_torchvision_scales_them_without_gamma(tmp_path):
    cv2 = require("cv2")
    rng = np.random.default_rng(0)
    rgb8, alpha8 = photo("coffee"), photo("chelsea")[..., 1:2]
    # each 8-bit value in the high byte and noise in the low one: the high byte is the answer, not a rounding
    rgb16 = rgb8.astype(np.uint16) * 256 + rng.integers(0, 256, rgb8.shape, dtype=np.uint16)
    alpha16 = alpha8.astype(np.uint16) * 256 + 255
    grey16 = rgb16[..., :1]
    cv2.imwrite(str(tmp_path / "grey.png"), grey16[..., 0])
    cv2.imwrite(str(tmp_path / "rgb.png"), rgb16[..., ::-1])
    cv2.imwrite(str(tmp_path / "rgba.png"), np.concatenate([rgb16[..., ::-1], alpha16], -1))
    (tmp_path / "grey_alpha.png").write_bytes(png_bytes(np.concatenate([grey16, alpha16], -1), 4, 16))
    for name, stored in (("grey", grey16), ("grey_alpha", grey16), ("rgb", rgb16), ("rgba", rgb16)):
        # what torchvision decodes (cv2 reads the same uint16 samples back; grey + alpha as BGRA), scaled as its
        # ToDtype does
        read_back = cv2.imread(str(tmp_path / f"{name}.png"), cv2.IMREAD_UNCHANGED)
        samples = read_back[..., None] if read_back.ndim == 2 else read_back[..., 2::-1][..., :stored.shape[-1]]
        assert np.array_equal(samples, stored)
        expected = to_uint8_as_torchvision(samples)
        assert np.array_equal(expected, stored >> 8) and not np.array_equal(expected, stored // 257)
        rgb = np.repeat(expected, 3, -1) if expected.shape[-1] == 1 else expected
        np.testing.assert_array_equal(ours(tmp_path / f"{name}.png", 3), rgb, err_msg=name)
        np.testing.assert_array_equal(ours(tmp_path / f"{name}.png", 1)[..., 0], luma(rgb), err_msg=name)
    cv2.imwrite(str(tmp_path / "flat.png"), np.full((2, 3), 100 * 257, np.uint16))
    assert (ours(tmp_path / "flat.png", 1) == 100).all()  # the example: not 167, brightened by a gamma curve


def test_low_bit_grey_palette_with_transparency_and_gamma_tagged_pngs_read_as_pillow_does(tmp_path):
    grey = luma(photo("astronaut"))
    for bits in (1, 2, 4):
        (tmp_path / f"grey{bits}.png").write_bytes(png_bytes(grey[..., None] >> (8 - bits), 0, bits))
    PngImagePlugin = require("PIL.PngImagePlugin")
    tagged = PngImagePlugin.PngInfo()
    tagged.add(b"gAMA", struct.pack(">I", 100000))  # gamma 1.0: libpng's simplified reader would correct it
    Image.fromarray(photo("astronaut")).save(tmp_path / "gamma.png", pnginfo=tagged)
    Image.fromarray(photo("astronaut")).quantize(16).save(tmp_path / "palette4.png", bits=4, transparency=3)
    for name in ("grey1", "grey2", "grey4", "gamma", "palette4"):
        for channels, mode in ((3, "RGB"), (1, "L")):
            path = tmp_path / f"{name}.png"
            np.testing.assert_array_equal(ours(path, channels), pillow(path, mode), err_msg=f"{name}, {channels}")


# ---- CMYK and YCCK JPEG ----------------------------------------------------------------------------------------------

def test_cmyk_and_ycck_jpegs_read_as_pillow_converts_them(tmp_path):
    rgb, black = photo("coffee", top=100, left=200), luma(photo("chelsea")) // 2
    cmyk = np.dstack([255 - rgb, black])
    Image.fromarray(cmyk, "CMYK").save(tmp_path / "cmyk.jpg", quality=90)  # Adobe's inverted samples, as Photoshop's
    written = (tmp_path / "cmyk.jpg").read_bytes()
    adobe = written.index(b"Adobe") - 4  # the marker (FF EE), its length, then "Adobe", version, flags, transform
    length = struct.unpack(">H", written[adobe + 2:adobe + 4])[0]
    assert written[adobe:adobe + 2] == b"\xff\xee" and written[adobe + 15] == 0  # transform 0: CMYK as stored
    # without the Adobe marker (libjpeg guesses CMYK from the four components); with its transform set to 2, YCCK
    (tmp_path / "plain.jpg").write_bytes(written[:adobe] + written[adobe + 2 + length:])
    (tmp_path / "ycck.jpg").write_bytes(written[:adobe + 15] + b"\x02" + written[adobe + 16:])
    for name in ("cmyk", "plain", "ycck"):
        with Image.open(tmp_path / f"{name}.jpg") as image:
            assert image.mode == "CMYK"
        for channels, mode in ((3, "RGB"), (1, "L")):
            np.testing.assert_array_equal(ours(tmp_path / f"{name}.jpg", channels),
                                          pillow(tmp_path / f"{name}.jpg", mode), err_msg=f"{name}, {mode}")
    assert np.abs(ours(tmp_path / "cmyk.jpg").astype(int) - rgb * (1 - black[..., None] / 255)).mean() < 3
    assert not np.array_equal(ours(tmp_path / "ycck.jpg"), ours(tmp_path / "cmyk.jpg"))  # the YCC transform ran


# ---- EXIF orientation ------------------------------------------------------------------------------------------------

# Each orientation as numpy turns the stored pixels upright (the EXIF specification's table).
UPRIGHT = {1: lambda a: a, 2: np.fliplr, 3: lambda a: np.rot90(a, 2), 4: np.flipud,
           5: lambda a: np.swapaxes(a, 0, 1), 6: lambda a: np.rot90(a, -1),
           7: lambda a: np.rot90(np.swapaxes(a, 0, 1), 2), 8: lambda a: np.rot90(a, 1)}


def save_oriented(path, pixels, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels).save(path, exif=exif, **({"quality": 92} if path.suffix == ".jpg" else {}))


@pytest.mark.parametrize("suffix", [".jpg", ".png"])
def test_each_exif_orientation_turns_the_image_as_pillow_does(tmp_path, suffix):
    pixels = photo("chelsea", top=60, left=120)
    for orientation in range(1, 9):
        path = tmp_path / f"o{orientation}{suffix}"
        save_oriented(path, pixels, orientation)
        stored = pillow(path, upright=False)
        upright = ours(path)
        np.testing.assert_array_equal(upright, pillow(path), err_msg=f"orientation {orientation}")
        np.testing.assert_array_equal(upright, UPRIGHT[orientation](stored), err_msg=f"orientation {orientation}")
        # grey: Pillow's convert("L") of a PNG; a JPEG's luminance as libjpeg decodes it (torchvision's
        # ImageReadMode.GRAY), which Pillow's L of the decoded RGB misses by 1 here and there
        grey = pillow(path, "L") if suffix == ".png" else UPRIGHT[orientation](ours(path, 1, exif_orientation=False))
        np.testing.assert_array_equal(ours(path, 1), grey, err_msg=f"orientation {orientation}, grey")
        np.testing.assert_array_equal(ours(path, exif_orientation=False), stored)
        assert upright.shape[:2] == ((52, 36) if orientation >= 5 else (36, 52))


def test_exif_after_the_png_image_data_and_broken_exif(tmp_path):
    pixels = photo("astronaut")
    save_oriented(tmp_path / "before.png", pixels, 6)
    written = (tmp_path / "before.png").read_bytes()
    start = written.index(b"eXIf") - 4
    exif_chunk = written[start:start + 12 + struct.unpack(">I", written[start:start + 4])[0]]
    without = written.replace(exif_chunk, b"")
    (tmp_path / "after.png").write_bytes(without[:-12] + exif_chunk + without[-12:])  # just before IEND
    np.testing.assert_array_equal(ours(tmp_path / "after.png"), pillow(tmp_path / "after.png"))
    np.testing.assert_array_equal(ours(tmp_path / "after.png"), np.rot90(pixels, -1))
    # EXIF data that points outside itself, claims more entries than it holds, or an orientation outside 1 to 8:
    # read as stored, no crash
    for index, exif in enumerate([b"Exif\0\0II*\0\xff\xff\xff\x7f", b"Exif\0\0MM\0*\0\0\0\x08\xff\xff\x01\x12",
                                  b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x09\0\0\0"]):
        Image.fromarray(pixels).save(tmp_path / f"broken{index}.jpg", exif=exif, quality=92)
        np.testing.assert_array_equal(ours(tmp_path / f"broken{index}.jpg"),
                                      pillow(tmp_path / f"broken{index}.jpg", upright=False))


def oriented_files(folder, orientations=(6, 8, 5, 7)):
    """Photo crops (36 x 52 as stored, 52 x 36 upright) with the given orientations, JPEG and PNG in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, orientation in enumerate(orientations):
        paths.append(folder / f"{i}{'.jpg' if i % 2 else '.png'}")
        save_oriented(paths[-1], photo("china", top=100 + 30 * i, left=200), orientation)
    return [str(p) for p in paths]


def first_batch(files, **options):
    """The first batch of `files` (ImageFiles) as gpucore.DataLoader serves it, back in uint8 N x H x W x C."""
    loader = gpucore.DataLoader(files, batch_size=len(files), shuffle=False, device="cpu", normalize=False, **options)
    inputs, targets = next(iter(loader))
    return (inputs * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy(), targets


def test_oriented_images_read_upright_in_memory_at_their_own_sizes_and_streamed(tmp_path):
    paths = oriented_files(tmp_path / "photos")
    upright = np.stack([pillow(p) for p in paths])
    stored = np.stack([pillow(p, upright=False) for p in paths])
    files = data.read_files(paths, [0, 1, 0, 1])
    assert files.image_shape() == (3, 52, 36)  # the upright size, read before any decoding
    np.testing.assert_array_equal(files.inputs.permute(0, 2, 3, 1).numpy(), upright)
    np.testing.assert_array_equal(np.stack([i.numpy() for i in data.read_files(paths, [0] * 4).images_at_own_size()]),
                                  upright)
    np.testing.assert_array_equal(first_batch(data.read_files(paths, [0] * 4), cache="none")[0], upright)
    as_stored = data.read_files(paths, [0, 1, 0, 1], exif_orientation=False)
    assert as_stored.image_shape() == (3, 36, 52)
    np.testing.assert_array_equal(first_batch(as_stored, cache="none")[0], stored)
    part = as_stored.subset([2, 3])
    assert not part.exif_orientation
    np.testing.assert_array_equal(part.inputs.permute(0, 2, 3, 1).numpy(), stored[2:])
    # an upright 52 x 36 and a stored 52 x 36 (orientation 1) are one size; as stored they are not
    mixed = oriented_files(tmp_path / "mixed", orientations=(6, 1))
    (tmp_path / "mixed" / "1.jpg").unlink()
    Image.fromarray(np.swapaxes(photo("china"), 0, 1).copy()).save(tmp_path / "mixed" / "1.jpg", quality=92)
    assert data.read_files(mixed, [0, 1]).inputs.shape == (2, 3, 52, 36)
    with pytest.raises(gpucore.ConfigError, match=r"1.jpg' is 52x36 but .*0.png' is 36x52"):
        data.read_files(mixed, [0, 1], exif_orientation=False).inputs  # noqa: B018


def test_exif_orientation_is_a_data_kwargs_key_of_image_folders(tmp_path):
    from gpucore.data import builtin

    for name in ("a", "b"):
        oriented_files(tmp_path / "folder" / name, orientations=(6, 6))
    upright, _ = builtin.load_data(str(tmp_path / "folder"), {}, 0.0, 0)
    as_stored, _ = builtin.load_data(str(tmp_path / "folder"), {"exif_orientation": False}, 0.0, 0)
    assert upright.image_shape() == (3, 52, 36) and as_stored.image_shape() == (3, 36, 52)
    with pytest.raises(gpucore.ConfigError, match=r"exif_orientation must be true or false, got 'no'"):
        data.read_image_folder(str(tmp_path / "folder"), exif_orientation="no")



def test_predict_and_gradcam_read_files_as_the_models_run_did(tmp_path):
    from gpucore.data.input_files import read_input_images
    from gpucore.evaluation.load import LoadedModel

    oriented_files(tmp_path / "inputs", orientations=(6,))
    upright = read_input_images(str(tmp_path / "inputs"), 3, max_resolution=0)
    stored = read_input_images(str(tmp_path / "inputs"), 3, max_resolution=0, exif_orientation=False)
    assert upright.images[0].shape == (3, 52, 36) and stored.images[0].shape == (3, 36, 52)
    assert torch.equal(upright.images[0], torch.rot90(stored.images[0], -1, (1, 2)))  # 6: turned 90 degrees clockwise
    for kwargs, expected in (({}, True), ({"exif_orientation": False}, False)):
        run = gpucore.config.load_config({"data_kwargs": kwargs})
        model = LoadedModel(torch.nn.Identity(), run, None, None, [3, 0, 0], torch.device("cpu"), "c.pt")
        assert model.exif_orientation is expected


# ---- masks -----------------------------------------------------------------------------------------------------------

def voc_palette():
    """PASCAL VOC's colour map (class i's colour from its bits), as its palette PNG masks carry it."""
    colours = []
    for index in range(256):
        rgb = [0, 0, 0]
        for shift in range(8):
            for channel in range(3):
                rgb[channel] |= ((index >> (3 * shift + channel)) & 1) << (7 - shift)
        colours += rgb
    return colours


def segmentation_set(root, mask_for, count=4, classes=3):
    """Photo crops in root/images (JPEG) and a mask each in root/masks written by mask_for(path, class ids), the class
    ids following the photo's brightness (0 to classes - 1). Returns the folders and the class ids."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    ids = []
    for i in range(count):
        pixels = photo("coffee", top=50 + 40 * i, left=100 + 50 * i)
        Image.fromarray(pixels).save(root / "images" / f"{i}.jpg", quality=92)
        ids.append((luma(pixels).astype(int) * classes // 256).astype(np.uint8))
        mask_for(root / "masks" / f"{i}.png", ids[-1])
    return str(root / "images"), str(root / "masks"), np.stack(ids)


def palette_mask(path, ids):
    mask = Image.fromarray(ids, "P")
    mask.putpalette(voc_palette())
    mask.save(path)


def test_palette_masks_read_as_their_indices_in_memory_and_streamed(tmp_path):
    images, masks, ids = segmentation_set(tmp_path, palette_mask)
    assert np.array_equal(np.asarray(Image.open(f"{masks}/0.png")), ids[0])  # Pillow's indices
    assert Image.open(f"{masks}/0.png").getpalette()[:9] == [0, 0, 0, 128, 0, 0, 0, 128, 0]  # VOC's classes 0 to 2
    assert set(np.unique(ids)) == {0, 1, 2}
    np.testing.assert_array_equal(data.read_segmentation(images, masks).targets.numpy(), ids)
    _, targets = first_batch(data.read_segmentation(images, masks), cache="none")
    np.testing.assert_array_equal(targets.numpy(), ids)
    resized = data.read_segmentation(images, masks, size=(18, 26))
    assert set(np.unique(resized.targets.numpy())) == {0, 1, 2}  # nearest: indices, never blended


def test_grey_one_bit_and_16_bit_masks_read_as_their_values(tmp_path):
    def grey_kinds(path, ids):
        name = path.stem
        if name == "0":
            Image.fromarray(ids).save(path)  # grey values
        elif name == "1":
            Image.fromarray(ids > 0).save(path)  # mode "1": 0 and 255; in a set of other classes 255 is void
        elif name == "2":
            path.write_bytes(png_bytes(ids[..., None].astype(np.uint16), 0, 16))  # 16-bit, all <= 255
        else:
            Image.fromarray(np.repeat(ids[..., None], 3, -1)).save(path)  # grey stored as RGB
    images, masks, ids = segmentation_set(tmp_path, grey_kinds)
    expected = ids.copy()
    expected[1] = np.where(ids[1] > 0, 255, 0)  # the set holds classes 1 and 2: 255 is void (mask_table)
    np.testing.assert_array_equal(data.read_segmentation(images, masks).targets.numpy(), expected)
    np.testing.assert_array_equal(first_batch(data.read_segmentation(images, masks), cache="none")[1].numpy(),
                                  expected)
    (tmp_path / "masks" / "2.png").write_bytes(png_bytes(ids[2][..., None].astype(np.uint16) * 300, 0, 16))
    with pytest.raises(gpucore.ConfigError, match=r"mask '.*2.png' \(index 2\): is a 16-bit mask with value 300 "
                                                  r"\(row \d+, column \d+\); class ids must be 0 to 255"):
        data.read_segmentation(images, masks).targets  # noqa: B018


def test_jpeg_and_colour_masks_are_refused_naming_the_file(tmp_path):
    images, masks, ids = segmentation_set(tmp_path, palette_mask)
    Image.fromarray(ids[1] * 100).save(f"{masks}/1.jpg", quality=100)
    (tmp_path / "masks" / "1.png").unlink()
    for on_error in ("raise", "skip"):
        with pytest.raises(gpucore.ConfigError, match=r"mask '.*1.jpg': is a JPEG, which a segmentation mask cannot "
                                                      r"be: its lossy compression invents class ids .*save the masks "
                                                      r"as PNG"):
            data.read_segmentation(images, masks, on_error=on_error)
    (tmp_path / "masks" / "1.jpg").unlink()
    colour = np.stack([ids[1] * 100, ids[1] * 50, ids[1] * 100], -1)
    Image.fromarray(colour).save(f"{masks}/1.png")
    refused = r"1.png'( \(index 1\))?: is a colour \(RGB\) mask whose channels differ \(\d+, \d+, \d+ \(row \d+, column " \
              r"\d+\)\), so its pixels are not class ids; a segmentation mask must be a grey PNG of class ids or a " \
              r"palette PNG"
    with pytest.raises(gpucore.ConfigError, match="mask '.*" + refused):
        data.read_segmentation(images, masks).targets  # noqa: B018
    with pytest.raises(gpucore.ConfigError, match=refused):  # streamed: by the count of the masks' values, first
        first_batch(data.read_segmentation(images, masks), cache="none")
    skipped = data.read_segmentation(images, masks, on_error="skip")
    np.testing.assert_array_equal(skipped.targets.numpy(), ids[[0, 2, 3]])
    assert len(skipped.skipped) == 1 and "1.png: is a colour (RGB) mask" in skipped.skipped[0]


class TinySegmenter(torch.nn.Module):
    """Two convolutions: N x 3 x H x W -> N x 1 x H x W logits."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                          torch.nn.Conv2d(8, 1, 3, padding=1))

    def forward(self, x):
        return self.layers(x)


@pytest.mark.parametrize("cache", ["host", "none"])
def test_a_palette_mask_segmentation_set_trains(tmp_path, cache):
    """VOC-style masks: index 1 is drawn dark red (128, 0, 0), which read as luminance was class 38, a Dice + BCE
    target that drove the loss below 0."""
    images, masks, ids = segmentation_set(tmp_path / "data", palette_mask, count=8, classes=2)
    assert set(np.unique(ids)) == {0, 1}
    torch.manual_seed(0)
    result = gpucore.train({"loss": "dice_bce", "epochs": 2, "batch_size": 4, "lr": 0.01, "device": "cpu",
                            "precision": "32", "cache": cache, "val_fraction": 0.25, "run_dir": str(tmp_path / "run"),
                            "progress": False, "report": False},
                           model=TinySegmenter(), train_data=data.read_segmentation(images, masks))
    metrics = result.history[-1]
    assert 0 < metrics["train_loss"] < 3 and 0 < metrics["val_loss"] < 3
    assert metrics["val_accuracy"] > 0.85  # the classes follow the photo's brightness: learnt in two epochs
