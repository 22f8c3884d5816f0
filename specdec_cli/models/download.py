"""GGUF files from Hugging Face: match a glob against a repository, download into the hub cache.

A model on the Hub is a repository and a file pattern (a glob, matched without regard to
case). The pattern is resolved against the repository's file list when the model is pulled,
so a renamed file does not break it. A split GGUF counts as one model: a pattern that
matches any of its parts brings all of them, and the first part's path is what llama.cpp
loads (it finds the other parts beside it).

    model = pull("Qwen/Qwen2.5-7B-Instruct-GGUF", "qwen2.5-7b-instruct-q4_k_m*.gguf")
    model.files  # ('qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf', '...-00002-of-00002.gguf')
    model.path   # <HF_HUB_CACHE>/models--Qwen--Qwen2.5-7B-Instruct-GGUF/snapshots/<commit>/...-00001-of-00002.gguf

Everything goes through huggingface-hub and its normal cache. Its environment variables
apply because nothing here overrides them: HF_ENDPOINT (a mirror), HF_TOKEN (gated or
private repositories), HF_HOME / HF_HUB_CACHE (where files go), HF_HUB_OFFLINE (no
network: resolve from the cache only), HF_HUB_DISABLE_PROGRESS_BARS. The `endpoint`,
`cache_dir` and `token` arguments exist for library callers; None means "as configured".

Resuming: huggingface-hub picks up a transfer that breaks mid-file within one call (it
retries with an HTTP Range request). Across runs, every file that finished is kept, so
pulling a split model again fetches only the parts that are missing. A file cut off when
the process died is downloaded again from its start (huggingface-hub 1.x and later do not
keep partial files between processes).

Failures are one line (hub_errors). huggingface-hub's own log, its retries above all (five,
23 s in all, before an unreachable endpoint is given up), is shown only at INFO, i.e. with
SPECDEC_LLAMA_LOG=1 (route_hub_log).

Left out: the catalogue of pairs (models/catalogue.py) and loading (llama/model.py).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from ..errors import DownloadError, ModelNotFound
from ..llama.resources import human_size

log = logging.getLogger("specdec")

SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
REF_RE = re.compile(r"[0-9a-fA-F]{7,64}")  # what refs/<revision> holds: a commit hash, nothing else
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
LISTED_FILES_MAX = 40  # how many GGUF models an error message lists before "... and N more"


@dataclass(frozen=True)
class LocalModel:
    """A model's files on disk: `path` is the one to load (the first part of a split)."""

    repo: str
    files: tuple[str, ...]  # names inside the repository, parts in order
    path: Path
    size: int  # bytes, all parts

    @property
    def parts(self) -> list[Path]:
        return [self.path.parent / Path(name).name for name in self.files]


@dataclass(frozen=True)
class RemoteModel:
    """A pattern's match in a repository's file list: one file or every part of a split."""

    repo: str
    files: tuple[str, ...]
    size: int | None  # bytes, all parts, when the Hub reported every size


# -- matching (pure) -------------------------------------------------------------------


def split_part(name: str) -> tuple[str, int, int] | None:
    """('dir/stem', part, total) for a split GGUF name, else None. 'a-00002-of-00003.gguf' -> ('a', 2, 3)."""
    m = SPLIT_RE.match(name)
    return (m["stem"], int(m["part"]), int(m["total"])) if m else None


def group_models(names: Iterable[str]) -> list[tuple[str, ...]]:
    """GGUF names grouped into models: a lone file, or the parts of one split in order.

    Example: ['b.gguf', 'a-00002-of-00002.gguf', 'a-00001-of-00002.gguf', 'x.txt']
          -> [('a-00001-of-00002.gguf', 'a-00002-of-00002.gguf'), ('b.gguf',)]
    """
    singles: list[tuple[str, ...]] = []
    splits: dict[tuple[str, int], dict[int, str]] = {}
    for name in names:
        if not name.lower().endswith(".gguf"):
            continue
        part = split_part(name)
        if part is None:
            singles.append((name,))
        else:
            stem, index, total = part
            splits.setdefault((stem, total), {})[index] = name
    grouped = singles + [tuple(parts[i] for i in sorted(parts)) for parts in splits.values()]
    return sorted(grouped, key=lambda files: files[0].lower())


def matches(name: str, pattern: str) -> bool:
    """Glob match ignoring case: 'Qwen-Q4_K_M.gguf' matches '*q4_k_m.gguf'."""
    return fnmatch.fnmatchcase(name.lower(), pattern.lower())


def describe_files(names: Iterable[str]) -> str:
    """A short list of the GGUF models among `names`, splits shown once with their part count."""
    models = group_models(names)
    shown = [files[0] + (f" (+{len(files) - 1} more parts)" if len(files) > 1 else "") for files in models]
    if len(shown) > LISTED_FILES_MAX:
        shown = shown[:LISTED_FILES_MAX] + [f"... and {len(shown) - LISTED_FILES_MAX} more"]
    return ", ".join(shown)


