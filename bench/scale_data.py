"""The 224-px benchmark's data, made offline, deterministically, and cached (python -m bench scale reads it):

- photos: an ImageFolder (train/ and val/, one subfolder per class) of distinct JPEGs (quality 90) whose sides
  are drawn in [--min-size, --max-size] pixels. Each is a random crop (a share of 10-100% of the area, aspect 3/4
  to 4/3), scaled and perhaps mirrored, of one of the real photographs installed packages ship: scikit-image's
  skimage/data (astronaut, chelsea, coffee, hubble_deep_field, ihc, motorcycle_left, retina, rocket) and
  scikit-learn's china.jpg and flower.jpg. The class is the source photograph (10 classes), so the labels are
  learnable and decoding costs what it costs on real photos.
- fashion_mnist_224: the real Fashion-MNIST (gpucore's reader finds it: $GPUCORE_FASHION_MNIST,
  /usr/share/datasets/fashion-mnist, ...) upscaled (bilinear) to 224 x 224 RGB JPEGs with its real labels, the
  test images as val/.

    python bench/scale_data.py photos [--images 2000] [--val-images 200] [--min-size 256] [--max-size 500]
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


def make_photos(images: int = 2000, val_images: int = 200, min_size: int = 256, max_size: int = 500, seed: int = 0,
                cache_dir: str = DEFAULT_CACHE) -> str:
    """The photo ImageFolder (made once; see the module's docstring): its root, holding train/ and val/."""
    if not 0 < min_size <= max_size:
        raise ValueError(f"sizes must satisfy 0 < min_size <= max_size, got {min_size}, {max_size}")
    root = os.path.join(cache_dir, f"photos-{images}-{val_images}-{min_size}-{max_size}-seed{seed}")

    def write(folder):
        photos = source_photos()
        rng = np.random.default_rng(seed)
        for split, count in (("train", images), ("val", val_images)):
            for index in range(count):
                name, photo = photos[index % len(photos)]
                directory = os.path.join(folder, split, name)
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, f"{index:06d}.jpg"), "wb") as handle:
                    handle.write(_jpeg(photo_crop(photo, rng, min_size, max_size)))

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
                directory = os.path.join(folder, split, f"{label}-{FASHION_CLASSES[label]}")
                os.makedirs(directory, exist_ok=True)
                picture = Image.fromarray(image, mode="L").resize((size, size), Image.BILINEAR).convert("RGB")
                with open(os.path.join(directory, f"{index:06d}.jpg"), "wb") as handle:
                    handle.write(_jpeg(picture))

    return _build(root, write)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["photos", "fashion_mnist_224"])
    parser.add_argument("--images", type=int, help="training images (default: photos 2000, fashion_mnist_224 6000)")
    parser.add_argument("--val-images", type=int, help="validation images (default: photos 200, "
                        "fashion_mnist_224 1000)")
    parser.add_argument("--min-size", type=int, default=256, help="photos: smallest side in pixels")
    parser.add_argument("--max-size", type=int, default=500, help="photos: largest side in pixels")
    parser.add_argument("--seed", type=int, default=0, help="photos: the crops' seed")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    if args.which == "photos":
        root = make_photos(args.images or 2000, 200 if args.val_images is None else args.val_images, args.min_size,
                           args.max_size, args.seed, args.cache_dir)
    else:
        root = make_fashion_mnist_224(args.images or 6000, 1000 if args.val_images is None else args.val_images,
                                      cache_dir=args.cache_dir)
    print(root)
    return root


if __name__ == "__main__":
    main(sys.argv[1:])
