"""Dependencies point one way (docs/architecture.md): the suite never names baselines or reproductions, the report
reads records without the training loop, and the command modules share errors through a low module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suite"
OUTSIDE = ("baselines", "reproductions")


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in `tree`, nested ones included (the suite imports lazily), and of
    every importlib.import_module whose name starts with literal text (an import by name all the same)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif literal := _import_module_literal(node):
            found.append((node.lineno, literal))
    return found


def _import_module_literal(node: ast.AST) -> str | None:
    """The leading literal text of import_module("x.y") or import_module(f"x.{name}"), else None."""
    if not (isinstance(node, ast.Call) and node.args and _called_name(node.func) == "import_module"):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.JoinedStr) and arg.values:
        arg = arg.values[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _called_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _imports_of(path: Path) -> list[tuple[int, str]]:
    return _imported(ast.parse(path.read_text(), filename=str(path)))


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`: this process has imported too much."""
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_suite_never_imports_baselines_or_reproductions():
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(SUITE.rglob("*.py"))
        for line, module in _imports_of(path)
        if module.split(".")[0] in OUTSIDE
    ]
    assert not offending, "suite/ must find baselines and reproductions, not name them:\n" + "\n".join(offending)


def test_the_scan_sees_lazy_and_dotted_imports():
    code = (
        "def f():\n    from baselines.optim import x\n    import reproductions.sdp\n"
        "importlib.import_module(f'reproductions.{name}.plan')\nimportlib.import_module(PACKAGE)\n"
    )
    modules = sorted(m for _, m in _imported(ast.parse(code)))
    assert modules == ["baselines.optim", "reproductions.", "reproductions.sdp"]


def test_report_does_not_import_the_training_loop_or_fsdp():
    loaded = _loaded_after("import suite.report")
    assert "suite.run.train" not in loaded
    assert "torch.distributed.fsdp" not in loaded
    assert "suite.estimate.scale" not in loaded  # it imports the Worker


@pytest.mark.parametrize("module", ["suite.errors", "suite.estimate.beside"])
def test_low_modules_import_no_command(module):
    loaded = _loaded_after(f"import {module}")
    packages = {module.rsplit(".", i)[0] for i in range(1, module.count("."))}  # a package's docstring only
    low = {module, *packages, "suite.records", "suite.atomic", "suite.arms", "suite.config"}
    assert not {m for m in loaded if m.startswith("suite.")} - low


def test_errors_imports_nothing_of_the_suite():
    assert not [m for _, m in _imports_of(SUITE / "errors.py") if m.split(".")[0] == "suite"]


def test_evaluate_command_does_not_import_the_cli():
    # the cli imports the evaluate command to register it; the reverse made a cycle
    assert "suite.cli" not in _loaded_after("import suite.evals.command")


def _module_graph() -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports at run time (imports under `if TYPE_CHECKING` are
    annotations only and make no circle); `from package import submodule` names the submodule."""
    paths = {}
    for top in ("suite", *OUTSIDE):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        wanted = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(paths)
                wanted |= subs if len(subs) == len(node.names) else {node.module, *subs}
        graph[name] = set()
        for target in wanted:
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, found = {}, {}, [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles_in_suite_baselines_or_reproductions():
    assert _cycles(_module_graph()) == []


def test_the_circle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_checkpoints_know_the_run_state_not_the_training_loop():
    # annotations included: checkpoint.py takes a RunState the Worker builds, never the Worker itself
    assert not [m for _, m in _imports_of(SUITE / "run" / "checkpoint.py") if m == "suite.run.train"]
