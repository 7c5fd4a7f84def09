"""CTC over clips of different lengths (issue 72, the model side): the engine's loss with each clip's output steps
(its frame count in the target's column 0, the model's temporal stride) against torch's ctc_loss called by hand, the
samples no alignment fits counted, greedy decoding stopped at each clip's steps, prefix beam search against every
alignment enumerated, and the word error rate against jiwer."""
import itertools
import math
import random

import pytest
import torch
from torch import nn

from gpucore import _C
from gpucore.errors import ConfigError
from gpucore.tasks import task_for
from gpucore.tasks.decode import ctc_beam_search, ctc_greedy
from gpucore.tasks.sequences import ctc_fits, word_errors
from conftest import batches


def loss_config(sequence_lengths=False, stride=1, undecoded_class=-1):
    loss = _C.LossConfig()
    loss.kind = "ctc"
    loss.sequence_lengths, loss.temporal_stride = sequence_lengths, stride
    loss.undecoded_class = undecoded_class
    return loss


def evaluate(output, target, sequence_lengths=False, stride=1, batch_size=None, undecoded_class=-1):
    """The engine's evaluation metrics of `output` (the identity model's) against `target`."""
    settings = _C.EngineConfig()
    settings.device = torch.device("cpu")
    settings.loss = loss_config(sequence_lengths, stride, undecoded_class)
    source = batches(output, target, batch_size or output.shape[0])
    return _C.evaluate(source, lambda x: x, settings)["metrics"]


def random_clips(seed, n=6, steps=10, classes=7, stride=2, max_glosses=4):
    """Outputs (n, steps, classes) of clips of random frame counts (up to steps * stride) and their targets: the frame
    count, then 1..max_glosses random glosses padded with -1."""
    generator = torch.Generator().manual_seed(seed)
    output = torch.randn(n, steps, classes, generator=generator) * 3
    frames = torch.randint(1, steps * stride + 1, (n,), generator=generator)
    target = torch.full((n, 1 + max_glosses), -1)
    target[:, 0] = frames
    for i in range(n):
        count = int(torch.randint(1, max_glosses + 1, (1,), generator=generator))
        target[i, 1:1 + count] = torch.randint(1, classes, (count,), generator=generator)
    return output, target


def by_hand_lengths(target, stride, steps):
    return torch.tensor([min(math.ceil(int(f) / stride), steps) for f in target[:, 0]])


@pytest.mark.parametrize("seed,stride", [(1, 1), (2, 2), (3, 4)])
def test_ctc_loss_with_clip_lengths_is_torchs_ctc_loss_with_them(seed, stride):
    output, target = random_clips(seed, stride=stride)
    metrics = evaluate(output, target, sequence_lengths=True, stride=stride)
    glosses = target[:, 1:]
    lengths = by_hand_lengths(target, stride, output.shape[1])
    expected = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), glosses.clamp_min(0), lengths,
                                      (glosses >= 0).sum(1), blank=0, reduction="mean", zero_infinity=True)
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)
    # the samples no alignment fits, as ctc_fits (the data side's check) says
    unfit = sum(not ctc_fits(int(t[0]), [g for g in t[1:].tolist() if g >= 0], stride) for t in target)
    assert metrics["ctc_unfit"] == unfit
    # greedy decoding stopped at each clip's steps
    best = output.argmax(-1)
    right = 0
    for i in range(len(output)):
        decoded = [k for k, _ in itertools.groupby(best[i, :lengths[i]].tolist()) if k != 0]
        right += decoded == [g for g in glosses[i].tolist() if g >= 0]
    assert metrics["seq_accuracy"] == pytest.approx(right / len(output))


