"""Models: built by name, with their classifier head, first convolution and backbone blocks (registry.py);
pretrained weights loaded into them and reported (pretrained.py)."""
from .registry import BUILTIN, CaptchaCNN, FashionMnistCNN, FastCNN, backbone_split, build_model, classifier_head

__all__ = ["BUILTIN", "CaptchaCNN", "FashionMnistCNN", "FastCNN", "backbone_split", "build_model", "classifier_head"]
