"""Draws the docs' pictures into docs/images/ (committed; run again after a change they show):

- training_curve.png: plots/curves.png of a short run of the default model on the real Fashion-MNIST
  (the synthetic stand-in where the files are missing, as `data: fashion_mnist` does);
- gradcam_overlays.png: Grad-CAM of that run's model on test images, each with its predicted and true class;
- architecture.png: how gpucore is built, as a diagram (docs/architecture.md tells it in words).

    python scripts/draw_docs_figures.py [--epochs 3] [--train-size 20000]
"""
import argparse
import pathlib
import shutil
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

import gpucore  # noqa: E402

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"


def train_and_draw_cams(epochs: int, train_size: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        result = gpucore.train({"data": "fashion_mnist", "data_kwargs": {"train_size": train_size, "val_size": 2000},
                                "epochs": epochs, "run_dir": folder, "name": "figures", "progress": False,
                                "loggers": []})
        shutil.copy(pathlib.Path(result.run_dir) / "plots" / "curves.png", IMAGES / "training_curve.png")
        model = gpucore.load(str(pathlib.Path(result.checkpoint_dir) / "best.pt"), device="cpu")
        images, targets = gpucore.data.builtin.fashion_mnist(val_size=12)[1]
    shown = images[:12]
    x = model.preprocess(shown)
    predicted = model(shown).argmax(1)
    cams = gpucore.gradcam(model.module, "auto", x)
    overlays = cams.overlay(shown)
    figure, axes = plt.subplots(2, 6, figsize=(9, 4.4))
    for index, axis in enumerate(axes.flat):
        axis.imshow(overlays[index].numpy())
        right = int(predicted[index]) == int(targets[index])
        axis.set_title(f"{model.classes[int(predicted[index])]}\n(true: {model.classes[int(targets[index])]})",
                       fontsize=7, color="black" if right else "red")
        axis.axis("off")
    figure.suptitle(f"Grad-CAM ({cams.method}, layer {', '.join(cams.layers)}) of the predicted class", fontsize=9)
    figure.tight_layout()
    figure.savefig(IMAGES / "gradcam_overlays.png", dpi=110)
    plt.close(figure)


BOXES = {  # name: (x, y, width, height, colour, text)
    "user": (0.5, 8.6, 9.0, 1.0, "#e8eaf6", "your script, notebook or config: gpucore.train(cfg), gpucore train, "
                                           "gpucore.gradcam, report / evaluate / predict / export"),
    "python": (0.5, 6.4, 9.0, 1.6, "#e3f2fd", "python/gpucore: config (KEYS, TrainConfig), training/ (fit loop, "
                                             "callbacks, loggers, checkpoints),\ndata/ (readers, DataLoader), models/, "
                                             "tasks/, evaluation/, report/, cam/, device/"),
    "bindings": (0.5, 5.2, 9.0, 0.7, "#fff3e0", "gpucore._C: pybind11 bindings (csrc/python/), thin, one file per area"),
    "core": (0.5, 2.9, 9.0, 1.8, "#e8f5e9", "C++ core (csrc/): train/ engine (forward, loss, backward, fused optimizer,"
                                           " loss scale, schedule,\nmetrics, EMA, CUDA graph), batches/ (sources, "
                                           "streaming, transforms), data/ readers, device/"),
    "cpu": (0.5, 0.5, 4.2, 1.8, "#fce4ec", "torch ops, CPU kernels\n(OpenMP, AVX2/AVX-512 clones)"),
    "cuda": (5.3, 0.5, 4.2, 1.8, "#f3e5f5", "torch ops, CUDA kernels\n(on an emulated grid without a GPU)"),
}
ARROWS = [("user", "python"), ("python", "bindings"), ("bindings", "core"), ("core", "cpu"), ("core", "cuda")]


def draw_architecture() -> None:
    figure, axis = plt.subplots(figsize=(9, 6.2))
    for x, y, width, height, colour, text in BOXES.values():
        axis.add_patch(FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0.05", facecolor=colour,
                                      edgecolor="#455a64"))
        axis.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=8.5, wrap=True)
    for start, end in ARROWS:
        x0, y0, w0, _, _, _ = BOXES[start]
        x1, y1, w1, h1, _, _ = BOXES[end]
        axis.add_patch(FancyArrowPatch((x1 + w1 / 2, y0 - 0.02), (x1 + w1 / 2, y1 + h1 + 0.08), arrowstyle="-|>",
                                       mutation_scale=14, color="#455a64"))
    axis.text(5.0, 0.1, "all on LibTorch (the torch installed in the environment), one process per GPU under DDP",
              ha="center", fontsize=8, style="italic")
    axis.set_xlim(0, 10)
    axis.set_ylim(0, 9.8)
    axis.axis("off")
    figure.tight_layout()
    figure.savefig(IMAGES / "architecture.png", dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=20000)
    arguments = parser.parse_args()
    IMAGES.mkdir(parents=True, exist_ok=True)
    draw_architecture()
    train_and_draw_cams(arguments.epochs, arguments.train_size)
    print(f"wrote {', '.join(sorted(p.name for p in IMAGES.glob('*.png')))} in {IMAGES}")


if __name__ == "__main__":
    main()
