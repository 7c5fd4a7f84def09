"""report.html in a real browser: Debian's chromium, headless. The screenshot has the asked size and is not
blank; in the loaded page every image decoded and nothing points off the machine."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import require

Image = require("PIL.Image")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/bootstrap.sh installs it)"),
              pytest.mark.draws_report, pytest.mark.slow]

# Run after the page's load event: what the test reads back from the dumped DOM.
CHECK = """<script>window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const links = Array.from(document.querySelectorAll("[src],[href]")).map(e => e.getAttribute("src") || e.getAttribute("href"));
  const facts = {images: images.length, loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
                 remote: links.filter(l => /^(https?:)?\\/\\//i.test(l.trim()))};
  const out = document.createElement("pre"); out.id = "check"; out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});</script>"""


def _chromium(*arguments, cwd):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--user-data-dir=" + str(cwd / "profile"), *arguments],
                          capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.fixture
def page(fashion_run, tmp_path):
    """A folder of the test's own and the report.html of the session's finished run."""
    return tmp_path, os.path.join(fashion_run.run_dir, "report.html")


def test_the_screenshot_has_the_size_asked_for_and_shows_the_report(page):
    folder, path = page
    shot = folder / "report.png"
    run = _chromium(f"--screenshot={shot}", "--window-size=1280,2000", "file://" + path, cwd=folder)
    assert shot.exists(), run.stderr[-2000:]
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape == (2000, 1280, 3)
    assert image.std() > 20  # text, tables and plots, not a blank page
    assert (image.reshape(-1, 3).std(1) > 30).mean() > 0.002  # coloured pixels (lines, matrices): the plots drew


def test_every_image_loads_and_nothing_points_off_the_machine(page):
    folder, path = page
    checked = folder / "checked.html"
    checked.write_text(open(path, encoding="utf-8").read().replace("</body>", CHECK + "</body>"), encoding="utf-8")
    run = _chromium("--dump-dom", "--virtual-time-budget=10000", "file://" + str(checked), cwd=folder)
    found = re.search(r'<pre id="check">(.*?)</pre>', run.stdout)
    assert found, run.stderr[-2000:]
    facts = json.loads(found.group(1))
    assert facts["images"] == 7 and facts["loaded"] == facts["images"], facts
    assert facts["remote"] == []
