"""A small stand-in run for the unit tests of the loop's parts (test_fit_loop.py, test_checkpointing.py,
test_run_stats.py): 8 x 8 crops of scikit-image's camera photo, a linear model, the run built by the set-up steps
(build_run) on the CPU in float32, its fit loop built by fit_loop as gpucore.train builds it."""
import torch
from torch import nn

from gpucore.config import load_config, with_real_values
from gpucore.training import distributed
from gpucore.training.fit_loop import fit_loop
from gpucore.training.run_setup import build_run
from conftest import require

# float32 on the CPU, batches in the data's order, no normalisation, a constant lr: what a plain torch loop does
PLAIN = {"device": "cpu", "precision": "32", "progress": False, "report": False, "seed": 3, "normalize": False,
         "shuffle": False, "schedule": "constant", "optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0,
         "lr": 0.5, "batch_size": 8, "cuda_graphs": False}


def camera_crops(count: int, offset: int = 0):
    """`count` 1 x 8 x 8 float crops of the camera photo (from crop `offset` on, in rows of 64 crops), and labels 0..2
    by the crop's brightness (a class the pixels tell)."""
    photo = torch.from_numpy(require("skimage.data").camera().copy()).float() / 255
    crops = photo.unfold(0, 8, 8).unfold(1, 8, 8).reshape(-1, 1, 8, 8)[offset:offset + count]
    brightness = crops.mean(dim=(1, 2, 3))
    return crops, torch.bucketize(brightness, torch.tensor([0.3, 0.6]))


def linear_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 3))


def stand_in(tmp_path, model, train_data, val_data=None, callbacks=(), **keys):
    """(run, loop): the run of `model` on the data as config PLAIN with `keys` says, in run_dir `tmp_path`."""
    config = with_real_values(load_config(dict(PLAIN, run_dir=str(tmp_path), name="stand_in",
                                               **({} if val_data is not None else {"val_fraction": 0}), **keys)))
    run = build_run(config, distributed.environment(), model=model, train_data=train_data, val_data=val_data)
    return run, fit_loop(run, list(callbacks))
