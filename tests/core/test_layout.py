"""The package's shape: the folders are its layers, and imports follow them.

The core's parts, lowest first; a core module imports only its own part and lower ones:

    shared    errors, events, inputs, prompts,    what everyone uses (events.py imports nothing of ours;
              clock, causal_model, atomic         causal_model: the model interface and the KV catch-up rule;
                                                  atomic: files several processes share)
    maths     maths/                              pure numpy: p, q, the accept/reject rules
    llama     llama/                              the only importer of llama_cpp
    models    models/                             where model files come from
    grammar   grammar/                            constraints: compiled grammars, a sequence's masks, tool calls
    drafting  drafting/                           who proposes tokens
    tuning    tuning/                             how many tokens, which rule
    decoding  decoding/                           the round, the driver, the counters
    wiring    options, compat, session            settings, pairs, loading a pair into engines

So the maths imports no llama.cpp module, drafting never verifies through the engine, and the
loop (decoding/engine.py) does not import the draft-length policy (the caller hands it one).

- The core imports no front-end.
- The front-ends (cli/, bench/, audit/, doctor/, serve/) use the core and not each other,
  with one exception: cli/ gives bench, audit, doctor and serve their commands, so it may
  import them; none of them imports cli/.
- No import circle between modules; llama.cpp's libraries load before numpy (specdec_cli/__init__.py says why).

Every relative import counts, also those inside functions and under TYPE_CHECKING (a lazy
import still makes two modules depend on each other). Modules are named by their dotted
path in the package: "decoding.engine", "cli.run", "bench.model". Examples of what fails:
maths/sampling.py importing llama/model.py; drafting/model.py importing decoding/engine.py;
session.py importing cli/options.py; bench/model.py importing audit/gof.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "specdec_cli"
FRONT_ENDS = ("cli", "bench", "audit", "doctor", "serve")
CORE_PARTS = ("shared", "maths", "llama", "models", "grammar", "drafting", "tuning", "decoding", "wiring")  # lowest first
TOP_LEVEL = {"errors": "shared", "clock": "shared", "events": "shared", "inputs": "shared", "prompts": "shared", "causal_model": "shared", "atomic": "shared", "options": "wiring", "compat": "wiring", "session": "wiring", "": "wiring"}
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


def part(module: str) -> str:
    """The core part a core module belongs to. Example: 'drafting.lookup' -> 'drafting', 'errors' -> 'shared'."""
    top = module.split(".")[0]
    return TOP_LEVEL[module] if module in TOP_LEVEL else top


def downward(edges: dict[str, set[str]]) -> list[str]:
    """Every core import of a higher part, as 'a -> b'. Example: {"maths.sampling": {"llama.model", "errors"}} -> ["maths.sampling -> llama.model"]."""
    out = []
    for a, targets in sorted(edges.items()):
        if layer(a) != "core":
            continue
        for b in sorted(targets):
            if layer(b) == "core" and CORE_PARTS.index(part(b)) > CORE_PARTS.index(part(a)):
                out.append(f"{a} -> {b}")
    return out


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
        "models.registry": {"llama.gguf"},
    }
    assert forbidden(edges) == ["bench.model -> audit.gof", "serve.app -> cli.options", "session -> cli.options"]


def test_the_layers_are_kept():
    edges = graph()
    assert {"decoding.engine", "options", "cli.app", "cli.run", "bench.run", "audit.run", "doctor.findings", "models.registry", "serve.app"} <= set(edges)
    assert forbidden(edges) == []


def test_downward_finds_each_climb_and_only_those():
    edges = {
        "maths.sampling": {"llama.model", "errors"},  # the maths reaching llama.cpp
        "drafting.model": {"decoding.engine", "causal_model", "maths.sampling"},  # drafting reaching the loop
        "session": {"decoding.engine", "llama.model"},  # the wiring may use every part
        "cli.run": {"session"},  # front-ends are not core parts
    }
    assert downward(edges) == ["drafting.model -> decoding.engine", "maths.sampling -> llama.model"]


def test_every_core_module_has_a_part_and_imports_only_its_own_and_lower_ones():
    edges = graph()
    core = [m for m in edges if layer(m) == "core"]
    assert {part(m) for m in core} == set(CORE_PARTS), "a core module outside the parts (add it to CORE_PARTS or TOP_LEVEL)"
    assert downward(edges) == []


def test_only_the_llama_package_imports_llama_cpp():
    importers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                importers.add(name)
    assert importers and {name.split(".")[0] for name in importers} == {"llama"}


def test_cycle_finds_a_circle_and_only_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_in_the_package():
    edges = graph()
    assert {"decoding.engine", "events", "tuning.policy", "decoding.stats"} <= set(edges)
    assert cycle(edges) is None


def test_the_shared_types_import_nothing_of_ours_and_the_loop_not_the_policy():
    edges = graph()
    assert edges["events"] == set()
    assert {"tuning.policy", "tuning.adaptive", "tuning.carried", "tuning.chain"} <= set(edges)
    assert not {"tuning.policy", "tuning.adaptive", "tuning.carried", "tuning.chain"} & edges["decoding.engine"]
    assert not any(m.startswith("llama") for m in edges["decoding.engine"])
    maths = [m for m in edges if part(m) == "maths" and m != "maths"]
    assert {"maths.sampling", "maths.distribution", "maths.filters", "maths.dense", "maths.draw", "maths.residual", "maths.speculative"} <= set(maths)
    assert all(part(m) in ("maths", "shared") for name in maths for m in edges[name])


def test_the_model_interface_lies_below_both_the_drafters_and_the_loop():
    """The loop and the drafters drive models through one interface (CausalModel, catch_up): it is
    a shared module, so the loop does not reach into drafting/ for the target's interface, nor
    drafting/ up into decoding/ for it."""
    edges = graph()
    assert part("causal_model") == "shared"
    assert {"causal_model"} <= edges["decoding.engine"] & edges["drafting.model"] & edges["tuning.cost_curve"]
    assert not any(m.startswith("drafting.") for m in edges["causal_model"])


def test_the_server_and_the_model_are_split_by_job_with_the_wiring_on_top():
    """serve/app.py wires routes to the parts that answer them (the body, the completions, the one
    error shape, the middleware); llama/model.py loads and decodes on top of the vocabulary and the
    chat template. No part imports what wires it, and each job has one owner: the error shape is
    serve/errors.py's alone, the vocabulary's calls llama/vocab.py's. Fails if, say, completions.py
    imports app.py, or model.py tokenizes again."""
    edges = graph()
    serve_parts = {"serve.body", "serve.completions", "serve.errors", "serve.middleware", "serve.server"}
    assert serve_parts <= set(edges)
    assert {"serve.body", "serve.completions", "serve.errors", "serve.middleware"} <= edges["serve.app"]
    assert not any("serve.app" in edges[m] for m in serve_parts)
    assert "serve.errors" in edges["serve.body"] & edges["serve.completions"] & edges["serve.middleware"]
    assert not {m for m in edges["serve.server"] if m.startswith("serve.")}, "uvicorn's side needs nothing of the app"
    assert {"llama.vocab", "llama.chat_template"} <= edges["llama.model"]
    assert "llama.model" not in edges["llama.vocab"] | edges["llama.chat_template"]
    found = modules()
    owners = {
        (node.name, m)
        for m, path in found.items()
        if m.startswith("serve.")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in ("ApiError", "error_response", "from_specdec")
    }
    assert owners == {("ApiError", "serve.errors"), ("error_response", "serve.errors"), ("from_specdec", "serve.errors")}
    calls = {node.attr for node in ast.walk(ast.parse(found["llama.model"].read_text(encoding="utf-8"))) if isinstance(node, ast.Attribute)}
    assert not calls & {"llama_tokenize", "llama_token_to_piece", "llama_vocab_get_attr", "llama_vocab_get_text", "llama_chat_apply_template"}


def test_llama_cpp_loads_before_numpy_whichever_module_is_imported_first():
    """`-X importtime` prints each module when its import ends, nested ones first: llama_cpp.llama_cpp
    (which loads the shared libraries) must end before numpy's import ends. Fails if llama/log.py
    imports numpy first, or if __init__.py stops importing it."""
    for module in ("specdec_cli.maths.filters", "specdec_cli.decoding.engine", "specdec_cli.cli.app", "specdec_cli.llama.model"):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, cwd=PACKAGE.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        ended = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
        assert ended.index("llama_cpp.llama_cpp") < ended.index("numpy"), module
