"""The batch cursor op (gpucore::next_indices, csrc/ops/train_step/batch_cursor.cpp): an epoch's next sample
indices read from the order at a device-side cursor, which it advances."""
import pytest
import torch

import gpucore  # noqa: F401  (registers the ops' fake kernels)


def test_next_indices_reads_the_order_from_the_cursor_and_advances_it():
    order, cursor, index = torch.randperm(10), torch.tensor(3), torch.empty(4, dtype=torch.long)
    torch.ops.gpucore.next_indices(order, cursor, index)
    assert torch.equal(index, order[3:7]) and cursor.item() == 7
    with pytest.raises(RuntimeError, match="runs past"):
        torch.ops.gpucore.next_indices(order, cursor, index)
    torch.library.opcheck(torch.ops.gpucore.next_indices, (order, torch.tensor(2), index))
