"""The CSLR models by name (issue 72): cslr_resnet18 (per-frame ResNet-18, temporal convolutions, BiLSTM) and
cslr_keypoints, their output steps from their stated temporal stride, one engine step against the same step in plain
PyTorch, and a run on a torch Dataset of clips made from photos whose targets carry the clips' frame counts."""
import copy
import functools
import importlib.util
import math

import pytest
import torch
from torch import nn

import gpucore
from gpucore.models.registry import build_model
from gpucore.tasks import task_for
from gpucore.tasks.sequences import word_errors
from conftest import batches, engine

needs_torchvision = pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
GLOSSES = ("<blank>", "astronaut", "coffee", "chelsea", "rocket")  # a vocabulary: entry 0 the CTC blank


@functools.lru_cache(maxsize=None)
def photos(size=24):
    """One small grey-level photo per gloss (scikit-image's), size x size, in [0, 1]."""
    from skimage import data, transform

    images = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    return [torch.tensor(transform.resize(image.mean(-1), (size, size), anti_aliasing=True), dtype=torch.float32)
            / 255 for image in images]


class PhotoClips(torch.utils.data.Dataset):
    """Clips of 1..3 glosses, each gloss 8..10 frames of its photo drifting a pixel a frame, with noise (at least two
    output steps a gloss: every clip fits CTC, repeated glosses too); keypoints:
    each frame's photo rows averaged (24 numbers), else the frames themselves (3 x 24 x 24). Targets: the clip's frame
    count, then its gloss ids (1..4)."""

    sequence_lengths_in_target = True
    classes = list(GLOSSES)

    def __init__(self, count, seed, keypoints, size=24):
        generator = torch.Generator().manual_seed(seed)
        pictures = photos(size)
        self.samples = []
        for _ in range(count):
            glosses = torch.randint(1, 5, (int(torch.randint(1, 4, (1,), generator=generator)),), generator=generator)
            frames = []
            for gloss in glosses.tolist():
                for shift in range(int(torch.randint(8, 11, (1,), generator=generator))):
                    frames.append(torch.roll(pictures[gloss - 1], shift, 1)
                                  + 0.05 * torch.randn(size, size, generator=generator))
            clip = torch.stack(frames)
            clip = clip.mean(2) * 4 if keypoints else clip.unsqueeze(1).expand(-1, 3, -1, -1).contiguous()
            self.samples.append((clip, torch.cat([torch.tensor([len(frames)]), glosses])))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        return self.samples[index]


def by_hand_step(model, x, y, lr):
    """One SGD step of `model` in plain PyTorch: forward, ctc_loss with each clip's output steps, backward."""
    model.train()
    output = model(x)
    steps = torch.div(y[:, 0] + 3, 4, rounding_mode="floor").clamp(max=output.shape[1])
    labels = y[:, 1:]
    loss = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), labels.clamp_min(0), steps,
                                  (labels >= 0).sum(1), zero_infinity=True)
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= lr * param.grad
    return loss.item()


def padded_batch(dataset, indices):
    from gpucore.data.torch_samples import padded_clips

    return padded_clips([dataset[i][0] for i in indices], [dataset[i][1] for i in indices])


@pytest.mark.parametrize("name,kwargs,frame", [
    ("cslr_keypoints", {"in_features": 24, "hidden": 16}, (24,)),
    pytest.param("cslr_resnet18", {"hidden": 16}, (3, 16, 16), marks=needs_torchvision),
])
def test_output_steps_follow_the_temporal_stride(name, kwargs, frame):
    torch.manual_seed(0)
    model = build_model(name, {"num_classes": 5, **kwargs}).eval()
    assert model.temporal_stride == 4
    for frames in (1, 4, 7, 9):
        clip = torch.rand(2, frames, *frame)
        out = model(clip)
        assert out.shape == (2, math.ceil(frames / 4), 5), f"{name}, {frames} frames"
        # the steps of a clip depend on its own frames only up to the padding (BatchNorm in eval: no batch statistics)
        assert torch.allclose(model(clip[:1]), out[:1], atol=1e-5)


