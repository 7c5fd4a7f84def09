"""Grad-CAM and its relatives on the device, safe inside training and in notebooks.

Python holds the hooks (always removed, train/eval mode always restored); gradients go only to the
captured activations (torch.autograd.grad), so parameters' .grad are never touched. The math runs in
gpucore's torch ops (gpucore::cam_weights, cam_weighted_sum, cam_normalize, cam_overlay; CPU and CUDA
kernels) with pytorch-grad-cam's conventions: ReLU, per-image min-max with eps 1e-7, bilinear resize
with align_corners=False to the input size, layers averaged and min-max normalised again.

One concern per file: targets.py (what a map explains), hooks.py (the target layers and their outputs), methods.py
(each method's map of one layer), base.py (the CAM and gpucore.gradcam), display.py (CamResult: overlays, PNG files,
the notebook grid), photos.py (maps of whole photos: photo_gradcam, PhotoGeometry), clips.py (maps of a clip's frames for
one output step of a sequence model: clip_gradcam).
"""
from .base import CAM, gradcam
from .clips import CLIP_METHODS, clip_gradcam
from .display import CamResult
from .hooks import AUTO_LAYER, find_target_layer
from .methods import METHODS
from .photos import PhotoCams, PhotoGeometry, photo_gradcam
from .targets import head_target, segmentation_target

__all__ = ["AUTO_LAYER", "CAM", "CLIP_METHODS", "CamResult", "METHODS", "PhotoCams", "PhotoGeometry", "clip_gradcam",
           "find_target_layer", "gradcam", "head_target", "photo_gradcam", "segmentation_target"]
