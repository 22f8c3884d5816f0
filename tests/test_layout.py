"""The package's shape: no import circle between its modules, events.py imports nothing of ours,
and llama.cpp's libraries load before numpy (specdec_cli/__init__.py says why).

Every `from .x import` counts, also those inside functions and under TYPE_CHECKING (a lazy
import still makes two modules depend on each other). Example of what fails: engine.py
importing policy.py while policy.py imports engine.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specdec_cli"


def internal_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:  # from . import a, b
                out.update(alias.name for alias in node.names)
    return out


def graph() -> dict[str, set[str]]:
    return {p.stem: internal_imports(p) for p in PACKAGE.glob("*.py")}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path [a, b, .., a], or None. Example: {a: {b}, b: {a}} -> [a, b, a]."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finds_a_circle_and_only_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_in_the_package():
    edges = graph()
    assert {"engine", "events", "policy", "stats"} <= set(edges)
    assert cycle(edges) is None


def test_the_shared_types_import_nothing_of_ours_and_the_loop_not_the_policy():
    edges = graph()
    assert edges["events"] == set()
    assert "policy" not in edges["engine"] and "llama_cpp" not in edges["engine"]


def test_llama_cpp_loads_before_numpy_whichever_module_is_imported_first():
    """`-X importtime` prints each module when its import ends, nested ones first: llama_cpp.llama_cpp
    (which loads the shared libraries) must end before numpy's import ends. Fails if backend.py
    imports numpy first, or if __init__.py stops importing backend."""
    for module in ("specdec_cli.sampling", "specdec_cli.engine", "specdec_cli.cli", "specdec_cli.backend"):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, cwd=PACKAGE.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        ended = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
        assert ended.index("llama_cpp.llama_cpp") < ended.index("numpy"), module
