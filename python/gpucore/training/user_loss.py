"""The loss callable a user gives gpucore.train: its name as config.json records it (config key loss_callable), and
its errors, which say they came from it."""
from __future__ import annotations

import functools
from typing import Callable

from ..errors import OutOfMemoryError, TrainingError


def callable_name(loss: Callable) -> str:
    """`loss` by name: module:qualname ('torch.nn.functional:cross_entropy'); a functools.partial as
    'functools.partial(module:qualname, keyword=...)' (its arguments' values are not recorded); an object with a
    __call__ (an nn.Module loss) as 'module:ClassName()'."""
    if isinstance(loss, functools.partial):
        arguments = ["..."] * len(loss.args) + [f"{name}=..." for name in loss.keywords]
        return f"functools.partial({', '.join([callable_name(loss.func), *arguments])})"
    qualname = getattr(loss, "__qualname__", None)
    if qualname is None:  # an instance: named by its class
        return f"{type(loss).__module__}:{type(loss).__qualname__}()"
    return f"{getattr(loss, '__module__', None) or '?'}:{qualname}"


class UserLoss:
    """The user's loss as the engine calls it: (float32 outputs, targets) -> a scalar, outside autocast. An exception
    it raises becomes a TrainingError that names it (not a diagnosis of the model's input), out-of-memory excepted
    (the out-of-memory policy handles that)."""

    def __init__(self, loss: Callable):
        self.loss, self.name = loss, callable_name(loss)

    def __call__(self, output, target):
        try:
            return self.loss(output, target)
        except OutOfMemoryError:
            raise
        except Exception as exc:
            raise TrainingError(f"the loss callable {self.name} (train()'s loss argument) raised "
                                f"{type(exc).__name__}: {exc}\nIt was called with the model's output as float32 "
                                f"{tuple(output.shape)} and the targets as {target.dtype} {tuple(target.shape)}, "
                                "outside autocast; fix the loss, or leave it out for config key loss") from exc
