"""Maps of whole photos at their own sizes (photo_gradcam): each photo read as its run read images, its map computed on
that input and drawn back onto the photo's own pixel grid (PhotoGeometry)."""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..errors import ConfigError
from .base import CAM
from .display import CamResult, save_pngs
from .hooks import AUTO_LAYER

_ops = torch.ops.gpucore


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
        return save_pngs(directory, lambda: (self.overlay(index, alpha) for index in range(len(self))), len(self),
                          names, prefix, "photos")


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
        ConfigError: a model that is not a gpucore.load result, a photo that is not an image (naming its index), a
            model that does not take images, and as gradcam.
    """
    from ..data.input_files import uint8_images

    # cam/ sits below evaluation/ (tests/python/test_layout.py): a LoadedModel known by what this reads of it
    if not all(hasattr(model, name) for name in ("module", "image_channels", "read_images", "preprocess",
                                                 "photo_geometry")):
        raise ConfigError(f"photo_gradcam's model must be a gpucore.load result (LoadedModel), got "
                          f"{type(model).__name__} (for an nn.Module and its inputs: gpucore.gradcam)")
    pictures = uint8_images(photos, model.image_channels("photos"), "photos")
    x = model.preprocess(model.read_images(pictures, size))
    cams = CAM(model.module, target_layer, method, batch_size=batch_size)(x, targets)
    return PhotoCams(cams, pictures, [model.photo_geometry(*p.shape[1:], size) for p in pictures])
