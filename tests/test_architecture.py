"""Architecture rules read from the source, by AST, not by import.

Every module under ``src/moeplan`` is found with :func:`pkgutil.walk_packages` and parsed. From
each file's ``import`` and ``from ... import`` statements that name a ``moeplan`` module — at
top level and inside functions alike, but not under ``if TYPE_CHECKING:`` (never executed) —
the tests build the module-level import graph and assert:

(a) it is acyclic — counting type-only imports too (``if TYPE_CHECKING:``): a module and a
    helper that names its type are still a circle — and every ``moeplan`` import names a
    module that exists;
(b) no module imports a ``_private`` module or ``_private`` name of another package (a module
    may use the private helpers of its own package and of the packages it lives inside), nor
    reaches one through an imported module (``mod._helper``);
(c) the planning core (specs, cost, sim, planners, serve, search) does no file I/O and imports no
    edge package (cli, report, export, io, measured, kernel tables, runtime, profiling).

Package ``__init__`` files: importing a submodule is an edge to that submodule only — the
implicit import of its parent ``__init__`` is not an edge, or every re-export in an
``__init__`` would be a cycle; ``from pkg import name`` is an edge to ``pkg/__init__`` unless
``name`` is a submodule. Known violations in code owned elsewhere are listed, with their
issue, in the allow-lists below; an entry that no longer matches fails too, so the lists shrink.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import moeplan

SRC = Path(moeplan.__file__).parent
TESTS = Path(__file__).parent
#: Packages whose modules need torch to import: skipped by the walk when torch is missing.
TORCH_PACKAGES = ("moeplan.runtime", "moeplan.profiling")
CORE = ("specs", "cost", "sim", "planners", "serve", "search")
#: What the planning core may import besides itself.
CORE_MAY_IMPORT = ("moeplan.errors", "moeplan.units", "moeplan.traces")

#: Import cycles known and owned elsewhere: {modules of the cycle: reason}.
KNOWN_CYCLES: dict[frozenset[str], str] = {}
#: File I/O in the planning core, known and owned elsewhere: {(module, call): reason}.
KNOWN_IO: dict[tuple[str, str], str] = {
    # preset and profile files are read inside specs/cost; the loaders belong at the
    # edge (measured.py-style), handing the specs the parsed data.
    ("moeplan.specs", ".is_file"): "load_model accepts a path",
    ("moeplan.specs.hf_config", "os.open"): "read_json_file (bounded reader)",
    ("moeplan.specs.hf_config", "os.fdopen"): "read_json_file (bounded reader)",
    ("moeplan.specs.presets", "importlib.resources.files"): "preset JSON",
    ("moeplan.specs.presets", ".read_text"): "preset JSON",
    ("moeplan.cost", "importlib.resources.files"): "load_profile/profile_names",
    ("moeplan.cost", ".iterdir"): "profile_names",
    ("moeplan.cost", ".is_file"): "load_profile",
    ("moeplan.cost", ".read_text"): "load_profile",
}
#: Imports of edge packages from the planning core, known and owned elsewhere: {(module,
#: imported module): reason}.
KNOWN_EDGE_IMPORTS: dict[tuple[str, str], str] = {}

#: Test files that pin ``derandomize=True`` in ``@settings`` (harmless under the default
#: ``ci`` profile, but ``HYPOTHESIS_PROFILE=dev`` cannot randomize them).
KNOWN_PROFILE_OVERRIDES = frozenset(
    {
        "test_cost_kerneldb.py", "test_fuzz_cli.py", "test_robust_config.py",
        "test_robust_traces.py",
        "test_serve_engine.py", "test_serve_iteration.py", "test_serve_workload.py",
    }
)  # fmt: skip

#: Calls that touch the file system, by fully qualified name (after resolving import aliases).
IO_CALLS = frozenset(
    {
        "open", "io.open", "os.open", "os.fdopen", "os.stat", "os.lstat", "os.replace",
        "os.rename", "os.remove", "os.unlink", "os.makedirs", "os.mkdir", "os.rmdir",
        "os.listdir", "os.scandir", "os.walk", "os.path.exists", "os.path.isfile",
        "os.path.isdir", "os.path.getsize", "numpy.load", "numpy.save", "numpy.savez",
        "numpy.savez_compressed", "numpy.loadtxt", "numpy.savetxt", "numpy.genfromtxt",
        "numpy.fromfile", "numpy.memmap", "json.load", "json.dump",
    }
)  # fmt: skip
IO_PREFIXES = (
    "shutil.", "tempfile.", "subprocess.", "pickle.", "pandas.read_", "urllib.", "socket.",
    "glob.", "pyarrow.parquet.", "pyarrow.feather.", "pyarrow.csv.", "importlib.resources.",
    "torch.load", "torch.save", "moeplan.io.", "moeplan.measured.", "moeplan.kernel_tables.",
)  # fmt: skip
#: Methods that only a path (or an array written to a file) has.
IO_METHODS = frozenset(
    {
        "read_text", "write_text", "read_bytes", "write_bytes", "open", "mkdir", "unlink",
        "rmdir", "touch", "iterdir", "glob", "rglob", "exists", "is_file", "is_dir", "tofile",
        "to_parquet", "to_csv", "write_table", "read_table",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Import:
    """One ``moeplan`` import: the module it loads, the name taken from it, where."""

    module: str
    name: str | None
    line: int


def torch_installed() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def _walk_modules() -> dict[str, Path]:
    """pkgutil's walk (it imports packages); a torch package that cannot be imported because
    torch is missing is listed from its files instead, so the AST checks still read it."""
    torch_missing = not torch_installed()
    unimportable: list[str] = []

    def onerror(name: str) -> None:
        if not (torch_missing and name.startswith(TORCH_PACKAGES)):
            raise  # noqa: PLE0704 - re-raise the import error pkgutil caught
        unimportable.append(name)

    found = {"moeplan": SRC / "__init__.py"}
    for info in pkgutil.walk_packages(moeplan.__path__, "moeplan.", onerror=onerror):
        rel = Path(*info.name.split(".")[1:])
        found[info.name] = SRC / rel / "__init__.py" if info.ispkg else SRC / f"{rel}.py"
    for pkg in unimportable:
        for path in SRC.joinpath(*pkg.split(".")[1:]).rglob("*.py"):
            parts = path.relative_to(SRC.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def modules() -> dict[str, Path]:
    """Every module under src/moeplan: dotted name -> file."""
    return _walk_modules()


@cache
def tree(name: str) -> ast.Module:
    path = modules()[name]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def package_of(name: str) -> str:
    """The package a module belongs to: itself for a package ``__init__``."""
    path = modules().get(name)
    return name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _executed_nodes(node: ast.AST):
    """All nodes of ``node`` except those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for c in child.orelse for n in [c, *_executed_nodes(c)])
            continue
        yield child
        yield from _executed_nodes(child)


