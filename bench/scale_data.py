"""The 224-px benchmark's data, made offline, deterministically, and cached (python -m bench scale reads it):

- photos: an ImageFolder (train/ and val/, one subfolder per class) of distinct JPEGs (quality 90) whose sides
  are drawn in [--min-size, --max-size] pixels. Each is a random crop (a share of 10-100% of the area, aspect 3/4
  to 4/3), scaled and perhaps mirrored, of one of the real photographs installed packages ship: scikit-image's
  skimage/data (astronaut, chelsea, coffee, hubble_deep_field, ihc, motorcycle_left, retina, rocket) and
  scikit-learn's china.jpg and flower.jpg. The class is the source photograph (10 classes), so the labels are
  learnable and decoding costs what it costs on real photos.
- segmentation: the same crops (the same seed gives the photo set's crops), as images/NNNNNN.jpg (quality 90) beside
  masks/NNNNNN.png (grey, lossless, the image's size) under train/ and val/, the layout
  gpucore.data.read_segmentation pairs by file name. A mask's class ids (0 to SEGMENTATION_CLASSES - 1) are the
  crop's luminance after a light blur (Gaussian, radius 2) cut into equal bands (0-63, 64-127, 128-191, 192-255):
  regions that follow the photo's own shapes and edges, which a segmentation model can learn from the pixels.
- camera: photos as cameras take them, one ImageFolder (train/, a subfolder per source photograph) of 12-megapixel
  JPEGs (4000 x 3000, landscape or portrait in turn; quality 90, 4:2:0): each real photograph upscaled (bicubic) with
  sensor-like noise (Gaussian, sigma 4 levels, on every pixel and channel), 1.7-2.4 MB each.
- fashion_mnist_224: the real Fashion-MNIST (gpucore's reader finds it: $GPUCORE_FASHION_MNIST,
  /usr/share/datasets/fashion-mnist, ...) upscaled (bilinear) to 224 x 224 RGB JPEGs with its real labels, the
  test images as val/.

    python bench/scale_data.py photos [--images 2000] [--val-images 200] [--min-size 256] [--max-size 500]
    python bench/scale_data.py segmentation [--images 2000] [--val-images 200] [--min-size 256] [--max-size 500]
    python bench/scale_data.py camera [--images 48]
    python bench/scale_data.py fashion_mnist_224 [--images 6000] [--val-images 1000]
    [--cache-dir ~/.cache/gpucore/bench] [--seed 0]

A set lives in the cache dir under a name made of its arguments and is made once (a file named COMPLETE marks a
finished one); the same arguments give the same bytes.
"""
import argparse
import io
import os
import shutil
import sys

import numpy as np

DEFAULT_CACHE = os.path.join(os.path.expanduser(os.environ.get("XDG_CACHE_HOME", "~/.cache")), "gpucore", "bench")
SKIMAGE_PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png",
                  "motorcycle_left.png", "retina.jpg", "rocket.jpg"]
SKLEARN_PHOTOS = ["china.jpg", "flower.jpg"]
FASHION_CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle-boot"]
JPEG_QUALITY = 90
SEGMENTATION_CLASSES = 4  # luminance bands of a segmentation mask
MASK_BLUR_RADIUS = 2  # pixels: bands follow regions, not JPEG-scale texture


