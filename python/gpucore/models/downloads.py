"""Model keyword arguments with which a library would download weights. gpucore never downloads (its users' servers
have no internet): config key `pretrained` loads weights from local files instead, so model_kwargs that would
download are refused, by one rule for every library."""
from ..errors import ConfigError

DOWNLOADING_KEYS = {
    "torchvision": ("pretrained", "weights", "weights_backbone"),
    "timm": ("pretrained", "pretrained_cfg_overlay"),
    "transformers": ("pretrained_model_name_or_path",),
    "smp": ("encoder_weights",),
}


def refuse_downloads(library: str, full_name: str, kwargs: dict) -> None:
    """A ConfigError for the first of `library`'s downloading keys in `kwargs` with a value that asks for weights
    (None and False ask for none and are allowed)."""
    for key in DOWNLOADING_KEYS[library]:
        if kwargs.get(key) not in (None, False):
            raise ConfigError(f"config key 'model_kwargs': '{key}' is not passed to {full_name}, since the library "
                              "would download weights; set config key 'pretrained' to a local weights file or model "
                              "folder (or true for torchvision's and timm's own weights from their local cache)")