def _from_base(name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = package_of(name).split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports(name: str) -> tuple[Import, ...]:
    """The ``moeplan`` imports of module ``name`` (top level and in functions)."""
    return imports_in(tree(name), name)


@cache
def imports_typed(name: str) -> tuple[Import, ...]:
    """Every ``moeplan`` import of module ``name``, ``if TYPE_CHECKING:`` blocks included: a
    type-only import is still a dependency of the design, so the cycle check counts it."""
    return imports_in(tree(name), name, typed=True)


def imports_in(module_tree: ast.Module, name: str, typed: bool = False) -> tuple[Import, ...]:
    out: list[Import] = []
    nodes = ast.walk(module_tree) if typed else _executed_nodes(module_tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [Import(a.name, None, node.lineno) for a in node.names
                    if a.name.split(".")[0] == "moeplan"]  # fmt: skip
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, node)
            if base.split(".")[0] != "moeplan":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(Import(sub, None, node.lineno) if sub in modules()
                           else Import(base, a.name, node.lineno))  # fmt: skip
    return tuple(out)


def graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module: first line}, type-only imports included."""
    g: dict[str, dict[str, int]] = {m: {} for m in modules()}
    for m in modules():
        for imp in imports_typed(m):
            if imp.module in modules() and imp.module != m:
                g[m].setdefault(imp.module, imp.line)
    return g


def strongly_connected(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(g[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(g[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def cycle_path(g: dict[str, dict[str, int]], comp: list[str]) -> str:
    """One cycle through ``comp[0]`` inside the component, with the line of each import."""
    inside, start = set(comp), comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first back to start
        nxt = []
        for v in frontier:
            for w in g[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    hops = [start, *reversed(path[:-1]), start]
                    return (
                        " -> ".join(
                            f"{a} (line {g[a][b]})" for a, b in zip(hops, hops[1:], strict=False)
                        )
                        + f" -> {start}"
                    )
                if w in inside and w not in parent and w != start:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_walk_finds_every_source_file():
    """No folder without ``__init__.py`` hides modules from the checks below."""
    assert set(SRC.rglob("*.py")) - set(modules().values()) == set()


def test_every_moeplan_import_names_an_existing_module():
    """A stale import (a module moved by a refactor) is an error even inside a function."""
    missing = [f"{m}:{imp.line} imports {imp.module}" for m in modules() for imp in imports(m)
               if imp.module not in modules()]  # fmt: skip
    assert missing == []


def test_no_import_cycles():
    g = graph()
    cycles = {frozenset(c): cycle_path(g, c) for c in strongly_connected(g)}
    unknown = [path for comp, path in cycles.items() if comp not in KNOWN_CYCLES]
    assert unknown == [], "import cycles:\n" + "\n".join(unknown)
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert stale == [], "fixed: remove from KNOWN_CYCLES"


def test_cycle_finder_on_a_known_graph():
    """The oracle for the check above: a 3-cycle and a self-contained DAG."""
    g = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}, "e": {"d": 5}}
    assert strongly_connected(g) == [["a", "b", "c"]]
    assert cycle_path(g, ["a", "b", "c"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"
    assert strongly_connected({"a": {"b": 1}, "b": {}}) == []


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _module_aliases(module_tree: ast.Module, name: str) -> dict[str, str]:
    """Local names bound to a ``moeplan`` module by an import (``import moeplan.x as y``)."""
    out: dict[str, str] = {}
    for node in _executed_nodes(module_tree):
        if isinstance(node, ast.Import):
            out |= {a.asname: a.name for a in node.names if a.asname and a.name in modules()}
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, node)
            out |= {(a.asname or a.name): f"{base}.{a.name}" for a in node.names
                    if f"{base}.{a.name}" in modules()}  # fmt: skip
    return out


def private_uses(module_tree: ast.Module, name: str) -> list[str]:
    """Private modules or names of other packages that the source of module ``name`` uses."""
    out = []
    for imp in imports_in(module_tree, name):
        parts = imp.module.split(".")
        first = next((i for i, p in enumerate(parts) if _private(p)), None)
        if first is not None and not _inside(name, ".".join(parts[:first])):
            out.append(f"{name}:{imp.line} imports private module {imp.module}")
        elif (imp.name and _private(imp.name) and imp.module in modules()
              and not _inside(name, package_of(imp.module))):  # fmt: skip
            out.append(f"{name}:{imp.line} imports {imp.module}.{imp.name}")
    aliases = _module_aliases(module_tree, name)
    for node in _executed_nodes(module_tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in aliases):  # fmt: skip
            target = aliases[node.value.id]
            if not _inside(name, package_of(target)):
                out.append(f"{name}:{node.lineno} uses {target}.{node.attr}")
    return out


def test_no_private_imports_across_packages():
    bad = [line for m in modules() for line in private_uses(tree(m), m)]
    assert bad == []


def test_private_check_on_examples():
    """The oracle for the check above: own package and enclosing packages may, others may not."""
    src = (
        "from moeplan.cli import _common\nfrom moeplan.cli._common import x\n"
        "from moeplan.planners.plan import _helper\nimport moeplan.cli._common as c\n"
        "from moeplan.planners import plan\nplan._private_fn()\nplan.__name__\n"
        "from . import _mine\n"
    )
    assert private_uses(ast.parse(src), "moeplan.planners.dep.example") == [
        "moeplan.planners.dep.example:1 imports private module moeplan.cli._common",
        "moeplan.planners.dep.example:2 imports private module moeplan.cli._common",
        "moeplan.planners.dep.example:4 imports private module moeplan.cli._common",
    ]  # lines 3 and 6: moeplan.planners' private helpers, used from inside moeplan.planners
    assert private_uses(ast.parse(src), "moeplan.cli.example") == [
        "moeplan.cli.example:3 imports moeplan.planners.plan._helper",
        "moeplan.cli.example:6 uses moeplan.planners.plan._private_fn",
    ]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _name_aliases(module_tree: ast.Module, name: str) -> dict[str, str]:
    """Local name -> what it refers to, for every import (``np`` -> ``numpy``)."""
    out: dict[str, str] = {}
    for node in _executed_nodes(module_tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, node)
            out |= {(a.asname or a.name): f"{base}.{a.name}" for a in node.names}
    return out


def io_calls(module_tree: ast.Module, name: str) -> list[tuple[str, int]]:
    """File-system calls in the source of module ``name``: (what, line)."""
    aliases = _name_aliases(module_tree, name)
    out = []
    for node in _executed_nodes(module_tree):
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            full = aliases.get(head, head) + (f".{rest}" if rest else "")
            if full in IO_CALLS or full.startswith(IO_PREFIXES):
                out.append((full, node.lineno))
                continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in IO_METHODS:
            out.append((f".{node.func.attr}", node.lineno))
    return out


def _core_modules() -> list[str]:
    return [m for m in modules() if any(_inside(m, f"moeplan.{p}") for p in CORE)]


def test_planning_core_does_no_file_io():
    found = {(m, what): line for m in _core_modules() for what, line in io_calls(tree(m), m)}
    unknown = [f"{m}:{line} calls {what}" for (m, what), line in found.items()
               if (m, what) not in KNOWN_IO]  # fmt: skip
    assert unknown == [], "file I/O in the planning core:\n" + "\n".join(unknown)
    stale = [k for k in KNOWN_IO if k not in found]
    assert stale == [], "fixed: remove from KNOWN_IO"


def test_io_scan_on_examples():
    """The oracle for the check above: I/O by alias, by method and by builtin; not str ops."""
    src = (
        "import numpy as np\nimport pyarrow.parquet as pq\nfrom json import load\n"
        "from moeplan.io import atomic_write\n"
        "def f(p):\n    np.load(p); pq.read_table(p); load(p); open(p); p.write_text('x')\n"
        "    atomic_write(p, b'')\n"
        "    np.asarray(p); 'a'.replace('a', 'b'); import json; json.loads('1')\n"
        "if TYPE_CHECKING:\n    open(p)\n"
    )
    calls = io_calls(ast.parse(src), "moeplan.sim.example")
    assert [w for w, _ in calls] == [
        "numpy.load", "pyarrow.parquet.read_table", "json.load", "open", ".write_text",
        "moeplan.io.atomic_write",
    ]  # fmt: skip


def test_planning_core_imports_no_edge_package():
    """specs/cost/sim/planners/serve/search import only themselves, errors, units and traces."""
    core = tuple(f"moeplan.{p}" for p in CORE)
    found = {(m, imp.module): imp.line for m in _core_modules() for imp in imports(m)
             if not any(_inside(imp.module, p) for p in core + CORE_MAY_IMPORT)}  # fmt: skip
    bad = [f"{m}:{line} imports {t}" for (m, t), line in found.items()
           if (m, t) not in KNOWN_EDGE_IMPORTS]  # fmt: skip
    assert bad == []
    stale = [k for k in KNOWN_EDGE_IMPORTS if k not in found]
    assert stale == [], "fixed: remove from KNOWN_EDGE_IMPORTS"


def profile_overrides(path: Path) -> list[str]:
    """``settings(...)`` calls in a test file that set derandomize or database themselves."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and _dotted(node.func) in ("settings", "hypothesis.settings"):
            out += [f"{path.name}:{node.lineno} sets {k.arg}" for k in node.keywords
                    if k.arg in ("derandomize", "database")]  # fmt: skip
    return out