def test_a_clip_too_short_for_its_glosses_is_counted_not_a_nan():
    output = torch.randn(3, 8, 5)
    # 8 frames at stride 4: 2 steps; glosses [1, 1] need 3 (a blank between the repeats), [2, 3] fit, [4] fits
    target = torch.tensor([[8, 1, 1], [8, 2, 3], [3, 4, -1]])
    metrics = evaluate(output, target, sequence_lengths=True, stride=4)
    assert metrics["ctc_unfit"] == 1
    assert math.isfinite(metrics["loss"])
    assert not ctc_fits(8, [1, 1], 4) and ctc_fits(8, [2, 3], 4) and ctc_fits(9, [1, 1], 4)
    lengths = torch.tensor([2, 2, 1])
    expected = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), target[:, 1:].clamp_min(0), lengths,
                                      torch.tensor([2, 2, 1]), zero_infinity=True)
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_plain_ctc_targets_keep_every_step():
    output, target = random_clips(5, stride=1)
    glosses = target[:, 1:]
    metrics = evaluate(output, glosses)
    expected = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), glosses.clamp_min(0),
                                      torch.full((len(output),), output.shape[1]), (glosses >= 0).sum(1),
                                      zero_infinity=True)
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert "wer" not in metrics  # a word error rate needs clips' glosses (per-clip lengths)


def test_targets_without_room_for_the_frame_count_are_refused():
    with pytest.raises(_C.ConfigError, match=r"ctc expects .* \(N, 1 \+ S\): each clip's frame count"):
        evaluate(torch.randn(2, 5, 4), torch.tensor([[3], [4]]), sequence_lengths=True)
    with pytest.raises(ConfigError, match="temporal_stride must be an int >= 1"):
        task_for("ctc").with_sequence_lengths(0)


# ---- decoding -----------------------------------------------------------------------------------------------------

def most_probable_labelling(log_probs):
    """The labelling of the highest probability, every alignment of (T, C) log-probabilities enumerated."""
    totals = {}
    for path in itertools.product(range(log_probs.shape[1]), repeat=log_probs.shape[0]):
        labelling = tuple(k for k, _ in itertools.groupby(path) if k != 0)
        p = sum(float(log_probs[t, c]) for t, c in enumerate(path))
        totals[labelling] = float(torch.logaddexp(torch.tensor(totals.get(labelling, -math.inf)), torch.tensor(p)))
    return max(totals, key=totals.get)


@pytest.mark.parametrize("seed", range(6))
def test_beam_search_finds_the_most_probable_labelling_of_every_alignment(seed):
    generator = torch.Generator().manual_seed(seed)
    steps, classes = 5, 3
    # peaked but ambiguous outputs: the best path and the best labelling often differ
    logits = torch.randn(3, steps, classes, generator=generator) * 1.5
    log_probs = logits.log_softmax(-1)
    lengths = torch.tensor([5, 4, 3])
    decoded = ctc_beam_search(log_probs, lengths, width=64)  # every prefix kept: exact
    for i in range(3):
        expected = most_probable_labelling(log_probs[i, :lengths[i]])
        assert [c for c in decoded[i].tolist() if c >= 0] == list(expected), f"seed {seed}, sample {i}"


def test_beam_search_can_beat_the_best_path():
    # one step of 'a' at 0.4 against blank at 0.6 twice: the best path is all blanks, but 'a' (three paths) is likelier
    probs = torch.tensor([[[0.6, 0.4], [0.6, 0.4]]])
    assert ctc_greedy(probs.argmax(-1)).tolist() == [[-1, -1]]
    assert ctc_beam_search(probs.log(), width=4).tolist() == [[1, -1]]
    assert list(most_probable_labelling(probs[0].log())) == [1]


