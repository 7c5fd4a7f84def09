"""Data, as a chain: the native readers (readers.py: samples in memory, labeled_data.py, or image files decoded on
demand, image_files.py; class_folders.py, folders as ImageFolder reads them), the built-in data sets (builtin.py;
the synthetic ones in synthetic.py), gloss-labelled clips (sign_layouts.py, the layouts; clip_sequences.py, their
batches; video.py, decoding them) and the val_fraction split (split.py) -> one plan per data set (plan.py;
identity.py, what the data set is) -> its batches per epoch from the C++ batch sources (epoch_data.py);
gpucore.DataLoader (loader.py), tensors as model inputs (tensor_inputs.py), files to predict on (input_files.py) and
the PNG writer (png.py). `gpucore.data.read_npz(...)`, `gpucore.data.ImageFiles` and the other readers are
re-exported here, where users have always found them."""
from .image_files import ImageFiles
from .labeled_data import LabeledData
from .readers import (
    IMAGE_EXTENSIONS,
    captcha_labels,
    from_tensors,
    max_image_pixels,
    read_csv,
    read_files,
    read_idx,
    read_image_folder,
    read_label_file,
    read_npy,
    read_npz,
    read_segmentation,
    set_max_image_pixels,
)

__all__ = ["IMAGE_EXTENSIONS", "ImageFiles", "LabeledData", "captcha_labels", "from_tensors", "max_image_pixels",
           "read_csv", "read_files", "read_idx", "read_image_folder", "read_label_file", "read_npy", "read_npz",
           "read_segmentation", "set_max_image_pixels"]
