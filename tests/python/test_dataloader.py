"""gpucore.DataLoader over a data set: normalised batches on the device, shards, a mid-epoch resume, flat memory."""
import pytest
import torch

import gpucore
from gpucore import data
from conftest import assert_no_growth


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
