"""Hostile inputs: corrupt files end in a clear error naming the file, never a crash; kills lose nothing."""
import os
import struct
import sys

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "trials"))  # the long trials' scripts
import corrupt_files  # noqa: E402
from conftest import kill_trials, require


def write(path, content):
    path.write_bytes(content)
    return str(path)


def test_edge_cases_are_refused_naming_the_file(tmp_path):
    for name, content in corrupt_files.edge_cases().items():
        assert corrupt_files.read_one(write(tmp_path / name, content)) == "error", name


def test_npz_stored_member_larger_than_its_data_and_offset_near_2_32(tmp_path):
    cases = corrupt_files.edge_cases()
    with pytest.raises(gpucore.ConfigError, match=r"npz_stored_size.npz:x.npy' is corrupt: stored with 228 bytes "
                                                  r"but its zip directory says 10485760"):
        _C.read_npz(write(tmp_path / "npz_stored_size.npz", cases["npz_stored_size.npz"]))
    with pytest.raises(gpucore.ConfigError, match=r"npz_far_offset.npz' is corrupt: no local header for 'x.npy'"):
        _C.read_npz(write(tmp_path / "npz_far_offset.npz", cases["npz_far_offset.npz"]))
    with pytest.raises(gpucore.ConfigError, match=r"npz_name_not_utf8.npz' is corrupt: the name of member 0 "
                                                  r"\('\\xf0.npy'\) differs .* or is not UTF-8"):
        _C.read_npz(write(tmp_path / "npz_name_not_utf8.npz", cases["npz_name_not_utf8.npz"]))


def test_npy_headers_version_2_non_utf8_and_overflowing_shapes(tmp_path):
    cases = corrupt_files.edge_cases()
    expected = {"npy_v2_short.npy": "corrupt header|truncated in its header",
                "npy_not_utf8.npy": r"expected the dtype string of 'descr' \(plain printable .* of "
                                    r"\{'descr': '\\xff\\xfe'",
                "npy_huge_shape.npy": r"expected a dimension below 10\^15 in 'shape'",
                "npy_version_9.npy": "has format version 9.0; gpucore reads versions 1.0, 2.0 and 3.0"}
    for name, pattern in expected.items():
        with pytest.raises(gpucore.ConfigError, match=pattern):
            _C.read_npy(write(tmp_path / name, cases[name]))
    # A shape the file does not hold is refused before allocating it.
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }"
    header += b" " * (63 - len(header) % 64) + b"\n"
    path = write(tmp_path / "claims.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    with pytest.raises(gpucore.ConfigError, match=r"claims.npy' is truncated: shape \[1000000, 1000000\] needs"):
        _C.read_npy(path)


def _npy_file(header: bytes, data: bytes = b"", version: bytes = b"\x01\x00") -> bytes:
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY" + version + struct.pack("<H", len(header)) + header + data


def test_npy_headers_numpy_refuses_are_refused(tmp_path):
    good = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    values = np.array([1.5, -2.0], dtype=np.float32).tobytes()
    assert _C.read_npy(write(tmp_path / "good.npy", _npy_file(good, values))).tolist() == [1.5, -2.0]
    refused = {
        "garbage_after.npy": (good + b" x", "nothing but whitespace after the dict's closing '}'"),
        "bad_bool.npy": (good.replace(b"False", b"Fa|se"), "'fortran_order' must be True or False, not 'Fa'"),
        "int_shape.npy": (good.replace(b"(2,)", b"(2)"), r"a tuple for 'shape': one dimension is written \(n,\)"),
        "leading_zero.npy": (good.replace(b"(2,)", b"(02,)"), "a non-negative integer dimension"),
        "negative.npy": (good.replace(b"(2,)", b"(-2,)"), "a non-negative integer dimension"),
        "no_brace.npy": (good[:-1], "a quoted key at character 118"),
        "no_comma.npy": (good.replace(b"False,", b"False"), r"',' or '\}' after the value of 'fortran_order'"),
        "list.npy": (b"[" + good[1:], "a dict literal starting with '\\{'"),
        "nul.npy": (good.replace(b", 'fortran", b",\x00'fortran"), "a quoted key"),
        "extra_key.npy": (good.replace(b"}", b"'x': 1, }"), "the key 'x' is not one of"),
        "missing_key.npy": (b"{'descr': '<f4', 'shape': (2,)}", "all three keys"),
    }
    for name, (header, pattern) in refused.items():
        path = write(tmp_path / name, _npy_file(header, values))
        with pytest.raises(Exception):  # noqa: B017 - NumPy's error class varies (ValueError, tokenize's TokenError)
            np.load(path, allow_pickle=False)
        with pytest.raises(gpucore.ConfigError, match=f"{name}' has a corrupt header .*expected {pattern}"):
            _C.read_npy(path)
    path = write(tmp_path / "minor.npy", _npy_file(good, values, version=b"\x01\x04"))
    with pytest.raises(gpucore.ConfigError, match="minor.npy' has format version 1.4"):
        _C.read_npy(path)


def test_npy_reader_agrees_with_numpy_on_mutated_files(tmp_path):
    # Bit flips, cuts and overwritten bytes in real .npy files: gpucore reads a file exactly when NumPy does (all
    # of these dtypes are ones gpucore reads), and then the same values. 3,000 files by hand found none apart.
    seed = 20261123
    rng = np.random.default_rng(seed)
    loaded = 0
    for i in range(400):
        path = write(tmp_path / f"{i}.npy", corrupt_files.mutate(corrupt_files.originals(rng)["npy"], rng))
        try:
            expected = np.load(path, allow_pickle=False)
        except Exception:  # noqa: BLE001 - NumPy raises ValueError, EOFError, SyntaxError ... on corrupt files
            expected = None
        try:
            got = _C.read_npy(path).numpy()
        except gpucore.ConfigError as exc:
            assert expected is None, f"seed {seed}, file {i}: NumPy reads it, gpucore says {exc}"
            continue
        assert expected is not None, f"seed {seed}, file {i}: NumPy refuses it, gpucore read {got}"
        assert got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=True), f"seed {seed}, file {i}"
        loaded += 1
    assert 20 < loaded < 400  # both outcomes were exercised


