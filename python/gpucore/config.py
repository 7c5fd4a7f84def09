"""Training configuration: every key, its type, default and valid values, in one table (KEYS).

`load_config` accepts a path (.yaml, .yml, .json), a dict, or a TrainConfig, applies overrides
(`--set key=value` on the shell, `--set data_kwargs.train_size=12000` into a mapping key, keyword arguments
in Python), and checks everything once: an unknown key names the closest valid one, a wrong type or range
names the key and what is valid. The result is a frozen TrainConfig whose fields have the keys' types; what
changes while a run trains (a batch halved on out-of-memory) lives in the fit loop and its checkpoints.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from . import _C
from . import transforms as transforms_list
from .errors import ConfigError
from .models.registry import BUILTIN
from .models.tta import TTA_CHOICES
from .redact import holds_mask, masked, masked_value_message
from .values import is_int, is_number



@dataclass(frozen=True)
class Key:
    name: str
    type: type  # bool, int, float, str, list or dict
    default: Any
    doc: str
    choices: Optional[Sequence[str]] = None
    check: Optional[Callable[[Any], bool]] = None
    valid: str = ""  # what `check` accepts, for the error message
    optional: bool = False  # None allowed
    words: Sequence[str] = ()  # a list key's values that are a word instead of a list (class_weights: balanced)


_INT64_LIMIT = 2**63  # integer keys reach C++ as int64


# Keys counted in epochs reach the engine as optimizer steps (int64): epochs x steps per epoch. Below 2^31
# epochs leaves room for 2^32 steps per epoch. The engine's step counters are float32, exact to 2^24 steps:
# it refuses a longer run (epochs x steps per epoch) when it is made.
_EPOCHS_LIMIT = 2**31
_IN_EPOCHS = "the engine counts them in int64 optimizer steps"


# Config key loggers' values (training/loggers/ has a logger of each name).
LOGGERS = ("csv", "tensorboard", "mlflow")


# Config key name: one folder in run_dir. A separator or .. would put the run (and what it writes) outside run_dir.
_FOLDER_NAME = "one folder name: not empty, not . or .., without / \\ or NUL characters (e.g. resnet18-lr3e-4)"


def is_folder_name(value: str) -> bool:
    """Whether `value` names one folder (config key name)."""
    return value not in ("", ".", "..") and not any(character in value for character in "/\\\0")


def _epochs(value):
    return 0 < value < _EPOCHS_LIMIT


def _positive(value):
    return value > 0


def _non_negative(value):
    return value >= 0


def _fraction(value):
    return 0 <= value < 1


# Config key class_weights: a word, or one weight per class (finite, >= 0, not all 0); its length is checked against
# the data's classes once they are read (data/class_balance.py).
CLASS_WEIGHT_WORDS = ("none", "balanced")


def _class_weights(value):
    if isinstance(value, str):
        return value in CLASS_WEIGHT_WORDS
    return (len(value) > 0 and all(is_number(w) and math.isfinite(w) and w >= 0 for w in value)
            and any(w > 0 for w in value))


# The choices of the keys whose values the C++ core parses, read from its own tables (one list, not two).
CORE_CHOICES = _C.config_choices()
# The numeric keys the C++ core checks too: their ranges and the core's defaults, read from the core
# (gpucore/ranges.h), so this table's message is the one a user sees; the core keeps them as invariants (the batch
# sources check batch_size, eval_batch_size and prefetch as their arguments).
CORE_RANGES = _C.config_ranges()
CORE_DEFAULTS = _C.config_defaults()
# Eager steps of cuda_graphs before the capture, the engine's own setting.
GRAPH_WARMUP_STEPS = _C.EngineConfig().graph_warmup_steps


def _core(name: str, unit: str = "") -> dict:
    """A Key's default, check and valid values for a numeric key the core checks too, from the core; the default is
    left to the Key where config.py's is the only one (not in CORE_DEFAULTS). `unit`: what the message adds."""
    valid = CORE_RANGES[name]
    default = dict(default=CORE_DEFAULTS[name]) if name in CORE_DEFAULTS else {}
    return dict(default, check=valid.__contains__, valid=f"{valid}{unit}")



# Keys a resume (resume: auto, a checkpoint file, --resume RUN_DIR) may set anew: how and where the run goes on, not
# what it trains. epochs only where the schedule does not depend on it (constant, step, multistep:
# training/checkpointing.check_schedule_length refuses the rest); accept_changed_data decides whether the resume itself
# may go on. Every other key is the run's own (training/run_dir.check_resume_keeps_the_run).
RESUME_SETTABLE = ("epochs", "device", "no_cuda", "no_mps", "devices", "dist_timeout", "progress", "log_every_n_steps",
                   "checkpoint_every_n_steps", "checkpoint_every_minutes", "report", "on_oom", "accept_changed_data")

