"""Grad-CAM and its relatives on the device, safe inside training and in notebooks.

Python holds the hooks (always removed, train/eval mode always restored); gradients go only to the
captured activations (torch.autograd.grad), so parameters' .grad are never touched. The math runs in
gpucore's torch ops (gpucore::cam_weights, cam_weighted_sum, cam_normalize, cam_overlay; CPU and CUDA
kernels) with pytorch-grad-cam's conventions: ReLU, per-image min-max with eps 1e-7, bilinear resize
with align_corners=False to the input size, layers averaged and min-max normalised again.
"""
from __future__ import annotations

import base64
import contextlib
import difflib
import os
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import _C
from .data.png import encode_png, grid
from .errors import ConfigError


_ops = torch.ops.gpucore




def segmentation_target(category: int, mask: Optional[torch.Tensor] = None) -> Callable:
    """Target for segmentation outputs (N, K, H, W): class `category` summed over `mask` (H x W or N x H x W) or the image."""
    def score(output: torch.Tensor) -> torch.Tensor:
        if output.dim() != 4 or not 0 <= category < output.shape[1]:
            raise ConfigError(f"segmentation target {category} needs an output of N x K x H x W with K > {category}, "
                              f"got {tuple(output.shape)}")
        logits = output[:, category]
        return (logits * mask.to(logits)).flatten(1).sum(1) if mask is not None else logits.flatten(1).sum(1)
    return score


def head_target(head: int, category: int, classes: int) -> Callable:
    """Target for multi-head outputs (captcha: N x heads*classes): class `category` of head `head`."""
    def score(output: torch.Tensor) -> torch.Tensor:
        per_head = output.reshape(output.shape[0], -1, classes)
        if not (0 <= head < per_head.shape[1] and 0 <= category < classes):
            raise ConfigError(f"head target ({head}, {category}) is out of range for {per_head.shape[1]} heads of "
                              f"{classes} classes")
        return per_head[:, head, category]
    return score


def _resolve_layer(model: nn.Module, layer: Union[str, nn.Module]) -> nn.Module:
    if isinstance(layer, nn.Module):
        return layer
    if not isinstance(layer, str):
        raise ConfigError(f"target layer must be a module or a dotted name such as 'layer4', got {type(layer).__name__}")
    modules = dict(model.named_modules())
    if layer in modules and layer:
        return modules[layer]
    names = [name for name in modules if name]
    close = difflib.get_close_matches(layer, names, n=3, cutoff=0.5)
    hint = f" Closest: {', '.join(close)}." if close else ""
    raise ConfigError(f"the model has no layer '{layer}'.{hint} Layers: {', '.join(names[:40])}"
                      + (" ..." if len(names) > 40 else ""))


AUTO_LAYER = "auto"
# Pooling layers reduce the map before them and learn nothing: never the auto layer (fast_cnn's head pools its
# features to 3 x 3 whatever the input size; the features before it are the map to explain).
_POOLING = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd,
            nn.modules.pooling._AdaptiveAvgPoolNd)


def find_target_layer(model: nn.Module, inputs: torch.Tensor) -> str:
    """The layer `layer: auto` picks: the last module to finish in a forward pass of `inputs` whose output is a
    spatial map (N x C x H x W, H x W > 1), not the model's own output and not a pooling layer. That is the last conv
    block before the pooling of a classifier (a ResNet's layer4, a ConvNeXt's last stage, the seeds' CNNs'
    `features`)."""
    finished: List[str] = []
    outputs = {}

    def hook_for(name):
        def hook(module, args, output):
            output = output[0] if isinstance(output, (tuple, list)) and output else output
            if isinstance(output, torch.Tensor) and output.dim() == 4 and output.shape[-2] * output.shape[-1] > 1:
                finished.append(name)
                outputs[name] = output
        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in model.named_modules()
               if name and not isinstance(module, _POOLING)]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            output = model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    output = output[0] if isinstance(output, (tuple, list)) else output
    candidates = [name for name in finished if outputs[name] is not output]
    if not candidates:
        raise ConfigError("layer 'auto' found no layer with a spatial (N x C x H x W) output in the model's forward "
                          "pass; name the target layer (vision transformers also need reshape_transform)")
    return candidates[-1]


