"""The data sets read from files (an IDX folder, an image folder, captcha file names, a CSV list, segmentation pairs,
NPY files, Fashion-MNIST wherever it lies) and training on them."""
import os

import numpy as np
import pytest
import torch

import gpucore
from gpucore import data
from conftest import write_idx, write_png


def test_idx_data_set_and_training_on_an_idx_folder(tmp_path):
    (images, labels), (val_images, val_labels) = gpucore.data.synthetic.synthetic_fashion(train_size=600, val_size=100)
    write_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), images[:, 0].numpy(), compress=True)
    write_idx(str(tmp_path / "train-labels-idx1-ubyte.gz"), labels.numpy().astype(np.uint8), compress=True)
    write_idx(str(tmp_path / "t10k-images-idx3-ubyte"), val_images[:, 0].numpy())
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte"), val_labels.numpy().astype(np.uint8))
    dataset = data.read_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), str(tmp_path / "train-labels-idx1-ubyte.gz"))
    assert torch.equal(dataset.inputs, images) and torch.equal(dataset.targets, labels)
    result = gpucore.train(dict(data=str(tmp_path), epochs=1, progress=False, run_dir=str(tmp_path / "runs")))
    # validation ran on the t10k files: the trained model's accuracy on them, computed here, is what was reported
    model = result.model.eval().cpu()  # trained wherever device auto chose
    stats = gpucore.data.tensor_inputs.input_stats(images)
    mean, std = torch.tensor(stats[0])[:, None, None], torch.tensor(stats[1])[:, None, None]
    with torch.no_grad():
        predicted = model((val_images.float() / 255 - mean) / std).argmax(1)
    assert result.history[0]["val_accuracy"] == pytest.approx((predicted == val_labels).float().mean().item(), abs=0.011)
    write_idx(str(tmp_path / "short-labels"), labels.numpy()[:10].astype(np.uint8))
    with pytest.raises(gpucore.ConfigError, match="short-labels"):
        data.read_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), str(tmp_path / "short-labels"))


def make_image_folder(root, classes=3, per_class=12, size=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for label in range(classes):
        os.makedirs(root / f"class_{label}", exist_ok=True)
        for i in range(per_class):
            image = torch.randint(0, 60, (size, size, 3), generator=generator, dtype=torch.uint8)
            image[:, :, label] += 150  # the class is the dominant colour
            write_png(root / f"class_{label}" / f"{i:03d}.png", image)


def test_image_folder_same_for_1_and_4_threads_and_trains(tmp_path):
    make_image_folder(tmp_path / "data" / "train")
    make_image_folder(tmp_path / "data" / "val", per_class=4, seed=1)
    one = data.read_image_folder(str(tmp_path / "data" / "train"), threads=1)
    four = data.read_image_folder(str(tmp_path / "data" / "train"), threads=4)
    assert torch.equal(one.inputs, four.inputs) and torch.equal(one.targets, four.targets)
    assert one.classes == ["class_0", "class_1", "class_2"] and one.inputs.shape == (36, 3, 10, 10)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(300, 3))
    result = gpucore.train(dict(data=str(tmp_path / "data"), epochs=10, batch_size=12, progress=False,
                                run_dir=str(tmp_path / "runs"), lr=0.01), model=net)
    assert result.best_metric == 1.0