def source_photos():
    """(name, H x W x 3 uint8 array) of the real photographs scikit-image and scikit-learn install. Raises
    ImportError naming the package that is missing."""
    from PIL import Image

    try:
        import skimage
    except ImportError as exc:
        raise ImportError("the photo set needs scikit-image (pip install scikit-image): its skimage/data photos") from exc
    try:
        import sklearn
    except ImportError as exc:
        raise ImportError("the photo set needs scikit-learn (pip install scikit-learn): china.jpg, flower.jpg") from exc
    folders = [(os.path.join(os.path.dirname(skimage.__file__), "data"), SKIMAGE_PHOTOS),
               (os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images"), SKLEARN_PHOTOS)]
    photos = []
    for folder, names in folders:
        for name in names:
            with Image.open(os.path.join(folder, name)) as picture:
                photos.append((os.path.splitext(name)[0], np.asarray(picture.convert("RGB"))))
    return photos


def _jpeg(picture) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def _finished(root: str) -> bool:
    return os.path.exists(os.path.join(root, "COMPLETE"))


def _build(root: str, write) -> str:
    """Runs write(tmp) into a fresh folder beside `root`, then moves it into place: a crashed run leaves no
    half-made set behind that a later run would take for a finished one."""
    if _finished(root):
        return root
    partial = root + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(partial)
    write(partial)
    with open(os.path.join(partial, "COMPLETE"), "w") as handle:
        handle.write("made by bench/scale_data.py\n")
    os.replace(partial, root)
    return root


def photo_crop(photo: np.ndarray, rng: np.random.Generator, min_size: int, max_size: int):
    """One random crop of `photo` (10-100% of its area, aspect 3/4 to 4/3 where it fits), resized (bicubic) to
    sides drawn in [min_size, max_size], mirrored with probability 1/2: a PIL image."""
    from PIL import Image

    height, width = photo.shape[:2]
    area = height * width * rng.uniform(0.1, 1.0)
    aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    h = int(min(height, round(np.sqrt(area / aspect))))
    w = int(min(width, round(np.sqrt(area * aspect))))
    top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    out_h, out_w = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
    picture = Image.fromarray(photo[top:top + h, left:left + w]).resize((out_w, out_h), Image.BICUBIC)
    if rng.random() < 0.5:
        picture = picture.transpose(Image.FLIP_LEFT_RIGHT)
    return picture


def _check_sizes(min_size: int, max_size: int) -> None:
    if not 0 < min_size <= max_size:
        raise ValueError(f"sizes must satisfy 0 < min_size <= max_size, got {min_size}, {max_size}")


def _photo_crops(images: int, val_images: int, min_size: int, max_size: int, seed: int):
    """(split, index, source photo's name, PIL crop) for `images` train/ and `val_images` val/ crops, the source
    photos taken in turn: what the photo and segmentation sets are made of (one seed, one sequence of crops)."""
    photos = source_photos()
    rng = np.random.default_rng(seed)
    for split, count in (("train", images), ("val", val_images)):
        for index in range(count):
            name, photo = photos[index % len(photos)]
            yield split, index, name, photo_crop(photo, rng, min_size, max_size)


def make_photos(images: int = 2000, val_images: int = 200, min_size: int = 256, max_size: int = 500, seed: int = 0,
                cache_dir: str = DEFAULT_CACHE) -> str:
    """The photo ImageFolder (made once; see the module's docstring): its root, holding train/ and val/."""
    _check_sizes(min_size, max_size)
    root = os.path.join(cache_dir, f"photos-{images}-{val_images}-{min_size}-{max_size}-seed{seed}")

    def write(folder):
        for split, index, name, picture in _photo_crops(images, val_images, min_size, max_size, seed):
            _write(os.path.join(folder, split, name, f"{index:06d}.jpg"), _jpeg(picture))

    return _build(root, write)


CAMERA_SIZE = (3000, 4000)  # height x width of a 12-megapixel landscape photo
CAMERA_NOISE = 4.0  # the sensor noise's standard deviation, in levels of 255


def make_camera(images: int = 48, seed: int = 0, cache_dir: str = DEFAULT_CACHE, size=CAMERA_SIZE) -> str:
    """The camera-sized photo ImageFolder (made once; see the module's docstring): its root, holding train/. `size`:
    (height, width) of the landscape photos (the portrait ones are turned)."""
    from PIL import Image

    suffix = "" if tuple(size) == CAMERA_SIZE else f"-{size[0]}x{size[1]}"
    root = os.path.join(cache_dir, f"camera-{images}-seed{seed}{suffix}")

    def write(folder):
        photos = source_photos()
        rng = np.random.default_rng(seed)
        for index in range(images):
            name, photo = photos[index % len(photos)]
            height, width = tuple(size) if index % 2 == 0 else tuple(size)[::-1]
            large = np.asarray(Image.fromarray(photo).resize((width, height), Image.BICUBIC), dtype=np.float32)
            large += rng.normal(0.0, CAMERA_NOISE, large.shape).astype(np.float32)
            picture = Image.fromarray(np.clip(large.round(), 0, 255).astype(np.uint8))
            _write(os.path.join(folder, "train", name, f"{index:06d}.jpg"), _jpeg(picture))

    return _build(root, write)


def luminance_mask(picture):
    """The segmentation mask of a PIL RGB image: its luminance (ITU-R 601, PIL's "L"), blurred, cut into
    SEGMENTATION_CLASSES equal bands; a grey PIL image of class ids, the picture's size."""
    from PIL import Image, ImageFilter

    luminance = np.asarray(picture.convert("L").filter(ImageFilter.GaussianBlur(MASK_BLUR_RADIUS)))
    classes = (luminance.astype(np.uint16) * SEGMENTATION_CLASSES // 256).astype(np.uint8)
    return Image.fromarray(classes, mode="L")


def make_segmentation(images: int = 2000, val_images: int = 200, min_size: int = 256, max_size: int = 500,
                      seed: int = 0, cache_dir: str = DEFAULT_CACHE) -> str:
    """The segmentation set (made once; see the module's docstring): its root, holding train/ and val/, each with
    images/ (JPEG) and masks/ (PNG) paired by file name."""
    _check_sizes(min_size, max_size)
    root = os.path.join(cache_dir, f"segmentation-{images}-{val_images}-{min_size}-{max_size}-seed{seed}")

    def write(folder):
        for split, index, _, picture in _photo_crops(images, val_images, min_size, max_size, seed):
            _write(os.path.join(folder, split, "images", f"{index:06d}.jpg"), _jpeg(picture))
            mask = io.BytesIO()
            luminance_mask(picture).save(mask, format="PNG")  # lossless: the class ids exactly
            _write(os.path.join(folder, split, "masks", f"{index:06d}.png"), mask.getvalue())

    return _build(root, write)


def make_fashion_mnist_224(images: int = 6000, val_images: int = 1000, size: int = 224,
                           cache_dir: str = DEFAULT_CACHE) -> str:
    """Fashion-MNIST as size x size RGB JPEGs with its real labels (made once): its root, holding train/ (the first
    `images` training images) and val/ (the first `val_images` test images). Raises FileNotFoundError where
    gpucore's reader does not find the real files."""
    from PIL import Image

    from gpucore.data.builtin import fashion_mnist, find_fashion_mnist

    if find_fashion_mnist() is None:
        raise FileNotFoundError("Fashion-MNIST's IDX files were not found (gpucore looks in $GPUCORE_FASHION_MNIST, "
                                "/usr/share/datasets/fashion-mnist and ~/.cache/gpucore/fashion-mnist)")
    root = os.path.join(cache_dir, f"fashion_mnist_{size}-{images}-{val_images}")

    def write(folder):
        splits = fashion_mnist(train_size=images, val_size=val_images)
        for split, (pixels, labels) in zip(("train", "val"), splits):
            pixels = pixels.reshape(len(labels), 28, 28).numpy()
            for index, (image, label) in enumerate(zip(pixels, labels.tolist())):
                picture = Image.fromarray(image, mode="L").resize((size, size), Image.BILINEAR).convert("RGB")
                _write(os.path.join(folder, split, f"{label}-{FASHION_CLASSES[label]}", f"{index:06d}.jpg"),
                       _jpeg(picture))

    return _build(root, write)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["photos", "segmentation", "camera", "fashion_mnist_224"])
    parser.add_argument("--images", type=int, help="training images (default: photos and segmentation 2000, "
                        "camera 48, fashion_mnist_224 6000)")
    parser.add_argument("--val-images", type=int, help="validation images (default: photos and segmentation 200, "
                        "fashion_mnist_224 1000)")
    parser.add_argument("--min-size", type=int, default=256, help="photos, segmentation: smallest side in pixels")
    parser.add_argument("--max-size", type=int, default=500, help="photos, segmentation: largest side in pixels")
    parser.add_argument("--seed", type=int, default=0, help="photos, segmentation: the crops' seed")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    if args.which in ("photos", "segmentation"):
        make = make_photos if args.which == "photos" else make_segmentation
        root = make(args.images or 2000, 200 if args.val_images is None else args.val_images, args.min_size,
                    args.max_size, args.seed, args.cache_dir)
    elif args.which == "camera":
        root = make_camera(args.images or 48, args.seed, args.cache_dir)
    else:
        root = make_fashion_mnist_224(args.images or 6000, 1000 if args.val_images is None else args.val_images,
                                      cache_dir=args.cache_dir)
    print(root)
    return root


if __name__ == "__main__":
    main(sys.argv[1:])