def select_model(repo: str, pattern: str, sizes: Mapping[str, int | None]) -> RemoteModel:
    """The one model in a repository's file list (name -> size) that `pattern` picks.

    Raises ModelNotFound when nothing matches (listing what the repository holds), when
    the pattern picks several models, or when a split model lacks some of its parts.
    """
    models = group_models(sizes)
    picked = picked_models(models, pattern)
    if not picked:
        if not models:
            others = ", ".join(sorted(sizes)[:LISTED_FILES_MAX]) or "nothing"
            raise ModelNotFound(f"{repo} holds no GGUF files (it has: {others})")
        raise ModelNotFound(
            f"no GGUF file in {repo} matches {pattern!r}; the repository has: {describe_files(sizes)}"
        )
    if len(picked) > 1:
        raise ambiguous(repo, pattern, picked)
    files = picked[0]
    part = split_part(files[0])
    if part is not None:
        stem, _, total = part
        have = {split_part(name)[1] for name in files}
        missing = [i for i in range(1, total + 1) if i not in have]
        if missing or len(files) != total:
            raise ModelNotFound(
                f"{repo} has only {len(files)} of the {total} parts of {stem}; missing part(s) "
                + ", ".join(str(i) for i in missing)
            )
    known = [sizes[name] for name in files]
    size = sum(known) if all(s is not None for s in known) else None
    return RemoteModel(repo=repo, files=files, size=size)


def picked_models(models: list[tuple[str, ...]], pattern: str) -> list[tuple[str, ...]]:
    """The models (grouped files) of which `pattern` matches at least one file."""
    return [files for files in models if any(matches(name, pattern) for name in files)]


def ambiguous(repo: str, pattern: str, picked: list[tuple[str, ...]], where: str = "") -> ModelNotFound:
    """The error for a pattern that picks several models, listing them."""
    return ModelNotFound(
        f"{pattern!r} matches {len(picked)} models in {repo}{where}: {describe_files(n for files in picked for n in files)}; "
        f"give a narrower pattern, e.g. {picked[0][0]!r}"
    )


def check_repo(repo: str) -> None:
    if not REPO_RE.match(repo):
        raise ModelNotFound(f"{repo!r} is not a Hugging Face repository name; expected owner/name, e.g. Qwen/Qwen2.5-7B-Instruct-GGUF")


# -- the cache (no network) -------------------------------------------------------------


def hub_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """huggingface-hub's cache directory, as it computes it (HF_HUB_CACHE, HF_HOME, ...)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, as huggingface-hub reads it."""
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def _snapshots(repo_dir: Path, revision: str) -> list[Path]:
    """Snapshot folders to search: the one `refs/<revision>` points at first, then the newest others."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return []
    ordered: list[Path] = []
    pinned = _ref_snapshot(repo_dir, snapshots, revision)
    if pinned is not None:
        ordered.append(pinned)
    inside = [p for p in snapshots.iterdir() if p not in ordered and _inside(p, snapshots) and p.is_dir()]
    return ordered + sorted(inside, key=lambda p: p.stat().st_mtime, reverse=True)


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, symlinks resolved, lies in `folder` (resolved too)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _ref_snapshot(repo_dir: Path, snapshots: Path, revision: str) -> Path | None:
    """The snapshot folder `refs/<revision>` names, if it names one inside `snapshots`; never a path outside it.

    huggingface-hub writes a commit hash there. Anything else ('../../..', a path, bytes that
    are not text) is ignored, so a tampered cache cannot point specdec at files elsewhere.
    """
    ref = repo_dir / "refs" / revision
    try:
        commit = ref.read_text(encoding="ascii").strip() if ref.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return None
    if not REF_RE.fullmatch(commit):
        return None
    pinned = snapshots / commit
    return pinned if _inside(pinned, snapshots) and pinned.is_dir() else None


def cached_model(
    repo: str, pattern: str, *, cache_dir: str | os.PathLike[str] | None = None, revision: str = "main"
) -> LocalModel | None:
    """The model `pattern` picks among the files already in the cache, or None. Never uses the network.

    Only complete files count: huggingface-hub links a file into a snapshot after its
    download has finished. A split model with a part missing is not "cached".
    """
    check_repo(repo)
    repo_dir = hub_cache_dir(cache_dir) / ("models--" + repo.replace("/", "--"))
    for snapshot in _snapshots(repo_dir, revision):
        names = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.suffix.lower() == ".gguf" and p.is_file()]
        picked = picked_models(group_models(names), pattern)
        if not picked:
            continue
        if len(picked) > 1:  # the same pattern would pick several on the Hub too: say so now
            raise ambiguous(repo, pattern, picked, f" (in the cache, {snapshot})")
        try:
            chosen = select_model(repo, pattern, {name: (snapshot / name).stat().st_size for name in names})
        except ModelNotFound:
            continue  # an incomplete split here: look elsewhere, or pull
        path = snapshot / chosen.files[0]
        return LocalModel(repo=repo, files=chosen.files, path=path, size=chosen.size or 0)
    return None


# -- the Hub (network) ------------------------------------------------------------------


def list_files(repo: str, *, endpoint: str | None = None, token: str | bool | None = None, revision: str | None = None) -> dict[str, int | None]:
    """Every file in a repository (recursively) with its size, from the Hub's tree listing."""
    check_repo(repo)
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=endpoint, token=token)
    with hub_errors(repo):
        entries = api.list_repo_tree(repo, recursive=True, revision=revision)
        return {e.path: e.size for e in entries if isinstance(e, RepoFile)}


