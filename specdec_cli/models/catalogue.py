"""The catalogue of named pairs: `models.toml` shipped inside this package, with the user's file merged over it.

The user's file is $SPECDEC_MODELS if set, else $XDG_CONFIG_HOME/specdec/models.toml, else
~/.config/specdec/models.toml. A user [[pair]] with a new name adds a pair; one with an
existing name changes only the keys it gives. A file that breaks the schema raises
BadConfig naming the file, the entry, the key and what was expected.

    find_pair("qwen2.5-0.5b-7b")   # -> PairEntry(name="qwen2.5-0.5b-7b", draft=HubModel(...), k=..., ...)

Left out: downloading (download.py), resolving what the user named (registry.py).
"""

from __future__ import annotations

import difflib
import importlib.resources
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadConfig, BadInput, ModelNotFound
from ..events import MAX_DRAFT_TOKENS
from ..inputs import file_problem, read_text_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

BUILTIN_PAIR_NAME = "smollm2-135m-q4_1-f32"
HF_PREFIX = "hf:"
SCHEMA_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MIN_CTX = 128
PAIR_KEYS = {"name", "builtin", "draft", "target", "k", "ctx", "note"}
MODEL_KEYS = {"repo", "pattern"}
DEFAULT_PAIR_K = 8  # a [[pair]] without k
DEFAULT_PAIR_CTX = 4096  # a [[pair]] without ctx (options.DEFAULT_CTX is the context without a pair)

# -- the catalogue ------------------------------------------------------------------------


@dataclass(frozen=True)
class HubModel:
    """A model on Hugging Face: a repository and a glob for its GGUF file(s)."""

    repo: str
    pattern: str

    @property
    def spec(self) -> str:
        return f"{HF_PREFIX}{self.repo}/{self.pattern}"


@dataclass(frozen=True)
class PairEntry:
    name: str
    draft: HubModel | None  # None for the built-in pair
    target: HubModel | None
    k: int
    ctx: int
    note: str
    builtin: bool
    origin: str  # the file that defined (or last changed) this entry


def shipped_catalogue() -> str:
    return importlib.resources.files("specdec_cli.models").joinpath("models.toml").read_text(encoding="utf-8")


def user_catalogue_path() -> Path | None:
    """The user's models.toml: $SPECDEC_MODELS (must exist), else the XDG config file if it exists."""
    explicit = os.environ.get("SPECDEC_MODELS")
    if explicit:
        path = Path(explicit).expanduser()
        problem = file_problem(path)  # never opens it: a FIFO would hang
        if problem:
            raise BadConfig(f"SPECDEC_MODELS points to {path}, which {problem}; point it at a models.toml file or unset SPECDEC_MODELS")
        return path
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    path = Path(base) / "specdec" / "models.toml"
    problem = file_problem(path)
    if problem == "does not exist":
        return None
    if problem:
        raise BadConfig(f"{path} {problem}, not a models.toml file; remove it or replace it with a file")
    return path


def load_catalogue(user_file: Path | None | bool = True) -> dict[str, PairEntry]:
    """The shipped catalogue with the user's file merged over it, by pair name, in file order.

    user_file=True finds the user's file as described in the module docstring; a Path
    uses that file; None or False uses the shipped catalogue alone.
    """
    merged = parse_catalogue(shipped_catalogue(), "models.toml (shipped with specdec)")
    if user_file is True:
        user_file = user_catalogue_path()
    if user_file:
        path = Path(user_file)
        try:
            text = read_text_file(path, "models.toml")
        except BadInput as exc:
            raise BadConfig(str(exc)) from None
        for name, (table, origin) in parse_catalogue(text, str(path)).items():
            base = merged[name][0] if name in merged else {}
            merged[name] = ({**base, **table}, origin)  # key by key; draft/target tables replaced whole
    return {name: build_entry(table, origin) for name, (table, origin) in merged.items()}


