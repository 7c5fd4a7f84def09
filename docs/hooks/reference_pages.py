"""The reference pages made from the code, so they cannot drift from it: `python docs/hooks/reference_pages.py` writes
them into the checkout (docs/reference/, read as files too), a test holds those files to the code, and as an MkDocs
hook it makes them again at build time.

reference/config.md is rendered from gpucore.config.KEYS (key, type, default, valid values, description) and
reference/transforms.md from the C++ registry of the `transforms` list (gpucore._C.transform_arguments: each name, its
arguments and their defaults; gpucore.transforms.validation_form: what validation runs instead). Each key and each
transform name carries its own anchor (reference/config.md#lr, reference/transforms.md#RandomCrop). The changelog
page is CHANGELOG.md, its links made relative to docs/.
"""
from __future__ import annotations

import json
from pathlib import Path

CONFIG_PAGE = "reference/config.md"
TRANSFORMS_PAGE = "reference/transforms.md"
CHANGELOG_PAGE = "changelog.md"

# Values for the arguments a transform requires, to ask the registry for its validation form; in the page the
# values are shown by the argument's name ("Resize(size)").
REQUIRED_EXAMPLES = {"size": 24, "degrees": 15, "bits": 4, "threshold": 128, "sharpness_factor": 2.0,
                     "mean": [0.5], "std": [0.25]}

TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "mapping"}


def yaml_value(value) -> str:
    """A default as a config file writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def valid_values(key) -> str:
    if key.choices:
        valid = ", ".join(f"`{choice}`" for choice in key.choices)
    elif key.valid:
        valid = key.valid
    elif key.type is bool:
        valid = "`true`, `false`"
    else:
        valid = "any " + TYPE_NAMES[key.type]
    return valid + (", or `null`" if key.optional else "")


def config_page() -> str:
    from gpucore.config import KEYS

    rows = [f"| `{k.name}`{{ #{k.name} }} | {TYPE_NAMES[k.type]} | `{cell(yaml_value(k.default))}` | "
            f"{cell(valid_values(k))} | {cell(k.doc)} |" for k in KEYS]
    return "\n".join([
        "# Configuration keys",
        "",
        "Every key of `gpucore.train` and `gpucore train`, made from `gpucore.config.KEYS` when the site is built. "
        "A config file (YAML or JSON), a dict, `--set key=value` on the command line and keyword arguments of "
        "`gpucore.train` all take these keys; an unknown key is an error naming the closest valid one, and a wrong "
        "type or range names the key and what is valid (the *valid values* column). How the keys work together: "
        "[Training and configuration](../guides/training.md).",
        "",
        "A config file is code to be trusted like a Python script: `model: \"package.module:factory\"` imports that "
        "module and calls the function it names, so run only configs you would run as scripts.",
        "",
        f"{len(KEYS)} keys:",
        "",
        "| key | type | default | valid values | description |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])


def validation_form_text(name: str, arguments: list) -> str:
    from gpucore.transforms import validation_form

    example = {argument: REQUIRED_EXAMPLES[argument] for argument, default in arguments if default == "required"}
    form = validation_form([{name: example}])
    if not form:
        return "dropped (random)"
    if form == [{name: example}]:
        return "kept as it is"
    steps = []
    for entry in form:
        (step, step_arguments), = entry.items()
        steps.append(f"`{step}({', '.join(step_arguments)})`")
    return "becomes " + " + ".join(steps)


def transforms_page() -> str:
    from gpucore import _C

    rows = []
    for name, arguments in _C.transform_arguments():
        shown = ", ".join(f"`{argument}`: {'*required*' if default == 'required' else f'`{default}`'}"
                          for argument, default in arguments)
        rows.append(f"| `{name}`{{ #{name} }} | {shown} | {validation_form_text(name, arguments)} |")
    return "\n".join([
        "# Transforms",
        "",
        "Every name config key [`transforms`](config.md#transforms) and `gpucore.transforms.Compose` take, with "
        "torchvision.transforms.v2's arguments and defaults, made from gpucore's C++ registry "
        "(`csrc/batches/transforms/registry.cpp`) when the site is built. `null` is torchvision's `None`: the "
        "argument's effect is off. The last column is what validation, evaluation, `gpucore.load(...).preprocess`, "
        "predict and export run instead (the deterministic form). What each transform does, gpucore's limits and "
        "how exact it is against torchvision: [Data and transforms](../guides/data.md#transforms).",
        "",
        "| name | arguments (default) | validation form |",
        "|---|---|---|",
        *rows,
        "",
    ])


def changelog_page(root: Path) -> str:
    """CHANGELOG.md, its links (written from the checkout's root: docs/...) made relative to docs/."""
    return (root / "CHANGELOG.md").read_text(encoding="utf-8").replace("](docs/", "](")


CHECKED_IN = {CONFIG_PAGE: config_page, TRANSFORMS_PAGE: transforms_page}  # written into docs/ by write_pages()


def write_pages(docs: Path) -> None:
    for path, make in CHECKED_IN.items():
        (docs / path).write_text(make(), encoding="utf-8")


def on_files(files, config):
    from mkdocs.structure.files import File  # here: the page functions above are used without mkdocs (test_config)

    root = Path(config.config_file_path).parent
    pages = {**CHECKED_IN, CHANGELOG_PAGE: lambda: changelog_page(root)}
    for path, make in pages.items():
        checked_in = files.get_file_from_path(path)
        if checked_in is not None:  # the site is made from the code as it is, even before the files are rewritten
            files.remove(checked_in)
        files.append(File.generated(config, path, content=make()))
    return files


if __name__ == "__main__":
    write_pages(Path(__file__).resolve().parents[1])