@contextlib.contextmanager
def _capture(model: nn.Module, layers: Sequence[nn.Module]):
    """Records each layer's output; hooks removed and the model's mode restored whatever happens."""
    captured: List[Optional[torch.Tensor]] = [None] * len(layers)
    handles = []
    was_training = model.training

    def hook_for(index):
        def hook(module, inputs, output):
            captured[index] = output[0] if isinstance(output, (tuple, list)) else output
        return hook

    try:
        model.eval()
        for index, layer in enumerate(layers):
            handles.append(layer.register_forward_hook(hook_for(index)))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)


def _check_inputs(inputs: Any) -> torch.Tensor:
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 4 or not inputs.is_floating_point():
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ConfigError(f"CAM inputs must be a floating-point N x C x H x W tensor, got {shape}")
    return inputs


def _scores(output: torch.Tensor, targets: Any) -> torch.Tensor:
    """One scalar per sample: the logit of the target class (argmax when targets is None) or a callable's value."""
    n = output.shape[0]
    if callable(targets):
        score = targets(output)
        if not isinstance(score, torch.Tensor) or score.shape != (n,):
            raise ConfigError(f"a target callable must return one score per sample, shape ({n},), got "
                              f"{tuple(score.shape) if isinstance(score, torch.Tensor) else type(score).__name__}")
        return score
    if output.dim() != 2:
        raise ConfigError(f"class targets need an output of N x classes, got {tuple(output.shape)}; pass a callable "
                          "(gpucore.cam.segmentation_target, head_target) for other outputs")
    if targets is None:
        index = output.argmax(1)
    else:
        index = torch.as_tensor(targets, device=output.device).long().reshape(-1)
        if index.numel() == 1:
            index = index.expand(n)
        if index.numel() != n:
            raise ConfigError(f"targets has {index.numel()} entries for {n} inputs")
        bad = [int(t) for t in index.tolist() if not 0 <= t < output.shape[1]]
        if bad:
            raise ConfigError(f"target {bad[0]} is out of range for an output of {output.shape[1]} classes")
    return output.gather(1, index.reshape(n, 1)).reshape(n)


def _projection(matrix: torch.Tensor) -> torch.Tensor:
    """First principal component of each N x C x H x W activation map, as N x H x W.

    The map is the centred HW x C matrix x projected on its top right singular vector v: x v = s u, the top
    left singular vector scaled by its singular value. Both come from the eigendecomposition of the smaller
    Gram matrix: x x^T (HW x HW; eigenvalue s^2, eigenvector u) when HW <= C, as for a ResNet's last block
    (49 x 49 instead of 2048 x 2048), else x^T x (C x C; eigenvector v).
    The sign is fixed so that the projection's value of largest magnitude is positive (an SVD alone leaves
    it to chance).
    """
    n, c, h, w = matrix.shape
    x = matrix.float().reshape(n, c, h * w).transpose(1, 2)  # N x HW x C
    x = x - x.mean(dim=1, keepdim=True)
    if h * w <= c:
        values, vectors = torch.linalg.eigh(x @ x.transpose(1, 2))  # ascending eigenvalues
        projection = vectors[..., -1] * values[..., -1:].clamp_min(0).sqrt()
    else:
        _, vectors = torch.linalg.eigh(x.transpose(1, 2) @ x)
        projection = (x @ vectors[..., -1:]).squeeze(-1)
    peak = projection.gather(1, projection.abs().argmax(1, keepdim=True))
    projection = projection * torch.where(peak < 0, -1.0, 1.0)
    return torch.relu(projection).reshape(n, h, w)