def parse_catalogue(text: str, origin: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Parse one models.toml and check the type of every key it gives (completeness comes later)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadConfig(f"{origin} is not valid TOML: {exc}") from exc
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise BadConfig(f"{origin} nests arrays or tables too deeply for the TOML parser; a models.toml needs two levels") from None
    unknown = set(data) - {"schema", "pair"}
    if unknown:
        raise BadConfig(f"{origin}: unknown top-level key {sorted(unknown)[0]!r}; expected 'schema' and [[pair]] tables")
    if "schema" in data and data["schema"] != SCHEMA_VERSION:
        raise BadConfig(f"{origin}: schema = {data['schema']!r} is not supported; expected schema = {SCHEMA_VERSION}")
    pairs = data.get("pair", [])
    if not isinstance(pairs, list) or not all(isinstance(p, dict) for p in pairs):
        raise BadConfig(f"{origin}: 'pair' must be a list of [[pair]] tables")
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for index, table in enumerate(pairs, start=1):
        where = f"{origin}: [[pair]] number {index}"
        name = table.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise BadConfig(f"{where}: key 'name' must be a string of letters, digits, '.', '_' or '-', got {name!r}")
        where = f"{origin}: pair {name!r}"
        if name in out:
            raise BadConfig(f"{where}: the name appears twice in this file; rename one of them")
        check_pair_keys(table, where)
        out[name] = (table, origin)
    return out


def check_pair_keys(table: dict[str, Any], where: str) -> None:
    unknown = set(table) - PAIR_KEYS
    if unknown:
        raise BadConfig(f"{where}: unknown key {sorted(unknown)[0]!r}; expected some of {', '.join(sorted(PAIR_KEYS))}")
    if "builtin" in table and not isinstance(table["builtin"], bool):
        raise BadConfig(f"{where}: key 'builtin' must be true or false, got {table['builtin']!r}")
    if "k" in table and not (_is_int(table["k"]) and 1 <= table["k"] <= MAX_DRAFT_TOKENS):
        raise BadConfig(f"{where}: key 'k' must be an integer from 1 to {MAX_DRAFT_TOKENS}, got {table['k']!r}")
    if "ctx" in table and not (_is_int(table["ctx"]) and table["ctx"] >= MIN_CTX):
        raise BadConfig(f"{where}: key 'ctx' must be an integer of at least {MIN_CTX} (tokens), got {table['ctx']!r}")
    if "note" in table and not isinstance(table["note"], str):
        raise BadConfig(f"{where}: key 'note' must be a string, got {table['note']!r}")
    for side in ("draft", "target"):
        if side in table:
            check_model_table(table[side], f"{where}: key '{side}'")


def check_model_table(model: Any, where: str) -> None:
    from .download import REPO_RE

    expected = '{ repo = "owner/name", pattern = "file-glob.gguf" }'
    if not isinstance(model, dict):
        raise BadConfig(f"{where} must be a table {expected}, got {model!r}")
    unknown = set(model) - MODEL_KEYS
    missing = MODEL_KEYS - set(model)
    if unknown or missing:
        bad = f"unknown key {sorted(unknown)[0]!r}" if unknown else f"missing key {sorted(missing)[0]!r}"
        raise BadConfig(f"{where}: {bad}; expected {expected}")
    repo, pattern = model["repo"], model["pattern"]
    if not isinstance(repo, str) or not REPO_RE.match(repo):
        raise BadConfig(f"{where}: 'repo' must be a Hugging Face repository name owner/name, got {repo!r}")
    problem = pattern_problem(pattern)
    if problem:
        raise BadConfig(f"{where}: 'pattern' {problem}, got {pattern!r}")


def pattern_problem(pattern: Any) -> str | None:
    """Why `pattern` is not a usable file glob, or None. Globs: * ? [..]; paths inside the repository allowed."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty string (a file glob such as '*Q4_K_M*.gguf')"
    if not pattern.lower().endswith((".gguf", "*")):
        return "must end in '.gguf' (or '*'), since it picks GGUF files"
    if pattern.startswith("/") or ".." in pattern.split("/") or "\\" in pattern:
        return "must be a path inside the repository, using '/' and no '..'"
    if pattern.count("[") != pattern.count("]"):
        return "has an unclosed '[' in its glob"
    return None


def build_entry(table: dict[str, Any], origin: str) -> PairEntry:
    name = table["name"]
    where = f"{origin}: pair {name!r}"
    builtin = bool(table.get("builtin", False))
    if builtin:
        if "draft" in table or "target" in table:
            raise BadConfig(f"{where}: a builtin pair takes no 'draft' or 'target'; remove them or set builtin = false")
        draft = target = None
    else:
        for side in ("draft", "target"):
            if side not in table:
                raise BadConfig(f"{where}: missing key '{side}'; expected {side} = {{ repo = \"owner/name\", pattern = \"file-glob.gguf\" }}")
        draft = HubModel(table["draft"]["repo"], table["draft"]["pattern"])
        target = HubModel(table["target"]["repo"], table["target"]["pattern"])
    return PairEntry(
        name=name,
        draft=draft,
        target=target,
        k=int(table.get("k", DEFAULT_PAIR_K)),
        ctx=int(table.get("ctx", DEFAULT_PAIR_CTX)),
        note=str(table.get("note", "")),
        builtin=builtin,
        origin=origin,
    )


def find_pair(name: str, catalogue: dict[str, PairEntry] | None = None) -> PairEntry:
    catalogue = load_catalogue() if catalogue is None else catalogue
    if name in catalogue:
        return catalogue[name]
    close = difflib.get_close_matches(name, list(catalogue), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ModelNotFound(f"no pair named {name!r}; {hint}`specdec models list` shows the {len(catalogue)} known pairs")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


