"""The C++ engine's batch source over resident tensors (TensorBatches): its order and its errors."""

import pytest
import torch

from gpucore import _C


def test_tensor_batches_order_depends_only_on_seed_and_epoch():
    x = torch.arange(100).float().unsqueeze(1)
    y = torch.arange(100)

    def epoch_order(seed, epoch):
        source = _C.TensorBatches(x, y, 10, True, False, seed, torch.device("cpu"))
        source.start_epoch(epoch)
        out = []
        while (batch := source.next()) is not None:
            out.append(batch[1])
        return torch.cat(out)

    first = epoch_order(5, 0)
    assert sorted(first.tolist()) == list(range(100))
    assert torch.equal(first, epoch_order(5, 0))
    assert not torch.equal(first, epoch_order(5, 1))
    assert not torch.equal(first, epoch_order(6, 0))
    skipped = _C.TensorBatches(x, y, 10, True, False, 5, torch.device("cpu"))
    skipped.start_epoch(0, 3)
    assert skipped.remaining() == 7
    assert torch.equal(skipped.next()[1], first[30:40])


def test_tensor_batches_errors():
    with pytest.raises(_C.ConfigError, match=r"same number of samples, got 10 inputs and targets of shape \[9\]"):
        _C.TensorBatches(torch.zeros(10, 2), torch.zeros(9), 4, True, False, 0, torch.device("cpu"))
    with pytest.raises(_C.ConfigError, match="batch_size"):
        _C.TensorBatches(torch.zeros(10, 2), torch.zeros(10), 0, True, False, 0, torch.device("cpu"))