def test_beam_width_1_decodes_greedily_and_stops_at_each_clips_steps():
    output, target = random_clips(11, n=8, steps=9, stride=3)
    lengths = by_hand_lengths(target, 3, 9)
    greedy = task_for("ctc").with_sequence_lengths(3)
    assert greedy.beam_width == 1
    expected = torch.full((8, 9), -1)
    for i in range(8):
        labels = [k for k, _ in itertools.groupby(output[i, :lengths[i]].argmax(-1).tolist()) if k != 0]
        expected[i, :len(labels)] = torch.tensor(labels, dtype=torch.int64)
    assert torch.equal(greedy.decode(output, target), expected)
    # a wide beam on the same clips: each labelling at least as probable as the greedy one (torch's ctc_loss scores it)
    beam = greedy.with_beam_width(16).decode(output, target)
    log_probs = output.log_softmax(-1).transpose(0, 1)
    for i in range(8):
        def nll(labels):
            labels = [c for c in labels.tolist() if c >= 0]
            return nn.functional.ctc_loss(log_probs[:, i:i + 1], torch.tensor([labels or [0]]), lengths[i:i + 1],
                                          torch.tensor([len(labels)]), reduction="sum").item()
        assert nll(beam[i]) <= nll(expected[i]) + 1e-6


def test_beam_width_is_a_ctc_key():
    from gpucore.config import load_config
    from gpucore.tasks import task_of

    assert task_of(load_config({"loss": "ctc", "beam_width": 5})).beam_width == 5
    with pytest.raises(ConfigError, match="'beam_width' \\(5\\) decodes CTC outputs"):
        task_of(load_config({"beam_width": 5}))
    with pytest.raises(ConfigError, match="beam_width"):
        load_config({"loss": "ctc", "beam_width": 0})


# ---- word error rate ----------------------------------------------------------------------------------------------