def test_files_captcha_names_csv_and_segmentation(tmp_path):
    for text in ("ab12", "9zz0"):
        write_png(tmp_path / f"{text}.png", torch.zeros(4, 8, 3, dtype=torch.uint8))
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    captcha = data.read_files(sorted(str(p) for p in tmp_path.glob("*.png")),
                         label_from_name=data.captcha_labels(alphabet, 4))
    assert captcha.targets.tolist() == [[9, 35, 35, 0], [10, 11, 1, 2]]
    with pytest.raises(gpucore.ConfigError, match="'toolong' is not 4 characters"):
        data.captcha_labels(alphabet, 4)("toolong")
    (tmp_path / "list.csv").write_text("image,label\nab12.png,3\n9zz0.png,5\n")
    listed = data.read_csv(str(tmp_path / "list.csv"))
    assert listed.targets.tolist() == [3, 5]
    images, masks = tmp_path / "img", tmp_path / "mask"
    images.mkdir()
    masks.mkdir()
    mask = torch.zeros(5, 5, dtype=torch.uint8)
    mask[1:3, 1:4] = 255
    for name in ("a", "b"):
        write_png(images / f"{name}.png", torch.randint(0, 256, (5, 5, 3), dtype=torch.uint8))
        write_png(masks / f"{name}.png", mask)
    pairs = data.read_segmentation(str(images), str(masks))
    assert pairs.inputs.shape == (2, 3, 5, 5) and pairs.targets.shape == (2, 5, 5)
    assert pairs.targets.sum().item() == 2 * 6
    write_png(images / "c.png", torch.zeros(5, 5, 3, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match="'c' has an image or a mask but not both"):
        data.read_segmentation(str(images), str(masks))


def test_npy_folder_and_dataset_objects_in_train(tmp_path):
    (images, labels), _ = gpucore.data.synthetic.synthetic_fashion(train_size=256, val_size=1)
    np.save(tmp_path / "x.npy", images[:, 0].numpy())
    np.save(tmp_path / "y.npy", labels.numpy())
    loaded = data.read_npy(str(tmp_path / "x.npy"), str(tmp_path / "y.npy"))
    assert torch.equal(loaded.inputs, images)
    result = gpucore.train(dict(epochs=1, progress=False, run_dir=str(tmp_path / "r"), val_fraction=0.0),
                           train_data=loaded)
    assert result.steps == 4


def write_fashion_mnist(folder, train=40, test=12, seed=0):
    """Fashion-MNIST-named IDX files (gzip, as Debian ships them) of random images; returns the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", train), ("t10k", test)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)
        write_idx(str(folder / f"{split}-images-idx3-ubyte.gz"), images, compress=True)
        write_idx(str(folder / f"{split}-labels-idx1-ubyte.gz"), labels, compress=True)
        arrays[split] = (images, labels)
    return arrays


def test_fashion_mnist_is_found_by_path_environment_and_places(tmp_path, monkeypatch):
    from gpucore.data import builtin as builtin_data

    arrays = write_fashion_mnist(tmp_path / "fm")
    monkeypatch.delenv(builtin_data.FASHION_MNIST_ENV, raising=False)
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [str(tmp_path / "nowhere"), str(tmp_path / "fm")])
    for kwargs in ({"path": str(tmp_path / "fm")}, {}):
        (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", kwargs, val_fraction=0.1, seed=0)
        assert torch.equal(x[:, 0], torch.from_numpy(arrays["train"][0])) and x.shape == (40, 1, 28, 28)
        assert torch.equal(yv, torch.from_numpy(arrays["t10k"][1]).long())  # the test set is the validation split
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [])
    monkeypatch.setenv(builtin_data.FASHION_MNIST_ENV, str(tmp_path / "fm"))
    (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {"train_size": 8, "val_size": 5}, val_fraction=0.1, seed=0)
    assert torch.equal(x[:, 0], torch.from_numpy(arrays["train"][0][:8])) and xv.shape == (5, 1, 28, 28)
    with pytest.raises(gpucore.ConfigError, match=r"path '.*empty' holds no Fashion-MNIST IDX files"):
        builtin_data.load_data("fashion_mnist", {"path": str(tmp_path / "empty")}, val_fraction=0.1, seed=0)


def test_fashion_mnist_nowhere_warns_where_to_put_it_and_uses_the_synthetic_set(tmp_path, monkeypatch):
    from gpucore.data import builtin as builtin_data

    monkeypatch.delenv(builtin_data.FASHION_MNIST_ENV, raising=False)
    monkeypatch.setattr(builtin_data, "FASHION_MNIST_PLACES", [str(tmp_path / "nowhere")])
    with pytest.warns(RuntimeWarning, match=r"Fashion-MNIST's files were not found .*dataset-fashion-mnist.*SYNTHETIC"):
        (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {"train_size": 30, "val_size": 10}, 0.1, 0)
    synthetic = gpucore.data.synthetic.synthetic_fashion(train_size=30, val_size=10)
    assert torch.equal(x, synthetic[0][0]) and xv.shape[0] == 10


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"), reason="dataset-fashion-mnist not installed")
def test_the_real_fashion_mnist_from_debians_package():
    from gpucore.data import builtin as builtin_data

    (x, y), (xv, yv) = builtin_data.load_data("fashion_mnist", {}, val_fraction=0.1, seed=0)
    assert x.shape == (60000, 1, 28, 28) and xv.shape == (10000, 1, 28, 28)
    assert torch.bincount(y).tolist() == [6000] * 10 and torch.bincount(yv).tolist() == [1000] * 10
