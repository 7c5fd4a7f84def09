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
    assert not (site / "hooks").exists()
    for page in site.rglob("*.html"):  # nothing fetched from the internet: servers have none
        remote = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="((?:https?:)?//[^"]+)"', page.read_text("utf-8"))
        assert not remote, (page.relative_to(site), remote)
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    for name in ["gpucore.train.train", "gpucore.Callback", "gpucore.data.read_idx", "gpucore.DataLoader",
                 "gpucore.transforms.Compose", "gpucore.gradcam", "gpucore.select_device"]:
        assert f'id="{name}"' in api, name


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path, caplog):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    (tmp_path / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text().replace("paths: [python]",
                                                                                    f"paths: [{ROOT / 'python'}]"))
    with open(tmp_path / "docs" / "guides" / "offline.md", "a", encoding="utf-8") as page:
        page.write("\nSee [a key](../reference/config.md#no_such_key).\n")
    Abort = require("mkdocs.exceptions").Abort

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
    released = [heading for heading in headings if heading != "Unreleased"]
    assert released and released[0] == gpucore.__version__, (released[:1], gpucore.__version__)
    assert re.search(rf"^## \[{re.escape(gpucore.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    assert "Unreleased" not in headings[1:], "## [Unreleased] goes on top"


def public_objects():
    """(name, object) of every public function and class: gpucore.__all__, gpucore.data.__all__, Compose, and the
    public methods of the classes among them (Callback's hooks included)."""
    names = [("gpucore." + name, getattr(gpucore, name)) for name in gpucore.__all__
             if name not in ("__version__", "data")]
    names += [("gpucore.data." + name, getattr(gpucore.data, name)) for name in gpucore.data.__all__]
    names.append(("gpucore.transforms.Compose", gpucore.transforms.Compose))
    objects = [(name, value) for name, value in names if inspect.isfunction(value) or inspect.isclass(value)]
    for name, value in list(objects):
        if inspect.isclass(value) and not issubclass(value, BaseException):
            objects += [(f"{name}.{member}", function) for member, function in vars(value).items()
                        if not member.startswith("_") and inspect.isfunction(function)]
    return objects


def documented_parameters(docstring):
    """The parameter names of a Google-style docstring's Args (or Attributes, for a class's fields) sections, as
    mkdocstrings reads them (griffe's parser)."""
    griffe = require("griffe")
    sections = griffe.Docstring(docstring).parse("google", warnings=False)
    return {parameter.name for section in sections if section.kind.value in ("parameters", "attributes")
            for parameter in section.value}


def signature_parameters(value):
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return []
    return [name for name, parameter in signature.parameters.items()
            if name not in ("self", "cls") and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


@pytest.mark.parametrize("name, value", [pytest.param(name, value, id=name) for name, value in public_objects()])
def test_every_public_function_and_class_documents_its_arguments(name, value):
    docstring = inspect.getdoc(value)
    assert docstring and len(docstring) > 20, f"{name} has no docstring"
    if inspect.isclass(value) and issubclass(value, BaseException):
        return
    if inspect.isclass(value) and "__init__" not in vars(value) and not hasattr(value, "__dataclass_fields__"):
        return  # constructed without arguments of its own (a Callback subclass's __init__ is the user's)
    parameters = signature_parameters(value)
    if parameters:
        missing = set(parameters) - documented_parameters(docstring)
        assert not missing, f"{name}: the docstring's Args section lacks {sorted(missing)}"
    if inspect.isfunction(value) and inspect.signature(value).return_annotation not in (None, "None"):
        text = inspect.getdoc(value)
        assert re.search(r"^(Returns|Yields):", text, re.M), f"{name}: the docstring has no Returns section"


# Put first in <head>: records every error the page raises (scripts, failed loads, console.error, rejections).
ERRORS = """<script>window.__errors = [];
window.addEventListener("error", e => __errors.push(e.message || ("failed to load " + (e.target.src || e.target.href))), true);
window.addEventListener("unhandledrejection", e => __errors.push("unhandled rejection: " + e.reason));
const __consoleError = console.error; console.error = (...a) => { __errors.push(a.join(" ")); __consoleError(...a); };
</script>"""
# Before </body>: after load (and the scripts' first work), what the page shows.
CHECK = """<script>window.addEventListener("load", () => setTimeout(() => {
  const facts = {errors: window.__errors, title: document.title,
                 nav_links: document.querySelectorAll("nav.md-nav--primary a.md-nav__link").length,
                 search_box: document.querySelectorAll("input[data-md-component=search-query]").length,
                 headings: document.querySelectorAll("article h1").length};
  const out = document.createElement("pre"); out.id = "check"; out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
}, 2000));</script>"""


@pytest.fixture(scope="module")
def served_site(site):
    """The built site over HTTP on this machine (its search runs in a web worker, which file:// pages may not start),
    and the paths the browser asked for."""
    import functools
    import http.server
    import threading

    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}", requested
    server.shutdown()


def page_facts(site, url, page, tmp_path, inject=""):
    """Opens a copy of `page` with the error recorder and the check in headless chromium; what the check saw."""
    html = (site / page).read_text(encoding="utf-8")
    checked = page.replace(".html", ".checked.html")
    (site / checked).write_text(html.replace("<head>", "<head>" + ERRORS, 1).replace("</body>", inject + CHECK + "</body>"),
                                encoding="utf-8")
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + str(tmp_path),
                          "--virtual-time-budget=15000", "--dump-dom", f"{url}/{checked}"],
                         capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="check">(.*?)</pre>', run.stdout)
    assert found, run.stderr[-3000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/bootstrap.sh installs it)")