@pytest.mark.parametrize("name,kwargs,keypoints,clips", [
    ("cslr_keypoints", {"in_features": 24, "hidden": 16}, True, 4),
    pytest.param("cslr_resnet18", {"hidden": 16}, False, 2, marks=needs_torchvision),
])
def test_an_engine_step_is_plain_pytorchs_and_steps_lower_the_loss(name, kwargs, keypoints, clips):
    data = PhotoClips(clips, seed=1, keypoints=keypoints, size=24 if keypoints else 16)
    x, y = padded_batch(data, range(clips))
    assert (y[:, 0] == torch.tensor([len(data[i][0]) for i in range(clips)])).all()
    assert x.shape[1] == int(y[:, 0].max())
    torch.manual_seed(0)
    model = build_model(name, {"num_classes": 5, **kwargs})
    reference = copy.deepcopy(model)
    lr = 0.05
    eng = engine(list(model.parameters()), lr=lr, loss="ctc", sequence_lengths=True,
                 temporal_stride=model.temporal_stride)
    model.train()
    losses = []
    for step in range(3):
        stats = eng.train_epoch(batches(x, y, clips), lambda inputs: model(inputs), None, None)
        expected = by_hand_step(reference, x, y, lr * 0.5 ** step)  # the engine's schedule halves lr each step
        reference.zero_grad()
        assert stats["metrics"]["loss"] == pytest.approx(expected, rel=1e-4), f"step {step}"
        losses.append(expected)
        for (key, ours), theirs in zip(model.state_dict().items(), reference.state_dict().values()):
            assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), f"{key} after step {step}"
        reference.load_state_dict(model.state_dict())  # each step compared from the same weights: no drift
    assert losses[-1] < losses[0]


def test_a_run_on_photo_clips_reports_val_wer_which_monitor_auto_follows(tmp_path):
    train, val = PhotoClips(48, seed=2, keypoints=True), PhotoClips(12, seed=3, keypoints=True)
    result = gpucore.train({"model": "cslr_keypoints", "model_kwargs": {"in_features": 24, "hidden": 32},
                            "loss": "ctc", "epochs": 12, "batch_size": 8, "eval_batch_size": 5, "lr": 0.01, "precision": "32",
                            "device": "cpu", "progress": False, "report": False, "top_k": 0,
                            "run_dir": str(tmp_path)}, train_data=train, val_data=val)
    assert result.monitor == "val_wer"
    history = result.history
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert all(record["train_ctc_unfit"] == 0 and record["val_ctc_unfit"] == 0 for record in history)
    # the last epoch's val_wer: the trained model's greedy decoding of each clip, scored by hand
    model = build_model("cslr_keypoints", {"num_classes": 5, "in_features": 24, "hidden": 32})
    state = torch.load(f"{result.checkpoint_dir}/last.pt", weights_only=False)
    model.load_state_dict(state["model"])
    model.eval()
    x, y = padded_batch(val, range(len(val)))
    with torch.no_grad():
        decoded = task_for("ctc").with_sequence_lengths(4).decode(model(x), y)
    assert history[-1]["val_wer"] == pytest.approx(word_errors(decoded, y[:, 1:]).rate, abs=1e-9)
    assert history[-1]["val_wer"] < 0.5, history[-1]
    # gpucore evaluate on the same clips: the same greedy wer, and its report shows each clip's glosses
    evaluated = gpucore.evaluate(f"{result.checkpoint_dir}/last.pt", data=val, out=str(tmp_path / "evaluated"))
    assert evaluated["metrics"]["wer"] == pytest.approx(history[-1]["val_wer"], abs=1e-9)
    page = (tmp_path / "evaluated" / "report.html").read_text(encoding="utf-8")
    for i in range(3):
        glosses = " ".join(GLOSSES[g] for g in val[i][1][1:].tolist())
        assert f"<tr><td>{i}</td><td>{glosses}</td>" in page
    # each clip's word errors, kept for the report: the evaluation's own decodings and targets, scored by hand
    from gpucore.evaluation.evaluation_pass import data_sets, evaluation_pass

    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt")
    passed = evaluation_pass(loaded.module, loaded.config, loaded.task, data_sets(loaded, None, val)[1], loaded.device)
    errors = passed.word_errors()
    by_hand = word_errors(decoded, y[:, 1:])
    assert torch.equal(errors.per_sample, by_hand.per_sample) and errors.deleted == by_hand.deleted