def remote_model(repo: str, pattern: str, *, endpoint: str | None = None, token: str | bool | None = None) -> RemoteModel:
    """What `pattern` picks in the repository as it is on the Hub now (one listing call)."""
    return select_model(repo, pattern, list_files(repo, endpoint=endpoint, token=token))


def pull(
    repo: str,
    pattern: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    notify: Callable[[str], None] | None = None,
) -> LocalModel:
    """Download the model `pattern` picks (every part of a split) into the hub cache.

    Files already in the cache are not fetched again. With HF_HUB_OFFLINE set, only the
    cache is consulted and a model that is not there is an error that says so.
    """
    check_repo(repo)
    if offline():
        found = cached_model(repo, pattern, cache_dir=cache_dir)
        if found is None:
            raise ModelNotFound(
                f"HF_HUB_OFFLINE is set and no file of {repo} matching {pattern!r} is in the cache "
                f"({hub_cache_dir(cache_dir)}); unset HF_HUB_OFFLINE to download it"
            )
        return found
    from huggingface_hub import hf_hub_download

    chosen = remote_model(repo, pattern, endpoint=endpoint, token=token)
    if notify:
        size = f" ({human_size(chosen.size)})" if chosen.size else ""
        what = chosen.files[0] if len(chosen.files) == 1 else f"{chosen.files[0]} and {len(chosen.files) - 1} more parts"
        notify(f"{repo}: {what}{size}")
    paths = []
    for name in chosen.files:
        with hub_errors(repo, name):
            paths.append(
                Path(hf_hub_download(repo, name, cache_dir=cache_dir, endpoint=endpoint, token=token))
            )
    return LocalModel(repo=repo, files=chosen.files, path=paths[0], size=sum(p.stat().st_size for p in paths))


def route_hub_log() -> None:
    """Send huggingface-hub's log through specdec's logging, and show it only at INFO (SPECDEC_LLAMA_LOG=1).

    huggingface-hub gives its logger a stderr handler of its own, so each of its warnings
    came out twice, once plain and once through cli.app.main's handler ("specdec: ..."): with the
    endpoint down, 22 lines of "Connection refused" and "Retrying in 1s [Retry 1/5]" before
    the one line that says what failed. Its handler goes; its records reach ours only when
    specdec logs at INFO. What ends a call is an exception, which hub_errors turns into one line.
    """
    hub_log = logging.getLogger("huggingface_hub")
    for handler in list(hub_log.handlers):
        if type(handler) is logging.StreamHandler:  # the one it adds; a user's file handler stays
            hub_log.removeHandler(handler)
    hub_log.setLevel(logging.WARNING if log.isEnabledFor(logging.INFO) else logging.CRITICAL)


@contextlib.contextmanager
def hub_errors(repo: str, filename: str | None = None) -> Iterator[None]:
    """Around every Hub call: its log routed (route_hub_log), its failures turned into specdec errors that say what to do."""
    from huggingface_hub import errors as hub

    route_hub_log()
    where = f"{repo}/{filename}" if filename else repo
    try:
        yield
    except hub.GatedRepoError as exc:  # before RepositoryNotFoundError, its base class
        raise DownloadError(
            f"{repo} is gated: accept its licence at https://huggingface.co/{repo} "
            "and set HF_TOKEN to a token of that account"
        ) from exc
    except hub.RepositoryNotFoundError as exc:
        raise ModelNotFound(f"Hugging Face repository {repo} not found (if it is private, set HF_TOKEN)") from exc
    except hub.LocalEntryNotFoundError as exc:  # the Hub could not be asked, and there is no cached copy
        raise DownloadError(
            f"cannot reach the Hub for {where} ({first_line(exc.__cause__ or exc)}); check the network "
            "(or HF_ENDPOINT), then run the same command again: finished files are kept"
        ) from exc
    except (hub.RevisionNotFoundError, hub.RemoteEntryNotFoundError) as exc:
        raise ModelNotFound(f"{where} not found on the Hub: {first_line(exc)}") from exc
    except hub.OfflineModeIsEnabled as exc:
        raise DownloadError(f"HF_HUB_OFFLINE is set, so {where} cannot be downloaded; unset it or pull the model first") from exc
    except Exception as exc:
        if isinstance(exc, hub.HfHubHTTPError) or type(exc).__module__.startswith(("httpx", "httpcore")):
            raise DownloadError(
                f"downloading {where} failed: {first_line(exc)}; check the network (or HF_ENDPOINT), "
                "then run the same command again: finished files are kept"
            ) from exc
        if isinstance(exc, OSError):  # disk full, permissions, a consistency check on the bytes
            raise DownloadError(f"downloading {where} failed: {first_line(exc)}; finished files are kept") from exc
        raise


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