KEYS = [
    # model and data
    Key("model", str, "fashion_mnist_cnn", f"built-in model ({', '.join(BUILTIN)}), a model of torchvision or timm by name ('torchvision:resnet18', 'timm:convnext_tiny'), a segmentation model ('transformers:SegformerForSemanticSegmentation', 'smp:Unet'), or 'package.module:factory'"),
    Key("model_kwargs", dict, {}, "keyword arguments for the model factory; torchvision and timm models take num_classes (a new classifier head) and in_channels (a new first conv; pretrained RGB weights summed for 1 channel, as timm does); num_classes (the data's class count: its class names, else its integer labels' largest + 1; multi-label: its labels' count) and in_channels left out are taken from the data for a model that takes them (training_stats.json's model_kwargs_from_data), and a head with fewer outputs than the data's classes is refused (multi-label: any other count); fast_cnn takes widths (default [32, 64, 128]), extra ([0, 1, 0]) and fused (true: each max-pool + BatchNorm + ReLU block, and the first block's convolution, as one op, where no hook is on the block's layers; false: torch's layers one by one, the same state_dict)"),
    # fine-tuning
    Key("pretrained", str, None, "weights to start from: a file (.pth, .pt, .bin: a torchvision or timm state dict, or a gpucore checkpoint; .safetensors) or a Hugging Face model folder, read with weights_only; or true: a torchvision:/timm: model's own weights from that library's local cache (nothing is downloaded). What did not load is reported; the replaced head is expected", optional=True),
    Key("pretrained_strict", bool, True, "any other key of the pretrained weights that is missing, unexpected or of another shape is an error (false: report it and load the rest)"),
    Key("freeze", str, "none", "backbone: train only the classifier head for freeze_epochs, its BatchNorm statistics frozen too, then all layers", choices=["none", "backbone"]),
    Key("freeze_epochs", int, 1, "freeze: backbone: epochs with the backbone frozen", check=_positive, valid="> 0"),
    Key("lr_backbone", float, 1.0, "the backbone's learning rate as a multiple of lr (the head trains at lr)", check=_positive, valid="> 0"),
    Key("lr_layer_decay", float, 1.0, "layer-wise decay: the backbone's block k places before the head trains at lr x lr_backbone x lr_layer_decay^(k-1); blocks are the model's top-level modules with nn.Sequential/nn.ModuleList opened (1.0: off)", check=lambda v: 0 < v <= 1, valid="in (0, 1]"),
    Key("data", str, "fashion_mnist", "built-in data set (fashion_mnist: the real one, from data_kwargs path, $GPUCORE_FASHION_MNIST, /usr/share/datasets/fashion-mnist or ~/.cache/gpucore/fashion-mnist, test set as validation; synthetic_fashion, synthetic_sequences, synthetic_captcha) or a path: a .npz; a folder of IDX files (train-/t10k-images-idx3-ubyte[.gz] and labels); a folder of x_train.npy/y_train.npy[/x_val.npy/y_val.npy]; an image folder (class subfolders, or images/ and masks/ for segmentation, each optionally under train/ beside a held-out validation/, val/, valid/ or test/); a label file (.csv, .tsv or .jsonl of image files and their labels: class names, integer ids, or several per row for a multi-label loss); a folder with label files: Hugging Face's metadata.csv/metadata.jsonl beside the images (at the top, or in train/ and validation/, val/, valid/ or test/), Kaggle's labels.csv or train.csv beside train/; a sign-language folder (docs: Data, Sign language and other video sequences): CE-CSL's label/ and video/, PHOENIX-2014's annotations/manual/ and features/, or a labels.csv of clips (file,text), its dev split as validation"),
    Key("data_kwargs", dict, {}, "keyword arguments for the built-in data set (train_size, val_size; fashion_mnist also path; the synthetic ones seed; synthetic_sequences also steps, classes, max_length, noise) or the image-folder reader (channels: 1 or 3; size: [height, width] to resize to, none: the images' own sizes, mixed sizes needing transforms that start with RandomResizedCrop or Resize + CenterCrop; threads; on_error: raise or skip; max_resolution: 512, the longest shorter side of an image cached at its own size, 0: full size; exif_orientation: true, each image turned upright as its EXIF orientation says, false: as stored; decode: fast, JPEGs of images at their own sizes decoded at the DCT scale (1/2, 1/4, 1/8) that keeps what the transforms use at least their output size, and streamed ones only the part the first transform crops, exact: at full size; allow_empty: false, a class folder without images is an error, true: a class all the same; a segmentation folder takes channels, size, threads, on_error, exif_orientation and reduce_zero_label: false, true for ADE20K's masks (0 is void, value v is class v - 1, as mmsegmentation's reduce_zero_label; docs: Data, Masks); a torch Dataset of dict samples: image_key and label_key, default the first of image, img, pixel_values, input and of label, labels, target; a label file also image_column and label_column, default the one column of the usual names (file_name, filename, file, image, image_id, path, id, ... / label, labels, class, category, target, breed, tags, ...), multi_label (default: true for loss bce_with_logits or multilabel_soft_margin), classes (the class names in target order), separator (of a multi-label CSV cell's labels, default spaces, '|', ';' or ','), root (the images' folder, default the label file's); a sign-language folder's clips: size (112, or [height, width]: each frame resized as it is decoded), channels, frame_stride (1), max_frames (0: all), temporal_stride (1: the model's, for the CTC check), rescale (0: none; 0.2, training clips' lengths drawn in [0.8, 1.2] x), batch_by_length (false), threads, keypoint_width (the features per frame every keypoint file must have; default the first file's), on_error (raise or skip))"),
    Key("cache", str, "auto", "where the data set lives while training: device (uint8 on the training device, no host work per step), host (host memory, batches copied over pinned memory), none (image folders only: decoded batch by batch on reader threads while training runs), auto (device if it takes at most a quarter of the free device memory, else host, else none)", choices=["auto", "device", "host", "none"]),
    Key("prefetch", int, doc="batches decoded ahead of training: image files streamed (cache none) and video clips (a thread decodes the next clip batches while the model trains)", **_core("prefetch")),
    Key("val_fraction", float, None, "share of the training data held out for validation (seeded by seed; which samples, in training_stats.json's validation) when there is no validation data: config key data without a validation split, or the caller's train_data (tensors, a gpucore data set or a torch Dataset; a DataLoader cannot be split) without val_data. Unset: 0.1 of config key data, none of the caller's data. Never applies when val_data is given", check=_fraction, valid="in [0, 1)", optional=True),
    Key("normalize", bool, True, "standardise inputs with the training set's mean and std, per channel for images (uint8 images are scaled to [0, 1] first)"),
    Key("crop_padding", int, 0, "images: random crop of the image padded by this many pixels, each epoch (training only; 0: off)", check=CORE_RANGES["crop_padding"].__contains__, valid=f"{CORE_RANGES['crop_padding']} (pixels)"),
    Key("hflip", bool, False, "images: random horizontal flip, each epoch (training only)"),
    Key("transforms", list, [], "images: torchvision.transforms.v2 names with their arguments, applied per sample on the device (a name, or a one-key mapping of the name to its arguments: [RandomResizedCrop: {size: 224}, RandomHorizontalFlip]); crop_padding and hflip are prepended as RandomCrop and RandomHorizontalFlip, normalize is the Normalize of a list without one; validation uses the deterministic form (docs: Data and transforms; every name: the transforms reference)", check=transforms_list.check, valid="a list of supported transforms"),
    # the loop
    Key("epochs", int, 10, "training epochs", check=_epochs, valid=f"> 0 and < 2^31 ({_IN_EPOCHS})"),
    Key("batch_size", int, 64, "micro-batch size per process (a batch larger than the data is all of it)", **_core("batch_size", " (samples)")),
    Key("eval_batch_size", int, 256, "batch size for validation", **_core("eval_batch_size", " (samples)")),
    Key("accumulate_grad_batches", int, doc="micro-batches per optimizer step (effective batch = batch_size x this)", **_core("accumulate_grad_batches")),
    Key("shuffle", bool, True, "reshuffle the training data every epoch (order depends only on seed and epoch)"),
    Key("sampler", str, "none", "balanced: each epoch draws as many samples as the training set has, with replacement, each class equally often in expectation (a sample's chance is 1 / its class's count), from seed and epoch like the shuffle, resumable mid-epoch; for classification with class labels (image folders, tensors, a torch Dataset in one process), not a DataLoader; none: every sample once per epoch, in the order config key shuffle says. With balanced, monitor auto follows val_balanced_accuracy", choices=["none", "balanced"]),
    Key("drop_last", bool, False, "drop the last incomplete training batch"),
    Key("loss", str, "cross_entropy", "built-in loss", choices=CORE_CHOICES["loss"]),
    Key("loss_callable", str, None, "recorded by gpucore.train when its loss argument replaced the built-in loss: the callable's name (module:qualname; functools.partial(module:qualname, keyword=...) for a partial, its arguments' values not recorded). gpucore evaluate and the report cannot call it: they report the built-in loss (with class_weights) and say so. A run whose config has it trains only when given a loss callable (a resume: the same one)", optional=True),
    Key("label_smoothing", float, doc="cross_entropy label smoothing", **_core("label_smoothing")),
    Key("class_weights", list, "none", "cross_entropy: a weight per class, torch's weight= (each batch's loss is sum(w[t_i] * l_i) / sum(w[t_i])), in training and in validation's loss: none; balanced, n_samples / (n_classes * the class's count in the training data), as scikit-learn's compute_class_weight('balanced'); or a list of one weight per class, in the classes' order. The weights used are in training_stats.json's class_weights. With weights, monitor auto follows val_balanced_accuracy", check=_class_weights, valid="none, balanced, or a list of one finite weight >= 0 per class, not all 0", words=CLASS_WEIGHT_WORDS),
    Key("ignore_index", int, None, "cross_entropy: targets of this class id (void or unlabelled pixels) count in no loss and no metric, left out of every numerator and denominator, as torch's and torchmetrics' ignore_index. Unset: 255 when the training data are a segmentation folder's masks (the void of VOC's borders and Cityscapes' trainIds, and of ADE20K's 0 with data_kwargs reduce_zero_label; black-and-white masks have no 255 left: it is their class 1), else -100, torch's default (docs: Data, Training, Metrics)", optional=True),
    Key("mixup_alpha", float, doc="mixup, as timm's Mixup: each training batch blended with its reversed order by lambda ~ Beta(alpha, alpha), the targets one-hot (with label_smoothing) and blended alike, the loss their soft-target cross-entropy; accuracy still counts the true labels (single-label classification only; 0: off)", **_core("mixup_alpha")),
    Key("cutmix_alpha", float, doc="CutMix, as timm's: a box of the reversed batch pasted in, lambda ~ Beta(alpha, alpha) its complement's share of the image (4-D image inputs; 0: off)", **_core("cutmix_alpha")),
    Key("cutmix_minmax", list, None, "CutMix box sides drawn in [min, max] shares of the image's sides instead of from lambda (turns CutMix on, with alpha 1)", check=lambda v: len(v) == 2 and all(is_number(b) and b in CORE_RANGES["cutmix_minmax"] for b in v) and v[0] < v[1], valid=f"two numbers {CORE_RANGES['cutmix_minmax']}, min < max", optional=True),
    Key("mixup_prob", float, doc="chance that a batch (pair, sample: mixup_mode) is mixed at all", **_core("mixup_prob")),
    Key("mixup_switch_prob", float, doc="with mixup_alpha and cutmix_alpha both on: chance of CutMix instead of mixup", **_core("mixup_switch_prob")),
    Key("mixup_mode", str, "batch", "one lambda (and box) per batch, per pair of samples i and N-1-i, or per sample (elem)", choices=CORE_CHOICES["mixup_mode"]),
    Key("cutmix_correct_lam", bool, True, "CutMix's lambda from the box's area after clipping at the image border"),
    Key("tta", str, "none", "test-time augmentation of validation, the report, gpucore evaluate, predict and the ONNX export (training is unchanged): hflip averages the model's outputs on each image and its horizontal mirror (segmentation outputs mirrored back first), as airbench does; images only", choices=TTA_CHOICES),
    Key("heads", int, 0, "multi-head outputs (captcha: characters per image); targets are (N, heads) class indices", check=_non_negative, valid=">= 0"),
    Key("beam_width", int, 1, "loss ctc: the prefixes a CTC prefix beam search keeps when gpucore evaluate, predict and the report decode (1: greedy decoding, the best class per step; validation's val_wer always decodes greedily)", check=_positive, valid="> 0"),
    Key("vocabulary", list, None, "loss ctc on gloss-labelled clips: the gloss vocabulary, entry 0 '<blank>' (the CTC blank), the training glosses sorted, '<unk>' last. Unset, the run takes it from its training split and records it here (config.json and every checkpoint); set (as config.json holds it, for gpucore train --resume RUN_DIR), the training split must give this vocabulary, else a ConfigError names the glosses that differ. gpucore evaluate, predict and report check a run's checkpoint against its config.json's", check=lambda v: len(v) >= 2 and all(isinstance(g, str) for g in v) and len(set(v)) == len(v), valid="a list of distinct gloss names (strings), at least the blank and one gloss", optional=True),
    Key("top_k", int, 5, "also report top-k accuracy for classification (0: off)", check=_non_negative, valid=">= 0"),
    # optimizer
    Key("optimizer", str, "adamw", "fused optimizer", choices=CORE_CHOICES["optimizer"]),
    Key("lr", float, doc="learning rate (peak rate for onecycle)", **_core("lr")),
    Key("lr_scaling", str, "none", "scale lr with the effective batch size relative to base_batch_size", choices=["none", "linear", "sqrt"]),
    Key("base_batch_size", int, 256, "the batch size lr was tuned for (lr_scaling)", check=_positive, valid="> 0"),
    Key("weight_decay", float, 0.01, "weight decay", check=_non_negative, valid=">= 0"),
    Key("no_decay_norm_and_bias", bool, True, "no weight decay for biases and normalisation weights (parameters of one dimension)"),
    Key("momentum", float, 0.9, "SGD momentum", check=lambda v: 0 <= v < 1, valid="in [0, 1)"),
    Key("nesterov", bool, False, "SGD Nesterov momentum"),
    Key("betas", list, [0.9, 0.999], "Adam(W) betas", check=lambda v: len(v) == 2 and all(is_number(b) and 0 <= b < 1 for b in v), valid="two numbers in [0, 1)"),
    Key("eps", float, 1e-8, "Adam(W) epsilon", check=_positive, valid="> 0"),
    # schedule
    Key("schedule", str, "cosine", "learning-rate schedule", choices=CORE_CHOICES["schedule"]),
    Key("warmup_epochs", float, 0.0, "linear warm-up, in epochs (may be fractional)", check=lambda v: 0 <= v < _EPOCHS_LIMIT, valid=f">= 0 and < 2^31 ({_IN_EPOCHS})"),
    Key("step_size", int, 10, "step: epochs between decays", check=_epochs, valid=f"> 0 and < 2^31 ({_IN_EPOCHS})"),
    Key("gamma", float, doc="step/multistep: decay factor", **_core("gamma")),
    Key("milestones", list, [], "multistep: epochs at which lr decays", check=lambda v: all(is_int(m) and _epochs(m) for m in v), valid=f"a list of positive integers below 2^31 ({_IN_EPOCHS})"),
    Key("min_lr", float, doc="cosine: final learning rate", **_core("min_lr")),
    Key("pct_start", float, doc="onecycle: share of the run spent rising", **_core("pct_start")),
    Key("div_factor", float, doc="onecycle: initial lr = lr / div_factor", **_core("div_factor")),
    Key("final_div_factor", float, doc="onecycle: final lr = initial lr / final_div_factor", **_core("final_div_factor")),
    # gradients
    Key("clip_grad_norm", float, doc="clip gradients to this total norm after unscaling (0: off)", **_core("clip_grad_norm")),
    Key("clip_grad_value", float, doc="clip each gradient element to [-v, v] after unscaling (0: off)", **_core("clip_grad_value")),
    Key("init_scale", float, 65536.0, "16-mixed: initial loss scale", check=_positive, valid="> 0"),
    Key("growth_interval", int, 2000, "16-mixed: good steps before the loss scale doubles", check=_positive, valid="> 0"),
    Key("max_nonfinite_steps", int, doc="stop with an error after this many optimizer steps in a row with inf/NaN gradients", **_core("max_nonfinite_steps")),
    # weight average
    Key("ema_decay", float, doc="keep an exponential moving average (EMA) of the weights and float buffers, updated after every taken optimizer step with this decay (timm's ModelEmaV3; 0: off); validation then also reports val_ema_* metrics, which monitor may pick", **_core("ema_decay")),
    Key("ema_warmup", bool, False, "ema_decay warm-up as timm's use_warmup: the decay after n updates is min(ema_decay, 1 - (1 + n / ema_warmup_gamma)^-ema_warmup_power)"),
    Key("ema_warmup_gamma", float, doc="ema_warmup: gamma (timm's warmup_gamma)", **_core("ema_warmup_gamma")),
    Key("ema_warmup_power", float, doc="ema_warmup: power (timm's warmup_power; 2/3 for long runs, 3/4 for shorter ones)", **_core("ema_warmup_power")),
    # device and precision
    Key("device", str, "auto", "auto, cpu, cuda, cuda:N or mps"),
    Key("no_cuda", bool, False, "never use CUDA in auto"),
    Key("no_mps", bool, False, "never use MPS in auto"),
    Key("use_cuda", bool, True, "false = no_cuda (the key classifier projects' config.yaml files use)"),
    Key("precision", str, "auto", "auto, bf16-mixed, 16-mixed, 32 or 64", choices=CORE_CHOICES["precision"]),
    Key("tf32", str, "auto", "TF32 matmul/cuDNN on Ampere and newer", choices=CORE_CHOICES["tf32"]),
    Key("cudnn_benchmark", str, "auto", "cuDNN autotuning on CUDA (auto: on, off with deterministic: true)", choices=CORE_CHOICES["cudnn_benchmark"]),
    Key("channels_last", str, "auto", "channels-last memory format for the model and 4-D inputs; auto: on for conv nets on the CPU and on CUDA, where oneDNN's and cuDNN's convolutions run faster in it (python -m bench layout)", choices=CORE_CHOICES["channels_last"]),
    Key("compile", bool, False, "torch.compile the model first"),
    Key("cuda_graphs", str, "auto", f"capture each optimizer step (mixup/CutMix, forward, loss, backward, clipping, optimizer, loss scale, schedule, metrics, EMA) as one CUDA graph after {GRAPH_WARMUP_STEPS} eager warm-up steps and replay it: true (warns when a run cannot: another device, compile, devices > 1, accumulate_grad_batches > 1, loss ctc, a model that syncs with the host), auto (the same, silently: every CUDA run that can; on an H100 the step of a small CNN ran 3.4-3.6x faster, and never slower), false. The short last batch and validation run eagerly; training_stats.json's cuda_graphs says what ran", choices=CORE_CHOICES["cuda_graphs"]),
    Key("deterministic", bool, False, "deterministic algorithms only (torch.use_deterministic_algorithms): on a GPU what makes two runs, or a stopped and resumed one, bitwise equal"),
    Key("devices", int, 1, "processes for data-parallel training on this machine (one per GPU; gloo on CPU); >1 starts them itself, like torchrun --nproc_per_node", check=_positive, valid="> 0"),
    Key("dist_timeout", int, 600, "seconds a collective (or the whole devices > 1 job) may wait before the job stops with an error", check=lambda v: 0 < v < 2**31, valid="> 0 and < 2^31 (seconds)"),
    Key("seed", int, 42, "seed for weights, data order and augmentation", check=_non_negative, valid=">= 0"),
    # evaluation, checkpoints, logs
    Key("monitor", str, "auto", "metric for best-model tracking and early stopping, e.g. val_accuracy, val_balanced_accuracy, val_loss, val_ema_accuracy (auto: the task's primary metric on the validation data: val_accuracy for classification, val_balanced_accuracy instead when class_weights is set, sampler is balanced or the largest training class has at least 10x the samples of the smallest (said on the terminal); val_miou for cross_entropy masks, val_iou for segmentation (dice_bce), val_seq_accuracy for sequences, val_accuracy (the labels') for multi-label outputs (bce_with_logits, multilabel_soft_margin without heads); else val_loss, else train_loss)"),
    Key("mode", str, "auto", "min or max for the monitored metric (auto: the task's: min for the loss, max for the others)", choices=["auto", "min", "max"]),
    Key("patience", int, 0, "early stopping: epochs without improvement before stopping (0: off)", check=_non_negative, valid=">= 0"),
    Key("min_delta", float, 0.0, "early stopping: smallest change that counts as improvement", check=_non_negative, valid=">= 0"),
    Key("run_dir", str, "runs", "parent folder of run directories"),
    Key("name", str, "", "run name, the run directory's name, one folder in run_dir (default: the config file's name, else the model's: config key model's, or for a model given to train() its built-in name or class name)", check=is_folder_name, valid=_FOLDER_NAME),
    Key("save_every_n_epochs", int, 0, "also keep a checkpoint every N epochs (0: off)", check=_non_negative, valid=">= 0"),
    Key("keep_last_k", int, 3, "how many of the every-N checkpoints to keep", check=_positive, valid="> 0"),
    Key("checkpoint_every_n_steps", int, 0, "also checkpoint mid-epoch every N optimizer steps of the epoch, to checkpoints/step.pt, written by a background thread (0: off)", check=lambda v: 0 <= v < 2**31, valid=">= 0 and < 2^31 (steps)"),
    Key("checkpoint_every_minutes", float, 0.0, "also checkpoint mid-epoch once this many minutes passed since the last checkpoint, to checkpoints/step.pt (0: off)", check=lambda v: 0 <= v < 1e9, valid=">= 0 and < 1e9 (minutes)"),
    Key("log_every_n_steps", int, doc="optimizer steps between host reads of the running metrics (progress bar, the callbacks' on_log)", **_core("log_every_n_steps")),
    Key("progress", bool, True, "show a progress bar (tqdm when installed, tqdm.auto's: Jupyter's widget in a notebook; else a line per epoch)"),
    Key("loggers", list, ["csv", "tensorboard"], "where rank 0 records the run besides metrics.jsonl (default: csv, and tensorboard where the tensorboard package is installed): csv (metrics.csv, a row per logged step and per epoch), tensorboard (scalars per epoch and the hyperparameters in tensorboard/; needs the tensorboard package), mlflow (params, metrics per step and epoch, artifacts; needs gpucore's mlflow extra); a logger that fails is one warning and training goes on (docs: Training, Experiment tracking)", check=lambda v: all(name in LOGGERS for name in v) and len(set(v)) == len(v), valid=f"a list of {', '.join(LOGGERS)}, each at most once"),
    Key("mlflow_tracking_uri", str, None, "loggers mlflow: the tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///RUN_DIR/mlflow.db, a SQLite database beside the run directories); credentials in it are recorded masked (https://***@host), so a resume from config.json needs it again: MLflow's MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) keep them out of it", optional=True),
    Key("mlflow_experiment", str, "", "loggers mlflow: the experiment (default: the config's name)"),
    Key("mlflow_log_model", bool, False, "loggers mlflow: also log checkpoints/best.pt as an artifact at the end"),
    Key("report", bool, True, "at the end of training write report.html, plots/ and per_class.json in the run directory (curves, confusion matrices, predictions, top losses with Grad-CAM, a training batch); see gpucore report"),
    Key("report_cam_layer", str, "auto", "the report's Grad-CAM layer: a dotted module name such as layer4 or features.7 (auto: the last layer with a spatial output before the head)"),
    Key("resume", str, None, "auto (the run's last checkpoint, if any) or a checkpoint path; the resumed run goes on with its own keys: only " + ", ".join(RESUME_SETTABLE) + " may differ from the checkpoint's (any other is a ConfigError naming it)", optional=True),
    Key("accept_changed_data", bool, False, "resume a run whose data changed since its checkpoint (files added, removed, renamed or resized; other tensors), with a warning naming what changed; the interrupted epoch's order and a val_fraction split then differ from the run's. false: such a resume is refused, naming what changed (every checkpoint records its data's identity: classes, files per class, a fingerprint)"),
    Key("on_oom", str, "raise", "on CUDA out of memory: raise an error with the figures and what to change", choices=["raise", "reduce_batch"]),
]
KEY_BY_NAME = {key.name: key for key in KEYS}

