"""The documentation site: `mkdocs build --strict` passes (no broken link or anchor, no missing reference), the
reference pages list exactly what the code has, the changelog names the installed version, every public name has a
docstring with its arguments, and the site works in a real browser with nothing fetched from the network."""
import importlib.util
import inspect
import json
import logging
import pathlib
import re
import shutil
import subprocess

import pytest
import torch
import yaml

import gpucore
from conftest import require

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def reference_hook():
    spec = importlib.util.spec_from_file_location("reference_pages", ROOT / "docs" / "hooks" / "reference_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(config_file, site_dir):
    """mkdocs build --strict, in this process (the hook imports this gpucore)."""
    require("mkdocs")
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    config = load_config(config_file=str(config_file), site_dir=str(site_dir), strict=True)
    config.plugins.on_startup(command="build", dirty=False)
    try:
        mkdocs_build(config)
    finally:
        config.plugins.on_shutdown()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    build(ROOT / "mkdocs.yml", folder)
    return folder


def ids_in(page):
    return set(re.findall(r'<code id="([^"]+)"', page.read_text(encoding="utf-8")))


def test_the_site_builds_strict_with_every_page(site):
    for page in ["index.html", "guides/getting-started.html", "reference/config.html", "reference/transforms.html",
                 "reference/api.html", "benchmarks.html", "architecture.html", "changelog.html"]:
        assert (site / page).is_file(), page
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    for name in ["gpucore.train", "gpucore.Callback", "gpucore.data.read_idx", "gpucore.DataLoader",
                 "gpucore.transforms.Compose", "gpucore.gradcam", "gpucore.select_device"]:
        assert f'id="{name}"' in api, name


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path, caplog):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    (tmp_path / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text().replace("paths: [python]",
                                                                                    f"paths: [{ROOT / 'python'}]"))
    with open(tmp_path / "docs" / "guides" / "offline.md", "a", encoding="utf-8") as page:
        page.write("\nSee [a key](../reference/config.md#no_such_key).\n")
    from mkdocs.exceptions import Abort

    with caplog.at_level(logging.WARNING, logger="mkdocs"), pytest.raises(Abort):
        build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert any("no_such_key" in record.getMessage() for record in caplog.records), caplog.text


def test_the_configuration_reference_has_every_key_and_no_other(site):
    from gpucore.config import KEYS

    assert ids_in(site / "reference" / "config.html") == {key.name for key in KEYS}


def test_the_transforms_reference_has_every_registered_transform_and_argument(site):
    from gpucore import _C

    page = (site / "reference" / "transforms.html").read_text(encoding="utf-8")
    assert ids_in(site / "reference" / "transforms.html") == set(_C.transform_names())
    rows = dict(re.findall(r'<tr>\s*<td><code id="([^"]+)">.*?</td>\s*<td>(.*?)</td>', page, re.S))
    for name, arguments in _C.transform_arguments():
        shown = re.findall(r"<code>([a-z_]+)</code>:", rows[name])
        assert shown == [argument for argument, _ in arguments], name
    assert re.search(r'id="RandomResizedCrop".*?becomes <code>Resize\(size\)</code> \+ <code>CenterCrop\(size\)</code>',
                     page, re.S)
    assert re.search(r'id="RandomHorizontalFlip".*?dropped \(random\)', page, re.S)


def _transformed(name, arguments, images):
    out, params = gpucore.transforms.Compose([{name: arguments}], mean=[0.5], std=[0.25])(images, seed=3, epoch=1,
                                                                                         return_params=True)
    return out, params


@pytest.mark.parametrize("name, arguments", [pytest.param(name, arguments, id=name)
                                             for name, arguments in gpucore._C.transform_arguments()])
def test_each_documented_default_is_the_one_the_transform_applies(name, arguments):
    """Giving an argument its documented default explicitly changes neither the output nor the drawn parameters."""
    examples = reference_hook().REQUIRED_EXAMPLES
    required = {argument: examples[argument] for argument, default in arguments if default == "required"}
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    expected, expected_params = _transformed(name, required, images)
    for argument, default in arguments:
        if default in ("required", "null"):
            continue
        out, params = _transformed(name, {**required, argument: yaml.safe_load(default)}, images)
        assert torch.equal(out, expected), f"{name}: {argument}: {default} is not its default"
        for (_, drawn), (_, drawn_expected) in zip(params, expected_params):
            assert all(torch.equal(a, b) for a, b in zip(drawn, drawn_expected)), f"{name}: {argument}: {default}"


def test_a_wrong_default_would_be_caught():
    """The comparison above sees a changed argument (not vacuous)."""
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    default, _ = _transformed("RandomResizedCrop", {"size": 24}, images)
    other, _ = _transformed("RandomResizedCrop", {"size": 24, "scale": [0.5, 1.0]}, images)
    assert not torch.equal(default, other)


def test_the_version_is_the_latest_release_in_the_changelog():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert headings and headings[0] in ("Unreleased", headings[0])
    released = [heading for heading in headings if heading != "Unreleased"]
    assert released and released[0] == gpucore.__version__, (released[:1], gpucore.__version__)
    assert re.search(rf"^## \[{re.escape(gpucore.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    assert "Unreleased" not in headings[1:], "## [Unreleased] goes on top"
