"""Every code block of the README and the docs that a reader would run: each Python block, and each shell block
with a `gpucore ...` command, runs here on small data, or is marked as not run with the reason, which the test's
skip shows.

The mark is an HTML comment on the line right before the block's opening fence (invisible on the rendered page):

    <!-- skip: needs a CUDA GPU -->

A block that needs optional packages names them the same way, and is skipped, saying so, where one is missing:

    <!-- needs: onnx onnxruntime -->

The Python blocks of one page run in order in one namespace, as a reader goes down the page (a later block may use
what an earlier one made; a block run alone first runs the page's earlier blocks), in a fresh folder for the page; the page's shell blocks run with bash in that folder, with
the environment's `gpucore` first on PATH. A shell block of plain `gpucore ...` commands alone (no other program, pipe,
redirect, variable or substitution) has bash split each command into its arguments, and runs them in this process
(conftest.gpucore_command: what the gpucore command runs, without starting torch again per command, seconds each). A page's runs draw their reports where the page talks about them, so a
block that says report.html is there is checked against a real one (README.md and the report guide; elsewhere runs skip drawing it, as in the other
tests)."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import gpucore_command

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")
SKIP_MARK = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
NEEDS_MARK = re.compile(r"^\s*<!--\s*needs:\s*(?P<modules>[\w. ]+?)\s*-->\s*$")
# A line a reader would type into a shell to run gpucore (after an optional "$ " prompt).
GPUCORE_COMMAND = re.compile(r"^\s*(\$ )?(gpucore\s|\S*python\S* -m gpucore\s|torchrun .*-m gpucore|srun .*gpucore)")
SHELL_INFOS = {"", "bash", "sh", "shell", "console", "text"}


class Block:
    def __init__(self, page, line, language, code, skip_reason, needs=()):
        self.page, self.line, self.language, self.code, self.skip_reason = page, line, language, code, skip_reason
        self.needs = needs

    @property
    def name(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page):
    """The page's fenced blocks that are Python or hold a gpucore command, with the skip mark before each."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening["fence"]:
            end += 1
        code = textwrap.dedent("\n".join(line[len(opening["indent"]):] for line in lines[index + 1:end]))
        language = opening["info"].strip().split(" ")[0].lower()
        previous = next((lines[k] for k in range(index - 1, -1, -1) if lines[k].strip()), "")
        mark, needs = SKIP_MARK.match(previous), NEEDS_MARK.match(previous)
        runs_gpucore = any(GPUCORE_COMMAND.match(line) for line in code.split("\n"))
        if language == "python" or (language in SHELL_INFOS and runs_gpucore):
            found.append(Block(page, index + 1, "python" if language == "python" else "shell", code,
                               mark["reason"] if mark else None, needs["modules"].split() if needs else ()))
        index = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]
# One torch thread in this process and in the shell blocks' (OMP_NUM_THREADS=1), as the other tests run: on a machine
# shared with other jobs, torch's OpenMP threads can wait on each other for minutes.
pytestmark = pytest.mark.usefixtures("one_thread")
# The pages whose blocks say what a run's report holds draw it; elsewhere the runs skip drawing (seconds per run).
PAGES_DRAWING_REPORTS = {ROOT / "README.md", ROOT / "docs" / "guides" / "report.md"}


class PageState:
    """One page's folder, the namespace its Python blocks share, and which of its blocks ran."""

    def __init__(self, folder):
        self.folder, self.namespace, self.ran = folder, {"__name__": "__docs__"}, set()

    def run(self, block, capsys):
        """Runs `block` after the page's earlier blocks that run (a selection such as -m slow may leave them out)."""
        for earlier in BLOCKS:
            if earlier.page == block.page and earlier.line < block.line and earlier.line not in self.ran \
                    and runnable(earlier):
                self.execute(earlier, capsys)
        self.execute(block, capsys)

    def execute(self, block, capsys):
        self.ran.add(block.line)
        if block.language == "python":
            exec(compile(block.code, block.name, "exec"), self.namespace)  # a failure's traceback names page:line
            return
        commands = gpucore_commands(block.code, self.folder)
        for run in ([run_shell(block.code, self.folder)] if commands is None else
                    (gpucore_command(capsys, *arguments) for arguments in commands)):
            assert run.returncode == 0, f"{block.name} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


def missing_modules(block):
    return [name for name in block.needs if importlib.util.find_spec(name) is None]