def _annotation(key: Key):
    return Optional[key.type] if key.optional else key.type


def _config_to_dict(self) -> dict:
    """The configuration as a dict of its keys (a copy), as config.json holds it.

    Returns:
        {key: value} for every key.
    """
    return dataclasses.asdict(self)


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig",
    [(key.name, _annotation(key), dataclasses.field(default_factory=(lambda d=key.default: json.loads(json.dumps(d)))))
     for key in KEYS],
    frozen=True,
    namespace={"__doc__": "A checked gpucore training configuration (load_config makes one); every field is a key of "
                          "KEYS, of that key's type. Frozen: dataclasses.replace(config, key=value) gives a changed "
                          "copy, unchecked; load_config(config, {key: value}) a checked one.\n\nAttributes:\n"
                          + "\n".join(f"    {key.name}: {key.doc}" for key in KEYS),
               "__module__": __name__,
               "to_dict": _config_to_dict},
)


# Names other tools use for our keys, so that a near miss of one of them still finds the key.
ALIASES = {
    "learning_rate": "lr", "scheduler": "schedule", "lr_scheduler": "schedule", "max_epochs": "epochs",
    "num_epochs": "epochs", "grad_accum": "accumulate_grad_batches", "gradient_accumulation_steps": "accumulate_grad_batches",
    "accumulate": "accumulate_grad_batches", "amp": "precision", "mixed_precision": "precision",
    "test_batch_size": "eval_batch_size", "max_grad_norm": "clip_grad_norm", "gradient_clip_val": "clip_grad_norm",
    "output_dir": "run_dir", "save_dir": "run_dir", "num_classes": "model_kwargs", "warmup_steps": "warmup_epochs",
    "in_chans": "model_kwargs", "in_channels": "model_kwargs", "layer_decay": "lr_layer_decay",
    "pretrained_weights": "pretrained", "weights": "pretrained", "freeze_backbone": "freeze",
}


