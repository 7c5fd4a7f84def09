"""The package's layout: no import cycles between its folders (and top-level modules), every import going down the
package's floors (FLOORS), command-line code only in cli.py, every public name still where users find it, no library
source file over LONGEST_SOURCE_FILE lines, and docs/architecture.md's Layout table matching the tree."""
import ast
import os
import re

import gpucore

PACKAGE = os.path.dirname(gpucore.__file__)


def _unit(module: str) -> str:
    """gpucore.training.fit_loop -> training; gpucore.config -> config: what a cycle is counted between."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                yield relative[: -len(".__init__")] if relative.endswith(".__init__") else relative, path


def _imports(module: str, path: str, is_package: bool):
    """The gpucore modules `module` imports (relative imports resolved; `from . import x` counts x)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            parent = base[: len(base) - node.level + 1]
            target = ".".join(parent + ([node.module] if node.module else []))
            if node.module:
                yield target
            else:
                yield from (f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
            yield from (name for name in names if name and name.startswith("gpucore."))


def test_no_import_cycles_between_folders():
    graph = {}
    for module, path in _modules():
        is_package = path.endswith("__init__.py")
        unit = _unit(module)
        for target in _imports(module, path, is_package):
            other = _unit(target) if target != "gpucore" else None
            if other and other != unit and unit != "gpucore" and other not in ("_C", "_build_info"):
                graph.setdefault(unit, set()).add(other)

    def cycle_from(start, node, seen):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [node, nxt]
            if nxt not in seen:
                seen.add(nxt)
                found = cycle_from(start, nxt, seen)
                if found:
                    return [node] + found
        return None

    for unit in sorted(graph):
        cycle = cycle_from(unit, unit, {unit})
        assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


# The package's floors, lowest first: a folder (or top-level module) imports only from its own floor and the floors
# below it, so the data never reaches up into training or evaluation, evaluation never into training, models and tasks
# never into data or training, and the ground floor depends on nothing of gpucore's but the compiled core (_C).
FLOORS = (
    # ground: errors, plain values, the run directory's file names and history rows, redaction, signals, process
    # settings
    {"errors", "values", "run_files", "run_history", "redact", "signals", "process_settings", "_version_check"},
    # building blocks: the transforms' list, checkpoint files, devices, tasks (loss, metrics, decoding), the fused
    # ops, the runs table
    {"transforms", "checkpoint", "device", "tasks", "ops", "runs"},
    {"models"},
    {"config"},  # reads the models' and transforms' names to check a config's keys
    {"data"},
    {"cam", "report"},  # Grad-CAM and the run report, drawn from a model and its data
    # gpucore.load, evaluate, predict, export: they serve data through data/ (a data set's plan) and place models
    # through device/, never through training/ (the loop's own modules)
    {"evaluation"},
    {"training"},
    {"train", "cli", "__main__", "gpucore"},  # the entry points: gpucore.train, the command line, the package
)
COMPILED = ("_C", "_build_info")  # the extension and its build facts (generated): below every floor


def _floor(unit):
    return next((index for index, units in enumerate(FLOORS) if unit in units), None)


def test_imports_go_down_the_floors():
    """Every import goes to the importer's own floor or one below it (FLOORS): data never imports training or
    evaluation, evaluation never training, models and tasks never data or training, the ground floor nothing of
    gpucore's; a new folder or top-level module gets its floor in FLOORS."""
    upward, unplaced = [], set()
    for module, path in _modules():
        unit = _unit(module)
        if unit in COMPILED:
            continue
        if _floor(unit) is None:
            unplaced.add(unit)
            continue
        for target in _imports(module, path, path.endswith("__init__.py")):
            other = _unit(target) if target != "gpucore" else "gpucore"
            if other in COMPILED:
                continue
            if _floor(other) is None:
                unplaced.add(other)
            elif _floor(other) > _floor(unit):
                upward.append(f"{module} ({unit}) imports {target} ({other}, a floor above)")
    assert not unplaced, f"units with no floor in test_layout.FLOORS: {sorted(unplaced)}"
    assert not upward, "imports against the floors:\n" + "\n".join(upward)


def test_the_floors_hold_the_rules_the_layout_promises():
    """The floors themselves say what the layout promises (so a reordering of FLOORS cannot drop a rule)."""
    below = lambda low, high: _floor(low) < _floor(high)  # noqa: E731
    assert all(below("data", above) for above in ("training", "evaluation"))
    assert below("evaluation", "training")
    assert all(below(low, high) for low in ("models", "tasks") for high in ("data", "training"))
    assert all(below(ground, unit) for ground in FLOORS[0] for units in FLOORS[1:] for unit in units)


def test_command_line_code_lives_in_cli_only():
    for module, path in _modules():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if module != "gpucore.cli":
            assert "argparse" not in text and "def run_command" not in text and not re.search(r"(?<!\w)args\.", text), module


def test_public_names_are_where_users_find_them():
    import gpucore.data
    import gpucore.models

    for name in gpucore.__all__:
        assert getattr(gpucore, name) is not None, name
    assert gpucore.data.read_npz is gpucore.data.readers.read_npz
    assert gpucore.models.build_model is gpucore.models.registry.build_model
    assert issubclass(gpucore.ExportError, RuntimeError)


def _source_tree():
    """The repository's root and its tracked files (paths relative to the root); skips outside a git checkout."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # .git is a folder in a clone, a file in a git worktree: either is a source tree
    if not all(os.path.exists(os.path.join(root, *path)) for path in (("docs", "architecture.md"), (".git",))):
        import pytest
        pytest.skip("needs the source tree (a git checkout)")
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    return root, tracked


LONGEST_SOURCE_FILE = 600  # lines: past it a file holds more than one concern (issue 71); split it by concern


def test_no_library_source_file_is_over_600_lines():
    """Every library source file (python/ and csrc/: Python, C++, CUDA, headers) stays within LONGEST_SOURCE_FILE
    lines."""
    root, tracked = _source_tree()
    sources = [path for path in tracked if path.startswith(("python/", "csrc/"))
               and path.endswith((".py", ".cpp", ".h", ".cu", ".cuh"))]
    assert len(sources) > 100, sources  # the tree was found and read
    lengths = {path: sum(1 for _ in open(os.path.join(root, path), encoding="utf-8")) for path in sources}
    longer = {path: lines for path, lines in lengths.items() if lines > LONGEST_SOURCE_FILE}
    assert not longer, f"library source files over {LONGEST_SOURCE_FILE} lines (split each by concern): {longer}"


def test_architecture_layout_table_lists_every_folder():
    """docs/architecture.md's Layout table has one row per folder of the tree (down to python/gpucore/training/loggers;
    an example's own subfolders and the headers' mirror folders are described by their parent's row), and every row
    is a folder that exists."""
    root, tracked = _source_tree()
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    layout = text[text.index("## Layout"):]
    rows = re.findall(r"^\| `([^`]+)/` \|", layout, flags=re.M)
    assert len(rows) == len(set(rows)), "a folder has two rows"
    folders = {os.path.dirname(path) for path in tracked} - {""}
    folders |= {os.path.dirname(folder) for folder in folders} - {""}  # a folder of folders only (csrc/include)
    described_by_parent = ("examples/", "csrc/include/gpucore/", "csrc/ops/cuda/emulator/")
    needed = {folder for folder in folders
              if not any(folder.startswith(parent) and folder != parent.rstrip("/") for parent in described_by_parent)
              and folder not in ("csrc", "csrc/include", "python", "tests")}
    needed |= {folder for folder in folders if folder.count("/") == 1 and folder.startswith("examples/")}
    missing = sorted(needed - set(rows))
    assert not missing, f"docs/architecture.md's Layout table has no row for {missing}"
    gone = sorted(row for row in rows if not os.path.isdir(os.path.join(root, row)))
    assert not gone, f"docs/architecture.md's Layout table lists folders that do not exist: {gone}"


def test_the_test_command_reruns_every_file_with_kernel_build_tests():
    """scripts/run_tests.sh runs the tests marked kernel_build again under ATEN_CPU_CAPABILITY=default, collecting
    only the files it names: a file that holds such a test and is not named would be left out silently."""
    tests = os.path.dirname(os.path.abspath(__file__))
    marked = {name for name in os.listdir(tests) if name.startswith("test_") and name.endswith(".py")
              and re.search(r"pytest\.mark\.kernel_build\b", open(os.path.join(tests, name), encoding="utf-8").read())}
    command = open(os.path.join(tests, "..", "..", "scripts", "run_tests.sh"), encoding="utf-8").read()
    rerun = command[command.index('ATEN_CPU_CAPABILITY=default "$PY"'):]
    rerun = set(re.findall(r"tests/python/(test_\w+\.py)", rerun[:rerun.index('"$@"')]))
    assert marked and marked == rerun, f"marked but not rerun: {sorted(marked - rerun)}; rerun but not marked: " \
                                       f"{sorted(rerun - marked)}"


def test_the_second_processs_files_exist_and_hold_only_in_process_tests():
    """session_jobs.BACKGROUND_FILES run in a second pytest process: a name that no longer exists would leave that
    process idle, and a file with a prestarted job or a shared session run would do that work twice."""
    from session_jobs import BACKGROUND_FILES

    tests = os.path.dirname(os.path.abspath(__file__))
    for name in BACKGROUND_FILES:
        path = os.path.join(tests, name)
        assert os.path.isfile(path), f"session_jobs.BACKGROUND_FILES names {name}, which is not in tests/python"
        source = open(path, encoding="utf-8").read()
        shared = re.findall(r"pytest\.mark\.prestarted|\bfashion_run\b|\bcaptcha_run\b", source)
        assert not shared, f"{name} runs in the second process but uses {sorted(set(shared))}"