def test_idx_headers_claiming_more_than_the_file_holds(tmp_path):
    import gzip

    def idx(dims, data=b""):
        return struct.pack(">BBBB", 0, 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data

    plain = write(tmp_path / "claims.idx", idx([100000, 1000, 1000], b"\x01" * 64))
    with pytest.raises(gpucore.ConfigError, match=r"claims.idx' is truncated: its header claims shape "
                                                  r"\[100000, 1000, 1000\], 100000000000 bytes of data, and the file "
                                                  r"holds 64"):
        _C.read_idx(plain)
    packed = write(tmp_path / "claims.idx.gz", gzip.compress(idx([100000, 1000, 1000], b"\x01" * 64)))
    with pytest.raises(gpucore.ConfigError, match=r"claims.idx.gz' is truncated: .* a gzip file of \d+ bytes cannot "
                                                  r"inflate to that"):
        _C.read_idx(packed)
    huge = write(tmp_path / "huge.idx", idx([2 ** 31] * 3))
    with pytest.raises(gpucore.ConfigError, match=r"huge.idx' claims an impossible shape \[2147483648, 2147483648, "):
        _C.read_idx(huge)
    exact = write(tmp_path / "exact.idx.gz", gzip.compress(idx([2, 3], bytes(range(6)))))
    assert _C.read_idx(exact).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_image_headers_claiming_too_many_pixels_are_that_files_error(tmp_path):
    bomb = write(tmp_path / "bomb.png", corrupt_files.edge_cases()["png_bomb.png"])
    assert os.path.getsize(bomb) < 200
    good = write(tmp_path / "good.png", corrupt_files._png(np.full((4, 4, 3), 7, dtype=np.uint8)))
    with pytest.raises(gpucore.ConfigError, match=r"bomb.png' \(index 1\): claims 30000x30000 = 900000000 pixels"):
        _C.decode_images([good, bomb], 3, 2, False)
    images, kept, skipped = _C.decode_images([good, bomb], 3, 2, True)
    assert kept == [0] and "bomb.png: claims 30000x30000" in skipped[0]
    assert torch.equal(images[0], torch.full((4, 4, 3), 7, dtype=torch.uint8))
    # The limit is configurable; a normal image over a lowered limit fails the same way.
    assert data.max_image_pixels() == 178956970
    try:
        data.set_max_image_pixels(15)
        with pytest.raises(gpucore.ConfigError, match=r"good.png': claims 4x4 = 16 pixels, more than the limit of 15"):
            _C.decode_image(good, 3)
        data.set_max_image_pixels(0)  # no limit
        _C.decode_image(good, 3)
    finally:
        data.set_max_image_pixels(178956970)
    with pytest.raises(gpucore.ConfigError, match="max image pixels must be >= 0"):
        data.set_max_image_pixels(-1)


def test_jpeg_claiming_too_many_pixels_and_truncated_jpegs(tmp_path):
    require("PIL")
    content = bytearray(corrupt_files._jpeg(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)))
    sof = content.find(b"\xff\xc0")
    huge = bytearray(content)
    huge[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    with pytest.raises(gpucore.ConfigError, match=r"huge.jpg': claims 60000x60000"):
        _C.decode_image(write(tmp_path / "huge.jpg", bytes(huge)), 3)
    for fraction in (0.7, 0.8, 0.9):  # cut inside the scan: libjpeg would fill the rest with grey
        cut = write(tmp_path / f"cut{fraction}.jpg", bytes(content[: int(len(content) * fraction)]))
        with pytest.raises(gpucore.ConfigError, match=rf"cut{fraction}.jpg': corrupt JPEG: Premature end"):
            _C.decode_image(cut, 3)
        images, kept, skipped = _C.decode_images([cut], 3, 1, True)
        assert kept == [] and "Premature end" in skipped[0]


def test_data_positions_out_of_range_are_refused():
    x, y = torch.randint(0, 256, (10, 1, 4, 4), dtype=torch.uint8), torch.arange(10)
    loader = gpucore.DataLoader(data.from_tensors(x, y), batch_size=4, device="cpu")
    for state, pattern in (({"epoch": 0, "position": -1}, "integers >= 0"), ({"epoch": -2, "position": 0}, ">= 0"),
                           ({"epoch": 0, "position": 4}, "position 4 is past the end of an epoch \\(3 batches\\)"),
                           ({"epoch": 0}, "'epoch' and 'position'")):
        with pytest.raises(gpucore.ConfigError, match=pattern):
            loader.load_state_dict(state)
    loader.load_state_dict({"epoch": 1, "position": 3})  # the end of an epoch is valid: nothing left in it
    assert list(loader) == []


def test_streaming_source_refuses_a_position_past_the_epoch(tmp_path):
    paths = [write(tmp_path / f"{i}.png", corrupt_files._png(np.full((4, 4, 3), i, dtype=np.uint8))) for i in range(5)]
    loader = gpucore.DataLoader(data.read_files(paths, list(range(5))), batch_size=2, cache="none", device="cpu")
    loader._position = 9  # as a corrupt checkpoint would set it
    with pytest.raises(gpucore.ConfigError, match="batch 9 of epoch 0 is past its end \\(3 batches\\)"):
        list(loader)
    loader._position = -1
    with pytest.raises(gpucore.ConfigError, match="must not be negative"):
        list(loader)
    loader._position = 0
    assert sorted(int(t) for _, target in loader for t in target) == [0, 1, 2, 3, 4]


def test_seeded_corrupt_file_corpus_no_crash_no_hang_every_error_names_its_file(tmp_path):
    # A small corpus here; `python tests/trials/corrupt_files.py --count 2000` by hand.
    seed = 202
    summary = corrupt_files.run(corrupt_files.write_corpus(str(tmp_path), count=8, seed=seed), chunk=60)
    assert summary["failures"] == [], f"corpus seed {seed}:\n" + "\n".join(summary["failures"])
    assert summary["ok"] + summary["error"] >= len(corrupt_files.edge_cases()) + 8 * 4


def two_random_sigkill_trials(folder):
    # Two trials here; `python tests/trials/kill_runs.py --trials 100` by hand. The seed fixes each kill's moment as
    # a fraction of an uninterrupted run's time, measured under the same load (so the kills land alike on slower
    # machines).
    return kill_trials("--trials", "2", "--seed", "210")


@pytest.mark.slow
@pytest.mark.prestarted(job=two_random_sigkill_trials)
def test_random_sigkills_lose_nothing_and_leave_nothing(prestarted):
    status, printed = prestarted
    assert status == 0, f"kill_runs.py --trials 2 --seed 210:\n{printed}"