def _closest(name: str) -> str:
    candidates = list(KEY_BY_NAME) + list(ALIASES)
    matches = difflib.get_close_matches(name.lower(), candidates, n=1, cutoff=0.6)
    if not matches:
        return ""
    return f" Did you mean '{ALIASES.get(matches[0], matches[0])}'?"


def unknown_key_error(name: str) -> ConfigError:
    return ConfigError(f"unknown config key '{name}'.{_closest(name)} Valid keys: {', '.join(sorted(KEY_BY_NAME))}")


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def _coerce(key: Key, value: Any, where: str) -> Any:
    """`value` as the key's type; strings from --set are parsed. Raises ConfigError naming the key."""
    if value is None:
        if key.optional:
            return None
        raise ConfigError(f"{where}: config key '{key.name}' must not be empty (default {key.default!r})")
    expected = key.type
    if isinstance(value, str) and value.strip().lower() in key.words:
        return value.strip().lower()
    try:
        if expected is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise TypeError
        if expected is int:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, int):
                result = value
            elif isinstance(value, float) and value.is_integer():
                result = int(value)
            elif isinstance(value, str):
                result = _whole_number(value.strip())
            else:
                raise TypeError
            if not -_INT64_LIMIT <= result < _INT64_LIMIT:
                raise OverflowError
            return result
        if expected is float:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, (int, float)):
                result = float(value)
            elif isinstance(value, str):
                result = float(value.strip())
            else:
                raise TypeError
            if not math.isfinite(result):
                raise ValueError
            return result
        if expected is str:
            if isinstance(value, bool):  # YAML turns `tf32: true` into a bool
                return "true" if value else "false"
            if isinstance(value, (str, int, float)):
                text = str(value).strip()
                # Adam, Cosine: a choice in another case (torch's class names) is that choice.
                return next((choice for choice in key.choices or () if choice.lower() == text.lower()), text)
            raise TypeError
        if expected is list:
            if isinstance(value, str):
                value = _parse_flow(value)
            if isinstance(value, tuple):
                value = list(value)
            if not isinstance(value, list):
                raise TypeError
            return value
        if expected is dict:
            if isinstance(value, str):
                value = _parse_flow(value)
            if not isinstance(value, Mapping):
                raise TypeError
            return dict(value)
    except OverflowError:
        limit = "integers must be below 2^63 in size" if expected is int else "too large for a number"
        raise ConfigError(f"{where}: config key '{key.name}' is {value!r}, out of range: {limit} "
                          f"(default {key.default!r})") from None
    except (TypeError, ValueError):
        pass
    words = f" or one of {', '.join(key.words)}" if key.words else ""
    raise ConfigError(
        f"{where}: config key '{key.name}' must be {_type_name(expected)}{words}, got {type(value).__name__} {value!r}"
    )


