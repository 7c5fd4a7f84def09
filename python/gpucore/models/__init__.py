"""Models: the built-ins (builtin.py), built by name (registry.py), their first convolution, classifier head and
backbone blocks (surgery.py); pretrained weights loaded into them and reported (pretrained.py)."""
from .builtin import CaptchaCNN, FashionMnistCNN, FastCNN
from .registry import BUILTIN, build_model
from .surgery import backbone_split, classifier_head

__all__ = ["BUILTIN", "CaptchaCNN", "FashionMnistCNN", "FastCNN", "backbone_split", "build_model", "classifier_head"]