def test_property_tests_use_the_shared_profile():
    """No test pins derandomize or database: tests/conftest.py's profile decides (ci or dev)."""
    found = {p.name: profile_overrides(p) for p in sorted(TESTS.glob("test_*.py"))}
    bad = [line for name, lines in found.items() if name not in KNOWN_PROFILE_OVERRIDES
           for line in lines]  # fmt: skip
    assert bad == []
    stale = [name for name in KNOWN_PROFILE_OVERRIDES if not found.get(name)]
    assert stale == [], "fixed: remove from KNOWN_PROFILE_OVERRIDES"


def test_core_layers_import_downwards_only():
    """Each core layer imports only the layers listed before it in :data:`CORE` (and itself):
    the simulator (serve) never reaches the searches over it (search), planners never reach
    the simulator, and so on down to specs."""
    rank = {f"moeplan.{p}": i for i, p in enumerate(CORE)}

    def layer(mod: str) -> str | None:
        return next((p for p in rank if _inside(mod, p)), None)

    bad = [f"{m}:{imp.line} imports {imp.module}" for m in _core_modules() for imp in imports(m)
           if (t := layer(imp.module)) is not None and rank[t] > rank[layer(m) or t]]  # fmt: skip
    assert bad == []


@pytest.mark.parametrize("layer", CORE)
def test_core_layers_exist(layer):
    """The layer list above names real packages (a rename must update these checks)."""
    assert f"moeplan.{layer}" in modules()