def _whole_number(text: str) -> int:
    """An integer written on the shell: '16', or '16.0' as a whole float from Python or YAML is taken."""
    try:
        return int(text)
    except ValueError:
        number = float(text)
        if not number.is_integer():
            raise
        return int(number)


def _parse_flow(text: str) -> Any:
    """A list or mapping written on the shell: JSON, or YAML's flow style ({size: [20, 20]})."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


def _type_name(expected: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a finite number", str: "a string",
            list: "a list (JSON or YAML flow style: [1, 2])",
            dict: "a mapping (JSON or YAML flow style: {size: [20, 20]})"}[expected]


def _validate(config, origins: Mapping[str, str]) -> None:
    """origins: where each key that was given came from (a file, "override"), for the error message."""
    for key in KEYS:
        value = getattr(config, key.name)
        if value is None:
            continue
        where = f"{origins[key.name]}: " if key.name in origins else ""
        if key.choices and value not in key.choices:
            raise ConfigError(f"{where}config key '{key.name}' is '{value}'; valid values: {', '.join(key.choices)}")
        if key.check and not key.check(value):
            raise ConfigError(f"{where}config key '{key.name}' is {value!r}; it must be {key.valid}")


def _duplicate_key(name: Any, line: Optional[int] = None) -> ConfigError:
    again = f" (again on line {line})" if line is not None else ""
    return ConfigError(f"key '{name}' is given twice{again}; keep one (YAML and JSON would silently use the last)")


def _no_duplicate_keys(pairs) -> dict:
    mapping = {}
    for name, value in pairs:
        if name in mapping:
            raise _duplicate_key(name)
        mapping[name] = value
    return mapping


def _load_yaml(text: str) -> Any:
    """yaml.safe_load, except that a key given twice in one mapping is an error, not 'the last one wins'."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        result = {}
        for key_node, value_node in node.value:
            name = loader.construct_object(key_node, deep=True)
            try:
                seen = name in result
            except TypeError:  # a list or mapping as a key
                raise ConfigError(f"line {key_node.start_mark.line + 1}: a key must be a name, got {name!r}") from None
            if seen:
                raise _duplicate_key(name, key_node.start_mark.line + 1)
            result[name] = loader.construct_object(value_node, deep=True)
        return result

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=Loader)


