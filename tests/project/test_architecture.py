"""The package's layering, checked from the source: no import circles, no import from a lower layer to a
higher one, pytest only in the glue, and every public name where users import it from."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_autotune"

# Lower layers never import higher ones; each top-level module or subpackage has one layer.
LAYERS = {
    "results": 0, "errors": 0, "_version": 0, "defaults": 0, "space": 0, "measure": 0,
    "datasets": 1,
    "strategies": 2,
    "runners": 3, "backends": 3, "execution": 3, "static": 3,
    "engine": 4, "lock": 4,
    "simulation": 5, "gate": 5,
    "lifecycle": 6,
    "plugin": 7, "cli": 7, "__main__": 7, "__init__": 7,
}
GLUE = {"plugin", "cli", "__main__"}  # the only places that may import pytest


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("pytest_autotune",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of import nodes under ``if TYPE_CHECKING:`` (never executed, so not an import edge)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _imports(name: str) -> set[str]:
    """The package's modules that ``name`` imports, lazy imports inside functions included."""
    tree = ast.parse(MODULES[name].read_text())
    skipped = _type_checking_nodes(tree)
    package = name if _is_package(name) else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in MODULES else origin for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> tuple[str, int]:
    top = name.split(".")[1] if "." in name else "__init__"
    return top, LAYERS[top]


def test_every_module_has_a_layer():
    unknown = sorted({name.split(".")[1] for name in MODULES if "." in name} - set(LAYERS))
    assert not unknown, f"give these a layer in LAYERS: {unknown}"


def test_no_import_goes_up_a_layer():
    upward = []
    for name, targets in GRAPH.items():
        top, layer = _layer(name)
        for target in targets:
            ttop, tlayer = _layer(target)
            if tlayer > layer and ttop != top:
                upward.append(f"{name} (layer {layer}) imports {target} (layer {tlayer})")
    assert not upward, "\n".join(upward)


def test_no_import_circles():
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not cycles, "\n".join(cycles)


def test_pytest_is_imported_only_by_the_glue():
    offenders = []
    for name, path in MODULES.items():
        top, _ = _layer(name)
        if top in GLUE:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("pytest", "_pytest") for a in node.names):
                offenders.append(name)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("pytest", "_pytest"):
                offenders.append(name)
    assert not offenders, f"pytest imported outside the glue: {sorted(set(offenders))}"


def test_the_engine_and_the_lock_never_import_the_glue():
    for name, targets in GRAPH.items():
        top, _ = _layer(name)
        if top in GLUE or top == "__init__":
            continue
        glue = sorted(t for t in targets if _layer(t)[0] in GLUE)
        assert not glue, f"{name} imports the glue: {glue}"


# Where users import public names from today; moving a module must keep these working.
PUBLIC = [
    ("pytest_autotune", "tune"), ("pytest_autotune", "locked_params"), ("pytest_autotune", "TuneResult"),
    ("pytest_autotune", "__version__"), ("pytest_autotune", "use_lock"), ("pytest_autotune.engine.tuner", "TuneError"),
    ("pytest_autotune.plugin", "pytest_addoption"), ("pytest_autotune.plugin", "autotune"),
    ("pytest_autotune.plugin.fixture", "Autotune"), ("pytest_autotune.plugin.fixture", "KernelResult"),
    ("pytest_autotune.plugin.hookspec", "pytest_autotune_lockfile_name"),
    ("pytest_autotune.cli", "main"),
    ("pytest_autotune.runners", "make_runner"), ("pytest_autotune.runners", "KernelSpec"),
    ("pytest_autotune.runners", "register_runner"), ("pytest_autotune.space", "SearchSpace"),
    ("pytest_autotune.strategies", "make_strategy"), ("pytest_autotune.lock.lookup", "locked_params"),
    ("pytest_autotune.lock.lockfile", "Lockfile"), ("pytest_autotune.engine.tuner", "tune"),
    ("pytest_autotune.simulation", "simulate_search"), ("pytest_autotune.datasets", "load_dataset"),
]


@pytest.mark.parametrize("module, name", PUBLIC, ids=[f"{m}:{n}" for m, n in PUBLIC])
def test_public_names_import_where_users_import_them(module, name):
    assert hasattr(importlib.import_module(module), name)


def test_entry_points_resolve():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("autotune") == "pytest_autotune.plugin"
    importlib.import_module(found["autotune"])
    scripts = {ep.name: ep for ep in entry_points(group="console_scripts")}
    assert callable(scripts["pytest-autotune"].load())


def test_every_error_of_the_package_has_one_root() -> None:
    """``except AutotuneError`` catches every error the package raises on purpose (control-flow signals
    private to a module, named with a leading underscore, excepted)."""
    from pytest_autotune.errors import AutotuneError

    orphans = []
    for name in sorted(n for n in MODULES if not n.endswith("__main__")):  # __main__ runs the CLI
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, Warning)
                    and obj.__module__ == name and not attr.startswith("_")
                    and not issubclass(obj, AutotuneError)):
                orphans.append(f"{name}.{attr}")
    assert not orphans, f"errors without the root class AutotuneError: {orphans}"


def test_the_pytest_glue_reads_the_layers_below_only_through_the_lifecycle() -> None:
    """The plugin holds no lock, gate or engine logic: it imports the lifecycle's public API (the package), the
    root errors and the defaults, and its own modules; everything else it needs the lifecycle exports."""
    allowed = {"pytest_autotune.lifecycle", "pytest_autotune.errors", "pytest_autotune.defaults"}
    offenders = sorted(f"{name} imports {target}" for name, targets in GRAPH.items()
                       if name.startswith("pytest_autotune.plugin") for target in targets
                       if not target.startswith("pytest_autotune.plugin") and target not in allowed)
    assert not offenders, "\n".join(offenders)


def test_moved_runner_modules_import_from_their_old_paths():
    """runners/ was split into backends/ and execution/; the old module paths name the same modules (users' imports
    keep working)."""
    from pytest_autotune.runners import MOVED

    for old, new in sorted(MOVED.items()):
        assert new in MODULES, new
        assert importlib.import_module(f"pytest_autotune.runners.{old}") is importlib.import_module(new)