class CAM:
    """A reusable CAM for one model and its target layer(s): `cam(inputs, targets)` returns a CamResult.

    Args:
        model: the model.
        target_layers: a module, a dotted name, several of them (averaged), or "auto".
        method: gradcam, gradcam++, xgradcam, hirescam, layercam, eigencam, eigengradcam or scorecam.
        reshape_transform: turns token outputs (vision transformers) into N x C x H x W.
        batch_size: split the inputs into batches of this size (None: all at once).
        scorecam_memory_bytes: scorecam: memory budget of its masked forward passes, chunked to fit.

    Raises:
        ConfigError: an unknown method or layer, a batch_size below 1, no target layer.
    """

    def __init__(self, model: nn.Module, target_layers: Union[str, nn.Module, Sequence[Union[str, nn.Module]]],
                 method: str = "gradcam", *, reshape_transform: Optional[Callable] = None,
                 batch_size: Optional[int] = None, scorecam_memory_bytes: int = 256 << 20):
        if method not in METHODS:
            raise ConfigError(f"CAM method '{method}' is not one of {', '.join(METHODS)}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        layers = [target_layers] if isinstance(target_layers, (str, nn.Module)) else list(target_layers)
        if not layers:
            raise ConfigError("give at least one target layer")
        self.model, self.method, self.reshape_transform = model, method, reshape_transform
        self.batch_size, self.scorecam_memory_bytes = batch_size, scorecam_memory_bytes
        self.layer_names = [layer if isinstance(layer, str) else type(layer).__name__ for layer in layers]
        # 'auto' needs a forward pass to see the layers' outputs: resolved on the first call
        self.layers = None if layers == [AUTO_LAYER] else [_resolve_layer(model, layer) for layer in layers]

    def __call__(self, inputs: torch.Tensor, targets: Any = None) -> "CamResult":
        inputs = _check_inputs(inputs)
        if self.layers is None:
            self.layer_names = [find_target_layer(self.model, inputs[:1])]
            self.layers = [_resolve_layer(self.model, self.layer_names[0])]
        size = self.batch_size or inputs.shape[0]
        chunks = []
        for start in range(0, inputs.shape[0], size):
            part = targets
            if targets is not None and not callable(targets) and not isinstance(targets, int):
                part = list(torch.as_tensor(targets).reshape(-1).tolist())[start:start + size]
            chunks.append(self._cams(inputs[start:start + size], part))
        return CamResult(torch.cat(chunks), self.method, self.layer_names)

    def _activation(self, captured: Optional[torch.Tensor], index: int) -> torch.Tensor:
        if captured is None:
            raise ConfigError(f"target layer '{self.layer_names[index]}' did not run in the model's forward pass")
        return captured

    def _spatial(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = self.reshape_transform(tensor) if self.reshape_transform else tensor
        if tensor.dim() != 4:
            raise ConfigError(f"the target layer's output is {tuple(tensor.shape)}, not N x C x H x W; pass "
                              "reshape_transform (e.g. for vision-transformer tokens)")
        return tensor.float()

    def _cams(self, inputs: torch.Tensor, targets: Any) -> torch.Tensor:
        height, width = inputs.shape[-2:]
        gradient_free = not _METHODS[self.method][0]
        with _capture(self.model, self.layers) as captured:
            with torch.set_grad_enabled(not gradient_free):
                # A fresh leaf that requires grad, so the graph reaches the layers even with frozen weights.
                x = inputs.detach().requires_grad_(not gradient_free)
                try:
                    output = self.model(x)
                except RuntimeError as exc:
                    if "out of memory" in str(exc):
                        raise
                    raise ConfigError(f"inputs of shape {tuple(inputs.shape)} ({inputs.dtype}, {inputs.device}) do "
                                      f"not fit the model: {str(exc).splitlines()[0]}") from exc
                if isinstance(output, (tuple, list)):
                    output = output[0]
                activations = [self._activation(a, i) for i, a in enumerate(captured)]
                scores = _scores(output, targets)
                if gradient_free:
                    gradients = [None] * len(activations)
                else:
                    gradients = list(torch.autograd.grad(scores.sum(), activations, allow_unused=True))
            per_layer = []
            for index, (activation, gradient) in enumerate(zip(activations, gradients)):
                if not gradient_free and gradient is None:
                    raise ConfigError(f"the target score does not depend on layer '{self.layer_names[index]}'")
                a = self._spatial(activation.detach())
                g = self._spatial(gradient) if gradient is not None else None
                layer_cam = _METHODS[self.method][1](self, a, g, inputs, output, targets)
                per_layer.append(_ops.cam_normalize(layer_cam, [height, width]))
        stacked = torch.stack(per_layer, dim=1).clamp_min(0).mean(dim=1)
        return _ops.cam_normalize(stacked, [])

    def _scorecam_weights(self, a, inputs, output, targets) -> torch.Tensor:
        """Softmax over channels of the target score of the input masked by each upsampled channel."""
        n, channels = a.shape[:2]
        # As pytorch-grad-cam: UpsamplingBilinear2d (align_corners=True), per-channel min-max with eps 1e-8.
        masks = nn.functional.interpolate(a, size=inputs.shape[-2:], mode="bilinear", align_corners=True)
        low = masks.flatten(2).amin(2)[..., None, None]
        high = masks.flatten(2).amax(2)[..., None, None]
        masks = (masks - low) / (high - low + 1e-8)
        if targets is None:
            targets = output.argmax(1)
        per_sample = inputs[0].numel() * inputs.element_size()
        chunk = max(1, int(self.scorecam_memory_bytes // (per_sample * 8)))
        scores = []
        with torch.no_grad():
            for image in range(n):
                target = targets if callable(targets) else torch.as_tensor(targets, device=a.device).reshape(-1)
                if not callable(target):
                    target = int(target[image if target.numel() > 1 else 0]) if target.numel() else None
                    target = _class_scorer(target)
                image_scores = []
                for start in range(0, channels, chunk):
                    masked = inputs[image][None] * masks[image, start:start + chunk, None].to(inputs.dtype)
                    result = self.model(masked)
                    result = result[0] if isinstance(result, (tuple, list)) else result
                    image_scores.append(target(result).float())
                scores.append(torch.cat(image_scores))
        return torch.softmax(torch.stack(scores), dim=1)


def _class_scorer(category: int) -> Callable:
    return lambda output: output[:, category]


# Each method: whether it needs the target score's gradients, and its map of one layer from the
# activations a and gradients g (N x C x h x w): cam(self, a, g, inputs, output, targets) -> N x h x w.
# Adding a method is one entry here.
_METHODS = {
    "gradcam": (True, lambda self, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "gradcam"))),
    "gradcam++": (True, lambda self, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "gradcam++"))),
    "xgradcam": (True, lambda self, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "xgradcam"))),
    "hirescam": (True, lambda self, a, g, *_: _ops.cam_weighted_sum(a, g)),
    "layercam": (True, lambda self, a, g, *_: _ops.cam_weighted_sum(a, torch.relu(g))),
    "eigencam": (False, lambda self, a, g, *_: _projection(a)),
    "eigengradcam": (True, lambda self, a, g, *_: _projection(a * g)),
    "scorecam": (False, lambda self, a, g, inputs, output, targets: _ops.cam_weighted_sum(
        a, self._scorecam_weights(a, inputs, output, targets))),
}
METHODS = tuple(_METHODS)