def test_type_only_imports_are_edges_of_the_cycle_graph():
    """``if TYPE_CHECKING:`` imports never run, but a module and the helper that names its
    type still form a circle: the cycle graph counts them, the other checks do not."""
    src = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from moeplan.specs.model import ModelSpec\n"
    )
    typed = [i.module for i in imports_in(src, "moeplan.specs.model_checks", typed=True)]
    assert typed == ["moeplan.specs.model"]
    assert imports_in(src, "moeplan.specs.model_checks") == ()


# ---- compute once, render only -------------------------------------------------------------
#: The packages that format ``moeplan plan``'s outcome (moeplan.search.job.outcome.PlanOutcome).
RENDERERS = ("moeplan.report", "moeplan.export")
#: All they may import from the planning core: data types, presets and renderers of results
#: computed elsewhere — no planner, cost or simulator function (moeplan.search.job.run.plan_job
#: computes everything they show). A module listed stands for itself and its submodules.
RENDER_MAY_IMPORT = (
    "moeplan.specs",  # model/cluster types and presets (data)
    "moeplan.search.job.outcome",  # the outcome of plan_job (data, and its sentences)
    "moeplan.planners.plan",  # the Plan type
    "moeplan.planners.layout",  # the one layout type
    "moeplan.planners.families",  # the family registry (names, colours, exports)
    "moeplan.planners.strategy.space",  # Strategy, the colocated face of the layout type
    "moeplan.serve.iteration.instance_knobs",  # InstanceKnobs (data)
    "moeplan.cost.a2a",  # DeepEP facts: one function decides the kernel for price and flags
    "moeplan.sim.trace_export",  # draws schedules simulated by plan_job
)
#: Compute imports of the renderers known and owned elsewhere: {(module, imported): reason}.
KNOWN_RENDER_COMPUTE: dict[tuple[str, str], str] = {
    ("moeplan.export.expert_location", "moeplan.planners.placement.planner"):
        "physical_to_logical for `moeplan place`'s export (the plan path hands the map in)",
}  # fmt: skip