def random_gloss_pairs(seed, count=40, vocabulary=6):
    """(reference, hypothesis) gloss id lists: hypotheses made from the references by random edits."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        reference = [rng.randint(1, vocabulary) for _ in range(rng.randint(1, 7))]
        hypothesis = list(reference)
        for _ in range(rng.randint(0, 4)):
            where = rng.randint(0, len(hypothesis))
            edit = rng.choice("sdi")
            if edit == "i" or not hypothesis:
                hypothesis.insert(where, rng.randint(1, vocabulary))
            elif edit == "d":
                del hypothesis[min(where, len(hypothesis) - 1)]
            else:
                hypothesis[min(where, len(hypothesis) - 1)] = rng.randint(1, vocabulary)
        pairs.append((reference, hypothesis))
    return pairs


def padded(rows, width=10):
    out = torch.full((len(rows), width), -1)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.int64)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_word_errors_are_jiwers(seed):
    jiwer = pytest.importorskip("jiwer", reason="jiwer is the reference (scripts/bootstrap.sh --tests installs it)")
    pairs = random_gloss_pairs(seed)
    references = [" ".join(f"g{c}" for c in r) for r, _ in pairs]
    hypotheses = [" ".join(f"g{c}" for c in h) for _, h in pairs]
    errors = word_errors(padded([h for _, h in pairs]), padded([r for r, _ in pairs]))
    theirs = jiwer.process_words(references, hypotheses)
    assert errors.rate == pytest.approx(theirs.wer, rel=1e-12)
    assert errors.words == sum(len(r) for r, _ in pairs)
    # each sample's edits: as many as jiwer's, and deletions minus insertions the length difference
    for i, (reference, hypothesis) in enumerate(pairs):
        single = jiwer.process_words(references[i], hypotheses[i])
        s, d, n_ins = errors.per_sample[i].tolist()
        assert s + d + n_ins == single.substitutions + single.deletions + single.insertions
        assert d - n_ins == len(reference) - len(hypothesis)
    totals = errors.per_sample.sum(0).tolist()
    assert sum(errors.substituted.values()) == totals[0] and sum(errors.deleted.values()) == totals[1]


def test_the_substituted_and_deleted_glosses_are_named():
    errors = word_errors(padded([[1, 5, 3], [2, 2, 2, 9]]), padded([[1, 2, 3, 4], [2, 2]]))
    assert errors.per_sample.tolist() == [[1, 1, 0], [0, 0, 2]]
    assert dict(errors.substituted) == {2: 1} and dict(errors.deleted) == {4: 1}
    assert errors.rate == pytest.approx(4 / 6)


@pytest.mark.parametrize("seed,stride", [(21, 2), (22, 3)])
def test_the_engines_wer_is_greedy_decodings_word_errors(seed, stride):
    jiwer = pytest.importorskip("jiwer", reason="jiwer is the reference (scripts/bootstrap.sh --tests installs it)")
    output, target = random_clips(seed, n=12, steps=8, classes=4, stride=stride)
    metrics = evaluate(output, target, sequence_lengths=True, stride=stride, batch_size=5)  # 3 batches pooled
    decoded = task_for("ctc").with_sequence_lengths(stride).decode(output, target)
    words = lambda row: " ".join(f"g{c}" for c in row.tolist() if c >= 0)  # noqa: E731
    theirs = jiwer.wer([words(t) for t in target[:, 1:]], [words(d) for d in decoded])
    assert metrics["wer"] == pytest.approx(theirs, rel=1e-12)
    assert 0 < metrics["wer"]


@pytest.mark.parametrize("beam_width", [1, 3])
def test_the_vocabularys_unknown_is_never_decoded_so_an_unseen_gloss_is_always_an_error(beam_width):
    """A dev/test gloss training never saw is encoded as the vocabulary's "<unk>" (its last entry); a model that
    outputs "<unk>" there must not score a hit. Outputs whose best class is "<unk>" wherever the reference has it: the
    engine's val_wer and evaluate's decoding (greedy and beam search) both decode as if the "<unk>" column were not
    there (a by-hand decoding of the outputs without it, scored by word_errors)."""
    vocabulary = ["<blank>", "A", "B", "C", "<unk>"]
    unknown = len(vocabulary) - 1
    generator = torch.Generator().manual_seed(41)
    output = torch.randn(6, 8, len(vocabulary), generator=generator)
    output[..., 0] += 4.0  # the blank the best class, except:
    target = torch.full((6, 4), -1)
    target[:, 0] = 16  # frames: every one of the 8 steps at stride 2
    for i in range(6):
        target[i, 1:3] = torch.tensor([1 + i % 3, unknown])
        output[i, 1:3, 1 + i % 3] = 20.0  # the seen gloss at steps 1 and 2
        output[i, 4:6, unknown] = 20.0  # "<unk>" at steps 4 and 5
    from gpucore.config import load_config
    from gpucore.tasks import task_of

    recorded = task_of(load_config({"loss": "ctc", "vocabulary": vocabulary}))  # a run's task, from config.json
    assert recorded.undecoded_class == unknown and recorded.loss_config().undecoded_class == unknown
    assert task_of(load_config({"loss": "ctc"})).undecoded_class is None  # no vocabulary recorded: nothing left out
    task = task_for("ctc").with_sequence_lengths(2).with_beam_width(beam_width)
    unaware = task.decode(output, target)
    assert (unaware == unknown).any(1).all()  # without the vocabulary, the outputs decode to "<unk>" ...
    assert word_errors(unaware, target[:, 1:]).rate == 0  # ... which would score as a hit
    decoded = task.with_vocabulary(vocabulary).decode(output, target)
    without_column = output[..., :unknown]  # by hand: "<unk>" is not a class
    if beam_width == 1:
        by_hand = ctc_greedy(without_column.argmax(-1))
    else:
        by_hand = ctc_beam_search(without_column.log_softmax(-1), None, beam_width)
    assert torch.equal(decoded, by_hand) and not (decoded == unknown).any()
    errors = word_errors(decoded, target[:, 1:])
    assert errors.per_sample.tolist() == [[0, 1, 0]] * 6  # the unseen gloss deleted in every clip: an error
    if beam_width == 1:  # the engine decodes greedily, as val_wer always does
        metrics = evaluate(output, target, sequence_lengths=True, stride=2, undecoded_class=unknown)
        assert metrics["wer"] == pytest.approx(errors.rate, rel=1e-12)
        assert evaluate(output, target, sequence_lengths=True, stride=2)["wer"] < metrics["wer"]
