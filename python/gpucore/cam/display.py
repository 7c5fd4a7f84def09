"""A CAM's maps shown: JET heatmaps, overlays on the images the model saw, PNG files and a notebook grid."""
from __future__ import annotations

import base64
import os
from typing import Callable, Iterable, List, Optional, Sequence

import torch

from ..data.png import encode_png, grid
from ..errors import ConfigError

_ops = torch.ops.gpucore


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
        return save_pngs(directory, lambda: self.overlay(images) if images is not None else self.heatmaps(),
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


def save_pngs(directory: str, pictures: Callable[[], Iterable[torch.Tensor]], count: int,
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

