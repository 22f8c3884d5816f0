"""The package's shape: the folders are its layers, and imports follow them.

- The core (the modules at the top of specdec_cli/, and models/) imports no front-end.
- The front-ends (cli/, bench/, audit/, doctor/, serve/) use the core and not each other,
  with one exception: cli/ gives bench, audit, doctor and serve their commands, so it may
  import them; none of them imports cli/.
- No import circle between modules; events.py imports nothing of ours; only backend.py
  imports llama_cpp; llama.cpp's libraries load before numpy (specdec_cli/__init__.py says why).

Every relative import counts, also those inside functions and under TYPE_CHECKING (a lazy
import still makes two modules depend on each other). Modules are named by their dotted
path in the package: "engine", "cli.run", "bench.model". Examples of what fails: engine.py
importing policy.py while policy.py imports engine.py; session.py importing cli/options.py;
bench/model.py importing audit/gof.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "specdec_cli"
FRONT_ENDS = ("cli", "bench", "audit", "doctor", "serve")
# cli/ is the shell of the other front-ends: each of its commands hands one of them its flags.
MAY_IMPORT = {"cli": {"bench", "audit", "doctor", "serve"}}


def module_name(path: Path) -> str:
    """Example: specdec_cli/cli/run.py -> 'cli.run'; specdec_cli/bench/__init__.py -> 'bench'."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def internal_imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules a file imports. `from .x import y` names x, or x.y where that is a module."""
    package = module_name(path).split(".") if path.name == "__init__.py" else module_name(path).split(".")[:-1]
    package = [p for p in package if p]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package[: len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            for alias in node.names:
                sub = ".".join(target + [alias.name])
                out.add(sub if sub in known else ".".join(target))
    out.discard("")
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: internal_imports(path, known) for name, path in found.items()}


def layer(module: str) -> str:
    """'core' or the front-end a module belongs to. Example: 'cli.run' -> 'cli', 'models.registry' -> 'core'."""
    top = module.split(".")[0]
    return top if top in FRONT_ENDS else "core"


def forbidden(edges: dict[str, set[str]]) -> list[str]:
    """Every import that crosses the layers the wrong way, as 'a -> b'. Example: {"session": {"cli.options"}} -> ["session -> cli.options"]."""
    out = []
    for a, targets in sorted(edges.items()):
        for b in sorted(targets):
            la, lb = layer(a), layer(b)
            if lb == "core" or la == lb or lb in MAY_IMPORT.get(la, ()):
                continue
            out.append(f"{a} -> {b}")
    return out


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


def test_forbidden_finds_each_wrong_crossing_and_only_those():
    edges = {
        "session": {"cli.options", "engine"},  # core -> front-end
        "bench.model": {"audit.gof", "engine", "bench.native"},  # front-end -> another front-end
        "cli.bench": {"bench.run", "options"},  # the named exception
        "serve.app": {"cli.options"},  # no front-end may import cli
        "models.registry": {"backend"},
    }
    assert forbidden(edges) == ["bench.model -> audit.gof", "serve.app -> cli.options", "session -> cli.options"]


def test_the_layers_are_kept():
    edges = graph()
    assert {"engine", "options", "cli.app", "cli.run", "bench.run", "audit.run", "doctor.findings", "models.registry", "serve.app"} <= set(edges)
    assert forbidden(edges) == []


def test_only_the_backend_imports_llama_cpp():
    importers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                importers.add(name)
    assert importers == {"backend"}


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
    for module in ("specdec_cli.sampling", "specdec_cli.engine", "specdec_cli.cli.app", "specdec_cli.backend"):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, cwd=PACKAGE.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        ended = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
        assert ended.index("llama_cpp.llama_cpp") < ended.index("numpy"), module