def runnable(block):
    return block.skip_reason is None and not missing_modules(block)


@pytest.fixture(scope="module")
def page_state(tmp_path_factory):
    """The PageState of a page, made once per test session's module."""
    states = {}

    def state(page):
        if page not in states:
            states[page] = PageState(tmp_path_factory.mktemp(page.stem))
        return states[page]

    return state


def shell_commands(code):
    """What a reader types: the lines after a "$ " prompt where the block shows one (the rest is output), else all."""
    lines = code.split("\n")
    if any(line.startswith("$ ") for line in lines):
        return "\n".join(line[2:] for line in lines if line.startswith("$ "))
    return code


def gpucore_commands(code, folder):
    """The block's commands as bash splits them into arguments (gpucore's own left out) when each is a plain
    `gpucore ...` command: no other program, pipe, redirect, variable or substitution; else None."""
    commands = shell_commands(code)
    lines = [line for line in commands.replace("\\\n", " ").split("\n") if line.strip() and not line.strip().startswith("#")]
    if not all(re.match(r"\s*gpucore\s", line) for line in lines) or any(char in commands for char in "|&;<>`$"):
        return None
    words = subprocess.run(["bash", "-euo", "pipefail", "-c", 'gpucore() { printf "%s\\0" "$#" "$@"; }\n' + commands],
                           cwd=folder, capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    found = []
    while words:
        count = int(words.pop(0))
        found.append(words[:count])
        del words[:count]
    return found


def run_shell(code, folder):
    bin_dir = str(pathlib.Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    return subprocess.run(["bash", "-euo", "pipefail", "-c", shell_commands(code)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def marks(block):
    """draws_report where the page talks about the report; slow (pyproject's markers) for the blocks that spawn
    processes (shell) or train for more than a few seconds (drawing reports)."""
    drawing = block.page in PAGES_DRAWING_REPORTS
    return ([pytest.mark.draws_report] if drawing else []) + ([pytest.mark.slow]
                                                              if drawing or block.language == "shell" else [])


@pytest.mark.parametrize("block", [pytest.param(block, marks=marks(block)) for block in BLOCKS],
                         ids=[block.name for block in BLOCKS])
def test_code_block_runs(block, page_state, monkeypatch, capsys):
    if block.skip_reason:
        pytest.skip(f"{block.name}: {block.skip_reason}")
    if missing_modules(block):
        pytest.skip(f"{block.name}: needs {', '.join(missing_modules(block))} (not installed; scripts/bootstrap.sh "
                    "--tests installs them)")
    state = page_state(block.page)
    monkeypatch.chdir(state.folder)
    started = time.perf_counter()
    state.run(block, capsys)
    # Small data keeps the whole runner near a minute; the bound is loose for a machine shared with other jobs.
    assert time.perf_counter() - started < 180, f"{block.name} took over 3 minutes: make it smaller or mark it"


def test_every_page_is_read_and_marks_name_a_reason():
    """The runner sees the blocks (a changed fence syntax would make it find none) and every mark gives a reason."""
    assert len(BLOCKS) >= 20, [block.name for block in BLOCKS]
    assert sum(block.skip_reason is None for block in BLOCKS) >= 10
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for mark in re.findall(r"<!--\s*skip\b[^>]*-->", text):
            assert SKIP_MARK.match(mark), f"{page.relative_to(ROOT)}: a skip mark without a reason: {mark}"


def test_blocks_are_found_with_their_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "# A page", "", "```python", "x = 1", "```", "",
        "<!-- skip: needs a CUDA GPU -->", "```python", "y = 2", "```",
        "<!-- needs: onnx onnxruntime -->", "```python", "w = 4", "```",
        "```bash", "pip install gpucore", "```",                      # no gpucore command: not run
        "```console", "$ gpucore runs", "name  status", "```",
        "- in a list:", "", "    ```python", "    z = 3", "    ```",
        "```yaml", "epochs: 1", "```"]))
    found = blocks_of(page)
    assert [(b.line, b.language, b.skip_reason, b.needs) for b in found] == [
        (3, "python", None, ()), (8, "python", "needs a CUDA GPU", ()), (12, "python", None, ["onnx", "onnxruntime"]),
        (18, "shell", None, ()), (24, "python", None, ())]
    assert found[4].code.strip() == "z = 3"
    assert shell_commands(found[3].code) == "gpucore runs"
