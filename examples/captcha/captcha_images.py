"""The `captcha` package's images for the captcha example, generated on all cores and cached as an .npz.

A module of its own so that the generator processes can import what they run.
"""
import contextlib
import multiprocessing
import os
import random
import types

import numpy as np
import torch

import gpucore
from gpucore.data.synthetic import CAPTCHA_ALPHABET

CHUNK = 500  # images per generator task; each chunk has its own seed, so the set does not depend on the worker count


def _render(task):
    """One chunk of images from the captcha package; its draws (it uses `secrets`) come from the chunk's seed."""
    from captcha import image as captcha_image

    texts, seed = task
    rng = random.Random(seed)
    drawn = captcha_image.secrets
    captcha_image.secrets = types.SimpleNamespace(randbelow=rng.randrange, choice=rng.choice, randbits=rng.getrandbits)
    try:
        maker = captcha_image.ImageCaptcha(width=160, height=60)
        return np.stack([np.asarray(maker.generate_image(text).convert("L")) for text in texts])
    finally:
        captcha_image.secrets = drawn


def _generate(count: int, length: int, seed: int, render) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(CAPTCHA_ALPHABET), (count, length), generator=generator)
    texts = ["".join(CAPTCHA_ALPHABET[i] for i in row) for row in labels.tolist()]
    tasks = [(texts[start:start + CHUNK], seed * 1_000_003 + start) for start in range(0, count, CHUNK)]
    images = np.concatenate(list(render(_render, tasks))) if tasks else np.zeros((0, 60, 160), np.uint8)
    return images[:, None], labels.numpy()


def captcha_package_data(train_size: int, val_size: int, length: int, seed: int, cache_dir: str):
    """((x_train, y_train), (x_val, y_val)) from the captcha package, uint8 (N, 1, 60, 160) and (N, length) indices
    into CAPTCHA_ALPHABET, cached in `cache_dir`; None when the package is not installed."""
    try:
        import captcha.image  # noqa: F401
    except ImportError:
        return None
    path = os.path.join(os.path.expanduser(cache_dir), f"captcha-{train_size}-{val_size}-{length}-seed{seed}.npz")
    if not os.path.isfile(path):
        with contextlib.ExitStack() as stack:
            render = map  # a few chunks: here; more: on every core
            if train_size + val_size > 4 * CHUNK:
                render = stack.enter_context(multiprocessing.get_context("spawn").Pool(os.cpu_count())).map
            x_train, y_train = _generate(train_size, length, 2 * seed, render)
            x_val, y_val = _generate(val_size, length, 2 * seed + 1, render)  # held out: drawn apart from training
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(partial, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
        os.replace(partial, path)
    arrays = gpucore.data.read_npz(path, "x_train", "y_train"), gpucore.data.read_npz(path, "x_val", "y_val")
    return tuple((split.inputs, split.targets) for split in arrays)
