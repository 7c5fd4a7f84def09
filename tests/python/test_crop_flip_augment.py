"""The crop-and-flip augmentation op (crop_padding, hflip) against PyTorch, on the CPU and CUDA; its draws per sample
and epoch; a training run with it resumed bitwise."""
import pytest
import torch

import gpucore
from gpucore import _C, transforms
from conftest import assert_resume_matches


def augment_reference(x, offsets, flips, padding, mean, std):
    """torchvision's RandomCrop(size, padding) with its corners `offsets` in the padded image, flips, Normalize."""
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
    corners = offsets - 3  # the op's corners are in the image's coordinates: padding 3 is a shift of up to 3
    ours = torch.ops.gpucore.augment(x, corners, flips, mean, std, torch.float32)
    torch.testing.assert_close(ours, augment_reference(x, offsets, flips, 3, mean, std), rtol=1e-5, atol=1e-5)
    half = torch.ops.gpucore.augment(x, corners, flips, [], [], torch.bfloat16)
    assert half.dtype == torch.bfloat16  # the float32 reference rounded once to bfloat16: equal
    assert torch.equal(half, augment_reference(x, offsets, flips, 3, [], []).to(torch.bfloat16))
    half = torch.ops.gpucore.augment(x, corners, flips, mean, std, torch.bfloat16)
    torch.testing.assert_close(half, augment_reference(x, offsets, flips, 3, mean, std).to(torch.bfloat16),
                               rtol=2 ** -7, atol=2 ** -8)  # at most one bfloat16 step apart
    torch.library.opcheck(torch.ops.gpucore.augment, (x, corners, flips, mean, std, torch.float32))
    with pytest.raises(RuntimeError, match="offsets must be int64 N x 2"):
        torch.ops.gpucore.augment(x, corners[:2], flips, [], [], torch.float32)
    with pytest.raises(RuntimeError, match="one value per channel"):
        torch.ops.gpucore.augment(x, corners, flips, [0.5], [0.5], torch.float32)


@pytest.mark.needs_cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_augment_op_on_cuda_matches_the_cpu(dtype):
    # images (3 channels, normalised) and masks (1 channel, no mean/std), into float32 and bfloat16
    generator = torch.Generator().manual_seed(251)
    for channels, mean, std in ((3, [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]), (1, [], [])):
        x = torch.randint(0, 256, (7, channels, 9, 11), generator=generator).to(dtype)
        corners = torch.randint(-3, 4, (7, 2), generator=generator)
        flips = torch.randint(0, 2, (7,), generator=generator).bool()
        for out in (torch.float32, torch.bfloat16):
            cpu = torch.ops.gpucore.augment(x, corners, flips, mean, std, out)
            cuda = torch.ops.gpucore.augment(x.cuda(), corners.cuda(), flips.cuda(), mean, std, out)
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
