"""The CPU kernels' fast paths give the same values as the plain ones: a horizontal flip moved past color
transforms into the fused augment pass, batch outputs whose memory is reused, and loops split over threads
(OpenMP) against one thread; the AVX2/AVX-512 clones of the hot loops hold their loops."""
import pathlib
import platform
import re
import shutil
import subprocess

import pytest
import torch

import gpucore

from gpucore import _C, transforms

from conftest import assert_states_equal, require
from test_transforms_color import REFERENCE, random_images

F = require("torchvision.transforms.v2.functional")


def as_uint8(batch):
    return (batch * 255).round().to(torch.uint8)


def apply_steps(image, codes, magnitudes):
    for code, magnitude in zip(codes, magnitudes):
        image = REFERENCE[code](image, magnitude)
    return image


@pytest.mark.kernel_build
@pytest.mark.parametrize("padding", [0, 2])
def test_a_flip_before_color_transforms_equals_torchvision_in_list_order(padding):
    # The flip runs in the final augment pass, after the color transforms that follow it in the list: they act on
    # each pixel or on whole-image statistics, so the result must be torchvision's, applied in list order.
    n, h, w = 12, 15, 18
    images = random_images(n, 3, h, w, seed=3)
    spec_list = [{"RandomCrop": {"size": [h, w], "padding": padding}}, {"RandomHorizontalFlip": {"p": 0.5}},
                 {"ColorJitter": {"brightness": 0.5, "contrast": 0.5, "saturation": 0.5, "hue": 0.1}},
                 {"RandomAdjustSharpness": {"sharpness_factor": 3, "p": 0.5}}, {"RandomEqualize": {"p": 0.5}}]
    specs = transforms.specs(spec_list)
    params = _C.sample_transforms(specs, n, h, w, 11)
    batch = as_uint8(_C.apply_transforms(images, specs, [], [], 11, dtype=torch.float32)[0])  # the fused path
    (offsets, _), (_, flips) = params[0], params[1]
    assert 0 < int(flips[:, 1].sum()) < n, "the seed should flip some samples and not others"
    for i in range(n):
        image = F.crop(F.pad(images[i], [padding]), int(offsets[i, 0]) + padding, int(offsets[i, 1]) + padding, h, w)
        image = F.horizontal_flip(image) if flips[i, 1] else image
        for codes, magnitudes in params[2:]:
            image = apply_steps(image, codes[i].tolist(), magnitudes[i].tolist())
        difference = (batch[i].int() - image.int()).abs().max().item()
        assert difference <= 1, f"sample {i}: off by {difference} levels"


@pytest.mark.kernel_build
def test_large_batch_outputs_reuse_freed_memory_with_the_right_values():
    # 40 x 3 x 224 x 224 float32 is 24 MB: above the size whose freed buffers the CPU kernels keep for reuse.
    generator = torch.Generator().manual_seed(0)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    offsets = torch.zeros(40, 2, dtype=torch.long)

    def augment(images, flips):
        return torch.ops.gpucore.augment(images, offsets, flips, mean, std, torch.float32)

    def expected(images, flips):
        scaled = (images.float() / 255 - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
        return torch.where(flips.view(-1, 1, 1, 1), scaled.flip(3), scaled)

    batches = [(torch.randint(0, 256, (40, 3, 224, 224), generator=generator, dtype=torch.uint8),
                torch.rand(40, generator=generator) < 0.5) for _ in range(3)]
    first = augment(*batches[0])
    address = first.data_ptr()
    del first
    second = augment(*batches[1])
    assert second.data_ptr() == address, "the freed batch's memory should be taken again"
    third = augment(*batches[2])  # while the second is alive: other memory, the second unchanged
    assert third.data_ptr() != second.data_ptr()
    torch.testing.assert_close(second, expected(*batches[1]), rtol=0, atol=2e-6)
    torch.testing.assert_close(third, expected(*batches[2]), rtol=0, atol=2e-6)


def test_threaded_kernels_equal_one_thread():
    images = random_images(16, 3, 40, 52, seed=8)
    generator = torch.Generator().manual_seed(2)
    codes = torch.stack([torch.randperm(4, generator=generator) + 1 for _ in range(16)])
    factors = torch.rand(16, 4, generator=generator, dtype=torch.float64) + 0.5  # brightness, contrast, saturation
    magnitudes = torch.where(codes == 4, factors - 1.0, factors)  # hue shifts within [-0.5, 0.5)
    boxes = torch.tensor([[3, 4, 30, 40], [0, 0, 40, 52]] * 8)
    flips = torch.rand(16, 2, generator=generator) < 0.5
    offsets = torch.randint(-5, 6, (16, 2), generator=generator)
    matrices = torch.tensor([[0.9, 0.2, 1.5, -0.1, 1.1, -2.0]] * 16)
    ops = torch.ops.gpucore

    def run_all():
        return [ops.color_ops(images, codes, magnitudes),
                ops.resized_crop(images, boxes, [33, 37], "bilinear", True),
                ops.crop(images, offsets, flips, [36, 50], [7.0]),
                ops.affine(images, matrices, "bilinear", [0.0]),
                ops.augment(images, offsets, flips[:, 1], [0.5, 0.4, 0.3], [0.2, 0.3, 0.4], torch.float32)]

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run_all()
        torch.set_num_threads(max(threads, 2))
        several = run_all()
    finally:
        torch.set_num_threads(threads)
    names = ["color_ops", "resized_crop", "crop", "affine", "augment"]
    assert_states_equal(dict(zip(names, several)), dict(zip(names, one)), label="threads changed the result")


@pytest.mark.skipif(platform.machine() != "x86_64" or not shutil.which("objdump"), reason="x86-64 clones, objdump")
def test_vector_clones_do_not_call_out_to_baseline_code():
    """Each function GCC clones for AVX2 and AVX-512 (vector_clones.h) has its loops inside each clone: a clone
    whose body calls or jumps to another gpucore function (route_row_float jumped to the baseline route_row;
    shift_image_hue called shift_hue per pixel) runs that function's baseline SSE2 code on every CPU."""
    library = pathlib.Path(gpucore.__file__).parent / "libgpucore_core.so"
    symbols = subprocess.run(["objdump", "-t", "-C", str(library)], capture_output=True, text=True, check=True).stdout
    assert "gpucore::" in symbols, (
        f"{library} is stripped (no .symtab): its clones cannot be found by name; pyproject.toml's install.strip = "
        "false keeps the symbols")
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(library)], capture_output=True,
                             text=True, check=True).stdout
    clones, escapes = 0, []
    for arch in ("arch_x86_64_v3", "arch_x86_64_v4"):
        for body in re.findall(rf"^[0-9a-f]+ <([^\n]*?\[clone \.{arch}\])>:\n(.*?)(?:\n\n|\Z)", listing,
                               re.M | re.S):
            name, code = body
            if "gpucore::" not in name:
                continue
            clones += 1
            for target in re.findall(r"\b(?:call|jmp)\s+[0-9a-f]+ <([^\n]*)>", code):
                target = re.sub(r"\+0x[0-9a-f]+$", "", target)
                if "gpucore::" in target and target != name and f"[clone .{arch}]" not in target:
                    escapes.append(f"{name} -> {target}")
    assert clones >= 10, f"only {clones} cloned gpucore functions found: has vector_clones.h stopped cloning?"
    assert not escapes, "clones leaving for baseline code:\n" + "\n".join(sorted(set(escapes)))