@pytest.mark.parametrize("page", ["index.html", "guides/training.html"])
def test_pages_render_with_navigation_and_search_and_no_errors(served_site, page, tmp_path):
    site, url, requested = served_site
    requested.clear()
    facts = page_facts(site, url, page, tmp_path)
    assert facts["errors"] == [], facts
    assert facts["nav_links"] >= 15, facts  # every guide and reference page in the navigation
    assert facts["headings"] == 1, facts
    assert facts["search_box"] == 1, facts
    assert "/search/search_index.json" in requested, requested  # the search loaded its index
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert any("cuda_graphs" in entry["text"] for entry in index["docs"]  # a key is found by its name
               if entry["location"].startswith("reference/config.html"))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/bootstrap.sh installs it)")
def test_a_script_error_on_a_page_is_seen(served_site, tmp_path):
    site, url, _ = served_site
    facts = page_facts(site, url, "index.html", tmp_path, inject="<script>no_such_function();</script>")
    assert any("no_such_function" in error for error in facts["errors"]), facts


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md"])
def test_the_links_of_the_pages_outside_the_site_resolve(site, page):
    """README.md and CHANGELOG.md are read on the repository's web page: each relative link names a file of the
    checkout, and a link into docs/ an anchor its built page has."""
    links = re.findall(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"", (ROOT / page).read_text(encoding="utf-8"))
    checked = 0
    for link in (a or b for a, b in links):
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"{page}: {link}: no such file"
        if anchor and path.startswith("docs/") and path.endswith(".md"):
            built = site / path[len("docs/"):].replace(".md", ".html")
            assert f'id="{anchor}"' in built.read_text(encoding="utf-8"), f"{page}: {link}: no such anchor"
        checked += 1
    assert checked >= 3


def test_reference_pages_in_the_checkout_are_the_codes():
    """docs/reference/config.md and transforms.md are read as files too (links from the guides work on GitHub and in
    an editor): each equals what the code makes now. After changing a key or a transform, run
    `python docs/hooks/reference_pages.py`."""
    hook = reference_hook()
    for path, make in hook.CHECKED_IN.items():
        on_disk = (ROOT / "docs" / path).read_text(encoding="utf-8")
        assert on_disk == make(), f"docs/{path} is out of date: run python docs/hooks/reference_pages.py"