def test_model_kwargs_of_the_cslr_models_are_checked():
    with pytest.raises(gpucore.ConfigError, match="cslr_keypoints: in_features must be an integer >= 1"):
        build_model("cslr_keypoints", {"num_classes": 5, "in_features": 0})
    with pytest.raises(gpucore.ConfigError, match="hidden must be an integer >= 2 and even"):
        build_model("cslr_keypoints", {"num_classes": 5, "in_features": 3, "hidden": 7})
    with pytest.raises(gpucore.ConfigError, match=r"takes sequences of N x T x 3 .* got shape \(2, 5, 4\)"):
        build_model("cslr_keypoints", {"num_classes": 5, "in_features": 3})(torch.zeros(2, 5, 4))


def test_a_batch_of_clips_is_padded_and_bad_targets_are_named():
    from gpucore.data.torch_samples import padded_clips

    clips = [torch.rand(3, 2), torch.rand(5, 2)]
    x, y = padded_clips(clips, [torch.tensor([3, 1, 2]), torch.tensor([5, 4])])
    assert torch.equal(x[0, :3], clips[0]) and torch.equal(x[0, 3:], torch.zeros(2, 2)) and torch.equal(x[1], clips[1])
    assert y.tolist() == [[3, 1, 2], [5, 4, -1]]
    with pytest.raises(gpucore.ConfigError, match=r"a clip of 3 frames has the target \[4, 1\]"):
        padded_clips(clips, [torch.tensor([4, 1]), torch.tensor([5, 4])])
    with pytest.raises(gpucore.ConfigError, match="frames have shapes"):
        padded_clips([torch.rand(3, 2), torch.rand(3, 4)], [torch.tensor([3, 1]), torch.tensor([3, 1])])


def test_clip_lengths_need_float_clips_ctc_and_agreeing_data(tmp_path):
    class Images(torch.utils.data.Dataset):
        sequence_lengths_in_target = True

        def __len__(self):
            return 2

        def __getitem__(self, index):
            return torch.zeros(3, 8, 8, dtype=torch.uint8), torch.tensor([1, 1])

    config = {"loss": "ctc", "epochs": 1, "batch_size": 2, "progress": False, "report": False, "run_dir": str(tmp_path)}
    with pytest.raises(gpucore.ConfigError, match="inputs are not float tensors"):
        gpucore.train(config, model=nn.Linear(2, 2), train_data=Images())
    clips = PhotoClips(4, seed=4, keypoints=True)
    with pytest.raises(gpucore.ConfigError, match="for CTC; loss 'cross_entropy'"):
        gpucore.train({**config, "loss": "cross_entropy", "model": "cslr_keypoints",
                       "model_kwargs": {"in_features": 24}}, train_data=clips)
    class PlainTargets(PhotoClips):  # the glosses alone
        sequence_lengths_in_target = False

        def __getitem__(self, index):
            return self.samples[index][0], self.samples[index][1][1:]

    plain = PlainTargets(4, seed=5, keypoints=True)
    with pytest.raises(gpucore.ConfigError, match="the training data's targets carry each clip's frame count"):
        gpucore.train({**config, "model": "cslr_keypoints", "model_kwargs": {"in_features": 24}}, train_data=clips,
                      val_data=plain)