def _read_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file '{path}' does not exist")
    extension = os.path.splitext(path)[1].lower()
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                          "save it as UTF-8") from exc
    if extension not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"config file '{path}' must end in .yaml, .yml or .json")
    try:
        data = _load_yaml(text) if extension != ".json" else json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ConfigError as exc:
        raise ConfigError(f"config file '{path}': {exc}") from exc
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError: report where
        raise ConfigError(f"config file '{path}' is not valid {extension[1:].upper()}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys to values, got {type(data).__name__}")
    return data


def parse_overrides(pairs: Sequence[str]) -> dict:
    """['lr=0.01', 'data_kwargs.train_size=12000'] -> {'lr': '0.01', 'data_kwargs.train_size': '12000'}; values are
    typed by load_config, dotted keys set one entry of a mapping key."""
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects key=value or key.entry=value, got '{pair}'")
        overrides[name.strip()] = value
    return overrides


def _set_entry(values: dict, dotted: str, value: Any, where: str) -> None:
    """--set data_kwargs.train_size=12000: one entry (nested: a.b.c) of mapping key `data_kwargs`, the rest of
    the mapping kept as the file or the defaults had it; a string value is read as YAML (12000 is a number)."""
    name, *path = dotted.split(".")
    key = KEY_BY_NAME.get(name)
    if key is None:
        raise unknown_key_error(name)
    if key.type is not dict or not all(path):
        raise ConfigError(f"{where}: '{dotted}' sets an entry of a mapping; config key '{name}' is "
                          f"{_type_name(key.type)}" if all(path) else f"{where}: '{dotted}' has an empty entry name")
    mapping = json.loads(json.dumps(values.get(name, key.default)))
    target = mapping
    for entry in path[:-1]:
        if not isinstance(target.setdefault(entry, {}), dict):
            raise ConfigError(f"{where}: '{dotted}': entry '{entry}' of config key '{name}' is "
                              f"{target[entry]!r}, not a mapping")
        target = target[entry]
    target[path[-1]] = _parse_flow(value) if isinstance(value, str) else value
    values[name] = mapping


