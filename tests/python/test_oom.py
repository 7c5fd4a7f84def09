"""gpucore.train's out-of-memory retry (on_oom: reduce_batch): the batch halved, or the error naming the config key,
and a mid-epoch resume after halving that serves every sample once."""
import os

import pytest
import torch
from torch import nn

import gpucore
from conftest import mlp, plain, tensors, train_interrupted


class Picky(nn.Module):
    """An MLP that runs out of memory on batches over 16, as a GPU would; records the first input column of each
    training batch it takes into `trained` (the samples' ids where the test puts them there)."""

    def __init__(self, trained=None):
        super().__init__()
        self.net, self.trained = mlp(), trained

    def forward(self, x):
        if x.shape[0] > 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.training and self.trained is not None:
            self.trained.extend(x[:, 0].round().long().tolist())
        return self.net(x)


def test_reduce_batch_on_out_of_memory(tmp_path):
    x, y = tensors(128)
    with pytest.warns(RuntimeWarning, match="batch_size 16"):
        result = gpucore.train(plain(tmp_path, batch_size=64, on_oom="reduce_batch"), model=Picky(), train_data=(x, y))
    assert result.status == "completed" and result.steps == 2
    with pytest.raises(gpucore.TrainingError, match="out of memory with batch_size 64.*on_oom: reduce_batch"):
        gpucore.train(plain(tmp_path, batch_size=64, name="raise"), model=Picky(), train_data=(x, y))


def test_out_of_memory_halving_then_a_mid_epoch_resume_serves_every_sample_once(tmp_path):
    """Halved twice (64 -> 16, accumulation 4), stopped after the first of two optimizer steps, resumed: the resumed
    run goes on in the checkpoint's batches, so each of the epoch's 128 samples is trained on exactly once."""
    trained = []  # the ids of the samples each successful training forward saw

    class StopAfterFirstStep:
        def on_log(self, trainer, step, metrics):
            raise KeyboardInterrupt

    x, y = tensors(128)
    x[:, 0] = torch.arange(128, dtype=torch.float32)  # each sample's id
    config = plain(tmp_path, batch_size=64, on_oom="reduce_batch", shuffle=True, log_every_n_steps=1)
    with pytest.warns(RuntimeWarning, match="batch_size 16 and accumulate_grad_batches 4"):
        stopped = train_interrupted(config, model=Picky(trained), train_data=(x, y), callbacks=[StopAfterFirstStep()])
    assert stopped.status == "interrupted" and sorted(trained) != list(range(128)) and len(trained) == 64
    saved = torch.load(os.path.join(stopped.checkpoint_dir, "interrupted.pt"), weights_only=True)
    assert saved["samples_consumed"] == 64 and saved["batching"] == {"batch_size": 16, "accumulate_grad_batches": 4}
    resumed = gpucore.train(dict(config, resume="auto"), model=Picky(trained), train_data=(x, y))
    assert resumed.status == "completed" and resumed.steps == 2
    assert sorted(trained) == list(range(128))