def render_compute_imports(module_tree: ast.Module, name: str) -> dict[str, int]:
    """{imported core module: line} of ``name`` that RENDER_MAY_IMPORT does not allow."""
    core = tuple(f"moeplan.{p}" for p in CORE)
    out: dict[str, int] = {}
    for imp in imports_in(module_tree, name):
        if any(_inside(imp.module, p) for p in core) and not any(
            _inside(imp.module, ok) for ok in RENDER_MAY_IMPORT
        ):
            out.setdefault(imp.module, imp.line)
    return out


def test_report_and_export_compute_nothing():
    """report/ and export/ format the outcome: they import no planner, cost or simulator
    function, so nothing is simulated twice to be drawn."""
    found = {(m, t): line for m in modules() if any(_inside(m, r) for r in RENDERERS)
             for t, line in render_compute_imports(tree(m), m).items()}  # fmt: skip
    bad = [f"{m}:{line} imports {t}" for (m, t), line in found.items()
           if (m, t) not in KNOWN_RENDER_COMPUTE]  # fmt: skip
    assert bad == [], "compute imported by a renderer:\n" + "\n".join(bad)
    stale = [k for k in KNOWN_RENDER_COMPUTE if k not in found]
    assert stale == [], "fixed: remove from KNOWN_RENDER_COMPUTE"


def test_render_check_on_examples():
    """The oracle for the check above: simulator, planner and cost functions are caught, in
    functions too; the outcome, types and renderers are not."""
    src = ast.parse(
        "from moeplan.search.ranking.rank import serving_curves\nfrom moeplan.search.job.outcome import x\n"
        "from moeplan.planners.plan import Plan\nimport moeplan.cost.a2a\n"
        "def f():\n    from moeplan.planners.dep.planner import schedules\n"
        "    from moeplan.sim.trace_export import gantt_figure\n"
        "    from moeplan.cost.memory import weights_floor_per_gpu\n"
        "    from moeplan.specs import load_model\n"
    )
    assert render_compute_imports(src, "moeplan.report.example") == {
        "moeplan.search.ranking.rank": 1, "moeplan.planners.dep.planner": 6, "moeplan.cost.memory": 8,
    }  # fmt: skip