def gradcam(model: nn.Module, target_layer: Union[str, nn.Module, Sequence[Union[str, nn.Module]]],
            inputs: torch.Tensor, targets: Any = None, *, method: str = "gradcam", batch_size: Optional[int] = None,
            reshape_transform: Optional[Callable] = None) -> "CamResult":
    """Class activation maps of `inputs` for `targets` at `target_layer`.

    Args:
        model: the model (its train/eval mode is restored and its hooks removed afterwards, also on an error).
        target_layer: a module, a dotted name ("layer4", "features.7"), several of them (averaged), or "auto": the
            last module with a spatial output before the head.
        inputs: N x C x H x W, as the model takes them.
        targets: None (each sample's top class), an int, one int per sample, or a callable on the model's output
            returning one score per sample (gpucore.cam.segmentation_target, gpucore.cam.head_target).
        method: gradcam, gradcam++, xgradcam, hirescam, layercam, eigencam, eigengradcam or scorecam.
        batch_size: split the inputs into batches of this size (None: all at once).
        reshape_transform: turns token outputs (vision transformers) into N x C x H x W.

    Returns:
        A CamResult: the maps (N x H x W in [0, 1]), overlays, PNG files, notebook display.

    Raises:
        ConfigError: an unknown method or layer name (listing the closest), targets that do not fit the inputs.
    """
    return CAM(model, target_layer, method, reshape_transform=reshape_transform, batch_size=batch_size)(inputs, targets)