def default_loggers() -> list:
    """Config key loggers when a config leaves it out: csv, and tensorboard only where its package is installed, so
    that the default names no package gpucore does not install (a logger named explicitly and missing is a warning)."""
    return ["csv", "tensorboard"] if importlib.util.find_spec("tensorboard") else ["csv"]


def run_name_of(model: str) -> str:
    """The run name (config key name) an unnamed run gets from the model's name, one folder name:
    'torchvision:resnet18' -> 'torchvision_resnet18', 'timm:hf-hub:org/vit' -> 'timm_hf-hub_org_vit'."""
    return model.replace(":", "_").replace(".", "_").replace("/", "_").replace("\\", "_")


def load_config(source: Any = None, overrides: Optional[Mapping[str, Any]] = None):
    """Build a checked TrainConfig from a path, a dict or a TrainConfig, and overrides.

    Args:
        source: a .yaml/.yml/.json path, a dict of keys, a TrainConfig, or None for the defaults.
        overrides: keys to set on top (`{"lr": 0.01}`; a dotted key such as `data_kwargs.train_size` sets one entry
            of a mapping key).

    Returns:
        The frozen, checked TrainConfig.

    Raises:
        ConfigError: an unknown key (naming the closest valid one), a wrong type or range, an unreadable file.
    """
    name_hint = ""
    if source is None:
        data, where = {}, "defaults"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        data, where = _read_file(path), f"config file '{path}'"
        name_hint = os.path.splitext(os.path.basename(path))[0]
    elif isinstance(source, Mapping):
        data, where = dict(source), "config"
    elif dataclasses.is_dataclass(source) and type(source).__name__ == "TrainConfig":
        data, where = dataclasses.asdict(source), "config"
    else:
        raise ConfigError(f"config must be a path, a dict or a TrainConfig, got {type(source).__name__}")

    values, origins = {}, {}
    for layer, origin in ((data, where), (dict(overrides or {}), "override")):
        for name, value in layer.items():
            if not isinstance(name, str):
                raise ConfigError(f"{where}: config keys are names, got {type(name).__name__} {name!r} as a key "
                                  "(YAML reads `null:`, `1:` and `true:` as such; valid keys: "
                                  f"{', '.join(sorted(KEY_BY_NAME))})")
            if origin == "override" and "." in name:
                _set_entry(values, name, value, origin)
                origins[name.split(".")[0]] = origin
                continue
            key = KEY_BY_NAME.get(name)
            if key is None:
                raise unknown_key_error(name)
            values[name], origins[name] = _coerce(key, value, origin), origin
    if values.get("use_cuda") is False:
        values["no_cuda"] = True
    if "loggers" not in values:
        values["loggers"] = default_loggers()
    if not values.get("name"):
        values["name"] = name_hint or run_name_of(values.get("model", KEY_BY_NAME["model"].default))
    config = TrainConfig(**values)
    _validate(config, origins)
    return config


def with_real_values(config):
    """`config`, ready to train. A value read back from a run's files (config.json, a checkpoint; `gpucore train
    --resume RUN_DIR` starts from config.json) holds its URI's credentials masked (redact.py), and gpucore never
    connects with that: mlflow_tracking_uri, where mlflow logs, is then $MLFLOW_TRACKING_URI when that is the same URI
    with its credentials; any other masked value that is used is a ConfigError naming its key."""
    real = {}
    for key in KEYS:
        value = getattr(config, key.name)
        if not holds_mask(value):
            continue
        if key.name == "mlflow_tracking_uri":
            if "mlflow" not in config.loggers:
                continue  # nothing connects with it
            environment = os.environ.get("MLFLOW_TRACKING_URI", "")
            if environment and not holds_mask(environment) and masked(environment) == value:
                real[key.name] = environment
                continue
            raise ConfigError(masked_value_message(key.name, value, ", or $MLFLOW_TRACKING_URI"))
        raise ConfigError(masked_value_message(key.name, value))
    return dataclasses.replace(config, **real) if real else config