def _as_rgb_uint8(images: torch.Tensor, size) -> torch.Tensor:
    """N x H x W x 3 uint8 from uint8 or [0, 1] float images, channels first or last, grey or RGB."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise ConfigError("overlay images must be an N x 3 x H x W or N x H x W x 3 tensor (uint8, or float in [0, 1])")
    x = images
    if x.shape[1] in (1, 3) and x.shape[-1] not in (1, 3):
        x = x.permute(0, 2, 3, 1)
    if x.shape[-1] == 1:
        x = x.expand(*x.shape[:3], 3)
    if x.shape[-1] != 3:
        raise ConfigError(f"overlay images must have 1 or 3 channels, got shape {tuple(images.shape)}")
    if x.is_floating_point():
        x = (x.clamp(0, 1) * 255).to(torch.uint8)
    elif x.dtype != torch.uint8:
        raise ConfigError(f"overlay images must be uint8 or float, got {x.dtype}")
    if tuple(x.shape[1:3]) != tuple(size):
        raise ConfigError(f"overlay images are {tuple(x.shape[1:3])}, the CAMs {tuple(size)}: give the images the "
                          "model saw, at the same size")
    return x.contiguous()


DISPLAY_LIMIT = 32  # maps in the notebook's grid
DISPLAY_COLUMNS = 4  # maps a row in the notebook's grid
DISPLAY_MIN_PX = 96  # a small map is enlarged to at least this many pixels a side in the notebook's grid


class CamResult:
    """CAMs with overlays, PNG files and notebook display (a grid of the maps or overlays).

    Args:
        cams: N x H x W float32 in [0, 1], on the input's device.
        method: the CAM method that made them.
        layers: the names of the target layers.
    """

    def __init__(self, cams: torch.Tensor, method: str, layers: Sequence[str]):
        self.cams, self.method, self.layers = cams, method, list(layers)
        self._images: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return self.cams.shape[0]

    def __repr__(self) -> str:
        return f"CamResult({self.method} at {', '.join(self.layers)}: {len(self)} maps of {tuple(self.cams.shape[1:])})"

    def numpy(self):
        """The maps as a NumPy array.

        Returns:
            N x H x W float32 in [0, 1], on the host.
        """
        return self.cams.detach().to("cpu").numpy()

    def heatmaps(self) -> torch.Tensor:
        """The maps in JET colours (OpenCV's table).

        Returns:
            N x H x W x 3 uint8 RGB.
        """
        blank = torch.zeros(*self.cams.shape, 3, dtype=torch.uint8, device=self.cams.device)
        return _ops.cam_overlay(blank, self.cams, 1.0)

    def overlay(self, images: torch.Tensor, colormap: str = "jet", alpha: float = 0.5) -> torch.Tensor:
        """The maps blended onto `images`, as pytorch-grad-cam's show_cam_on_image.

        Args:
            images: the images the maps are of, N x C x H x W (uint8, or float in [0, 1]), at the maps' size.
            colormap: "jet", the only one.
            alpha: the heatmap's weight in the blend.

        Returns:
            N x H x W x 3 uint8 RGB.

        Raises:
            ConfigError: another colormap, images of another size than the maps.
        """
        if colormap != "jet":
            raise ConfigError(f"colormap '{colormap}' is not supported; use 'jet'")
        rgb = _as_rgb_uint8(images.to(self.cams.device), self.cams.shape[1:])
        self._images = rgb
        return _ops.cam_overlay(rgb, self.cams, float(alpha))

    def save(self, directory: str, images: Optional[torch.Tensor] = None, prefix: str = "cam",
             names: Optional[Sequence[str]] = None) -> List[str]:
        """One PNG per map, over `images` when given.

        Args:
            directory: the folder to write to (made when missing).
            images: the images to overlay (as overlay() takes them); None: the bare heatmaps.
            prefix: file names PREFIX_0000.png, ... when `names` is None.
            names: one file name (without .png) per map.

        Returns:
            The paths written.

        Raises:
            ConfigError: as many names as maps are needed.
        """
        return _save_pngs(directory, lambda: self.overlay(images) if images is not None else self.heatmaps(),
                          len(self), names, prefix, "maps")

    def _picture(self) -> torch.Tensor:
        """The notebook's grid: the first DISPLAY_LIMIT maps (overlays once overlay() was called), DISPLAY_COLUMNS a
        row, each enlarged by a whole factor (nearest neighbour: the map's own pixels) to at least DISPLAY_MIN_PX on
        its shorter side."""
        shown = _ops.cam_overlay(self._images, self.cams, 0.5) if self._images is not None else self.heatmaps()
        shown = shown[:DISPLAY_LIMIT].to("cpu")
        factor = max(1, -(-DISPLAY_MIN_PX // max(1, min(shown.shape[1:3]))))
        if factor > 1:
            shown = shown.repeat_interleave(factor, dim=1).repeat_interleave(factor, dim=2)
        return grid(shown, columns=DISPLAY_COLUMNS, gap=4)

    def _repr_png_(self) -> bytes:
        return encode_png(self._picture())

    def _repr_html_(self) -> str:
        data = base64.b64encode(self._repr_png_()).decode("ascii")
        return f'<div><b>{self.method}</b> at {", ".join(self.layers)}<br><img src="data:image/png;base64,{data}"/></div>'


class PhotoGeometry(NamedTuple):
    """Where a photo's pixels land on a model's input grid (LoadedModel.photo_geometry): per axis (y, x), a model
    coordinate is scale * photo coordinate + shift, in pixels with their edges at whole numbers, as the reader's
    resize and the validation form's Resize and CenterCrop move them; `model_size` is the input's (height, width)."""

    scale: Tuple[float, float]
    shift: Tuple[float, float]
    model_size: Tuple[int, int]

    def covered(self, height: int, width: int) -> Tuple[slice, slice]:
        """The rows and columns of a height x width photo whose pixel centres land on the model's input (a centre
        crop leaves the photo's edges out)."""
        spans = []
        for axis, length in enumerate((height, width)):
            centres = (torch.arange(length, dtype=torch.float64) + 0.5) * self.scale[axis] + self.shift[axis]
            inside = ((centres >= 0) & (centres < self.model_size[axis])).nonzero()
            spans.append(slice(int(inside[0]), int(inside[-1]) + 1) if len(inside) else slice(0, 0))
        return spans[0], spans[1]

    def on_photo(self, cam: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """A map of the model's input (h x w) on the photo's grid: bilinear at each covered pixel's centre (as
        cam_normalize resizes, align_corners=False), 0 where the model did not see the photo. H x W float32."""
        rows, columns = self.covered(height, width)
        heat = torch.zeros(height, width, dtype=torch.float32)
        if rows.stop == rows.start or columns.stop == columns.start:
            return heat
        axes = []
        for axis, span in enumerate((rows, columns)):
            centres = (torch.arange(span.start, span.stop, dtype=torch.float64) + 0.5) * self.scale[axis] + self.shift[axis]
            axes.append((2 * centres / self.model_size[axis] - 1).float())  # grid_sample's [-1, 1], pixel edges at ends
        grid = torch.stack(torch.meshgrid(axes[1], axes[0], indexing="xy"), dim=-1)  # (x, y) per pixel
        sampled = nn.functional.grid_sample(cam.detach().float().cpu()[None, None], grid[None], mode="bilinear",
                                            padding_mode="border", align_corners=False)
        heat[rows, columns] = sampled[0, 0].clamp(0, 1)
        return heat


class PhotoCams:
    """Maps of photos at their own sizes (photo_gradcam): the CamResult of the model's inputs (`cams`), and each map
    drawn back onto its whole photo.

    Args:
        cams: the maps of the model's inputs.
        photos: the photos, uint8 C x H x W each.
        geometries: each photo's PhotoGeometry.
    """

    def __init__(self, cams: CamResult, photos: Sequence[torch.Tensor], geometries: Sequence[PhotoGeometry]):
        self.cams, self.photos, self.geometries = cams, list(photos), list(geometries)

    def __len__(self) -> int:
        return len(self.photos)

    def __repr__(self) -> str:
        return f"PhotoCams({len(self)} photos; {self.cams!r})"

    def heat(self, index: int) -> torch.Tensor:
        """Photo `index`'s map on its own pixel grid.

        Returns:
            H x W float32 in [0, 1]; 0 on the parts the model did not see (those a centre crop cut off).
        """
        height, width = self.photos[index].shape[1:]
        return self.geometries[index].on_photo(self.cams.cams[index], height, width)

    def overlay(self, index: int, alpha: float = 0.5) -> torch.Tensor:
        """Photo `index` with its map blended on (as CamResult.overlay) over the part the model saw; the rest of the
        photo as it is.

        Returns:
            H x W x 3 uint8 RGB, the photo's size.
        """
        photo = self.photos[index].cpu().expand(3, -1, -1).permute(1, 2, 0).contiguous()  # C x H x W, C 1 or 3
        rows, columns = self.geometries[index].covered(*photo.shape[:2])
        out = photo.clone()
        if rows.stop > rows.start and columns.stop > columns.start:
            seen = photo[rows, columns].contiguous()
            out[rows, columns] = _ops.cam_overlay(seen[None], self.heat(index)[rows, columns][None].contiguous(),
                                                  float(alpha))[0]
        return out

    def save(self, directory: str, names: Optional[Sequence[str]] = None, prefix: str = "cam",
             alpha: float = 0.5) -> List[str]:
        """One PNG per photo, the photo's size, its map over the part the model saw.

        Args:
            directory: the folder to write to (made when missing).
            names: one file name (without .png) per photo; None: PREFIX_0000.png, ...
            prefix: as above.
            alpha: the heatmap's weight in the blend.

        Returns:
            The paths written.

        Raises:
            ConfigError: as many names as photos are needed.
        """
        return _save_pngs(directory, lambda: (self.overlay(index, alpha) for index in range(len(self))), len(self),
                          names, prefix, "photos")


def _save_pngs(directory: str, pictures: Callable[[], Iterable[torch.Tensor]], count: int,
               names: Optional[Sequence[str]], prefix: str, what: str) -> List[str]:
    """`count` H x W x 3 uint8 pictures (made by `pictures` once the names are checked, one at a time where it
    yields them) as PNG files in `directory`, named `names` (without .png) or PREFIX_0000.png, ...; the paths."""
    if names is not None and len(names) != count:
        raise ConfigError(f"save: {len(names)} names for {count} {what}")
    os.makedirs(directory, exist_ok=True)
    paths = []
    for index, picture in enumerate(pictures()):
        path = os.path.join(directory, f"{names[index] if names is not None else f'{prefix}_{index:04d}'}.png")
        with open(path, "wb") as handle:
            handle.write(encode_png(picture))
        paths.append(path)
    return paths


def photo_gradcam(model, photos: Sequence, target_layer: Union[str, nn.Module, Sequence[Union[str, nn.Module]]] = AUTO_LAYER,
                  targets: Any = None, *, method: str = "gradcam", batch_size: Optional[int] = None,
                  size: Optional[Tuple[int, int]] = None) -> PhotoCams:
    """Class activation maps of whole photos for a trained checkpoint, as pytorch-grad-cam users draw them: each photo
    read as its run read images (resized to its size, or through the deterministic form of its transforms: Resize +
    CenterCrop), the map computed on that input and drawn back onto the photo's own pixel grid. A centre crop's
    cut-off edges get no heat and keep the photo's pixels.

    Args:
        model: a gpucore.load result (LoadedModel).
        photos: PIL images, uint8 tensors (C x H x W or H x W) or uint8 arrays (H x W x C or H x W), of any sizes.
        target_layer, targets, method, batch_size: as gradcam.
        size: (height, width) to read the photos at instead of the run's size.

    Returns:
        PhotoCams: `heat(i)`, `overlay(i)`, `save(directory)`; `cams` the maps of the model's inputs.

    Raises:
        ConfigError: a photo that is not an image (naming its index), a model that does not take images, and as
            gradcam.
    """
    from .data.input_files import uint8_images

    pictures = uint8_images(photos, model.image_channels("photos"), "photos")
    x = model.preprocess(model.read_images(pictures, size))
    cams = CAM(model.module, target_layer, method, batch_size=batch_size)(x, targets)
    return PhotoCams(cams, pictures, [model.photo_geometry(*p.shape[1:], size) for p in pictures])
