"""What `-k auto` learnt about a pair on this machine, kept from one `specdec run` to the next.

Each `specdec run` is a fresh process, and `-k auto` would learn the costs and the acceptance
from nothing every time. The record keeps them per pair and machine, in one small file in
specdec's cache folder:

  - the cost curve the policy held at the call's end: T_batch(1..), the draft step and what a
    batch size's first pass costs beyond its later ones (over RPC), seconds;
  - what each proposer earned: acceptance by draft position, per proposer name ("model",
    "lookup:2", ...), and its draft step in units of T_batch(1) (events.Earned, as the drafting
    memory keeps it);
  - the identity it holds for: both model files (path, size, modification time), the machine
    (CPU, cores) and the settings that move the costs (threads, GPU layers, RPC endpoints).

A call starts its policy from the record (the costs seed its estimates, `Policy.resume` its
acceptance, which weighs a draft model's record as a few trials that the call's own rounds soon
outweigh: carried.py) and writes back what it learnt. The record decides only k and the
proposer, never what is sampled: the accept/reject rule is the same, so greedy output stays the
target's own and the law stays exact (tests/core/test_tuning_record.py checks both).

The file is named by a hash of the identity, so another pair, machine or setting reads another
file, and a changed model (its size or time) starts afresh. It is written atomically under a
lock (atomic.py), so processes may share it; one that is truncated, foreign or malformed is
refused in one line and rebuilt by the next save. `--no-tuning-cache` or
SPECDEC_NO_TUNING_CACHE=1 turns it off; `specdec doctor` shows what is kept.

    identity = Identity.of(draft, target, threads=2, gpu_layers=0, draft_gpu_layers=0)
    record, note = load_record(folder, identity)   # TuningRecord() the first time; note: a refused file's line
    ...                                            # the call: draft_policy(AUTO, costs=record.costs), earned=record.earned
    save_record(folder, identity, TuningRecord(costs, earned, record.calls + 1))

Left out: what the policy does with it (adaptive.py, carried.py), where the folder is
(models/cache.cache_dir), when a call reads and writes it (cli/run.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..atomic import locked, replace_atomically
from ..drafting.memory import BadCache, earned_json, read_earned
from ..events import Earned
from .cost_curve import CostCurve

FORMAT = "specdec-tuning"
VERSION = 1
MAX_BYTES = 1 << 20  # far above any record (a few dozen proposers, 17 costs): never parse a huge file
MAX_COSTS = 64  # batch sizes a curve may hold
DISABLE_VARIABLE = "SPECDEC_NO_TUNING_CACHE"


def enabled(option_off: bool = False) -> bool:
    """Whether calls keep a record: not with --no-tuning-cache, nor with SPECDEC_NO_TUNING_CACHE set (other than 0)."""
    return not option_off and os.environ.get(DISABLE_VARIABLE, "") in ("", "0")


def _file(path: Path) -> dict | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform's: 'AMD EPYC 9R45 ...'."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Identity:
    """What a record holds for: the model files, the machine and the settings that move costs."""

    fields: tuple[tuple[str, str], ...]  # sorted (key, JSON value) pairs

    @classmethod
    def of(
        cls, draft: Path | None, target: Path, *, threads: int | None, gpu_layers: int | None, draft_gpu_layers: int | None,
        rpc: tuple[str, ...] = (), draft_rpc: tuple[str, ...] = (),
    ) -> "Identity":  # fmt: skip
        values = {
            "target": _file(target), "draft": None if draft is None else _file(draft),
            "cpu": cpu_name(), "cores": os.cpu_count(), "threads": threads,
            "gpu_layers": gpu_layers, "draft_gpu_layers": draft_gpu_layers, "rpc": list(rpc), "draft_rpc": list(draft_rpc),
        }  # fmt: skip
        return cls.from_json(values)

    @classmethod
    def from_json(cls, values: Mapping[str, object]) -> "Identity":
        """The identity a record's file holds (`to_json` gives it back)."""
        return cls(tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in values.items())))

    def to_json(self) -> dict:
        return {k: json.loads(v) for k, v in self.fields}

    @property
    def key(self) -> str:
        """16 hex digits naming the record's file."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class TuningRecord:
    """The costs (None before a call timed them), each proposer's record, and how many calls wrote it."""

    costs: CostCurve | None = None
    earned: dict[str, Earned] = field(default_factory=dict)
    calls: int = 0


def record_path(folder: Path, identity: Identity) -> Path:
    return folder / f"tuning-{identity.key}.json"


def load_record(folder: Path, identity: Identity) -> tuple[TuningRecord, str | None]:
    """The record kept for `identity` (empty the first time), and the one line to show where the
    file could not be trusted (it is then ignored, and rebuilt by the next save)."""
    path = record_path(folder, identity)
    try:
        return _read(path, identity), None
    except BadCache as exc:
        return TuningRecord(), f"{exc}; starting afresh"


def save_record(folder: Path, identity: Identity, record: TuningRecord) -> None:
    """Replace the identity's file with `record`, atomically, under the file's lock."""
    folder.mkdir(parents=True, exist_ok=True)
    path = record_path(folder, identity)
    data = {"format": FORMAT, "version": VERSION, "identity": identity.to_json(), "calls": record.calls,
            "earned": {name: earned_json(e) for name, e in record.earned.items()}}  # fmt: skip
    if record.costs is not None:
        data["costs"] = {"draft_step": record.costs.draft_step, "target_batch": list(record.costs.target_batch), "first_pass": record.costs.first_pass}
    with locked(path):
        replace_atomically(path, json.dumps(data, separators=(",", ":")))


def _read(path: Path, identity: Identity) -> TuningRecord:
    name = f"tuning record {path}"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return TuningRecord()
    except OSError as exc:
        raise BadCache(f"{name} cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    if len(raw) > MAX_BYTES:
        raise BadCache(f"{name} is {len(raw)} bytes, too large to be one")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadCache(f"{name} is not valid JSON (truncated?)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadCache(f"{name} is not a specdec tuning record")
    if data.get("version") != VERSION:
        raise BadCache(f"{name} is of version {data.get('version')!r}, not {VERSION}")
    if data.get("identity") != identity.to_json():
        raise BadCache(f"{name} was written for other models, another machine or other settings")
    calls = data.get("calls")
    if type(calls) is not int or calls < 0:
        raise BadCache(f"{name} holds a malformed call count")
    return TuningRecord(_costs(data.get("costs"), name), read_earned(data.get("earned"), name), calls)


def _costs(data, name: str) -> CostCurve | None:
    if data is None:
        return None

    def seconds(x) -> bool:
        return type(x) in (int, float) and math.isfinite(x) and 0.0 < x < 3600.0

    batch = data.get("target_batch") if isinstance(data, dict) else None
    step = data.get("draft_step") if isinstance(data, dict) else None
    first = data.get("first_pass") if isinstance(data, dict) else None  # may be negative: a first pass that measured cheaper
    if not (isinstance(batch, list) and 0 < len(batch) <= MAX_COSTS and all(seconds(x) for x in batch) and (step is None or seconds(step))
            and (first is None or (type(first) in (int, float) and math.isfinite(first) and abs(first) < 3600.0))):  # fmt: skip
        raise BadCache(f"{name} holds a malformed cost curve")
    return CostCurve(draft_step=step, target_batch=tuple(float(x) for x in batch), first_pass=None if first is None else float(first))


def kept(folder: Path, limit: int = 100) -> list[dict]:
    """What doctor shows: each record in `folder` (at most `limit`), its identity and `describe`'s
    figures, or the one line saying why it cannot be read."""
    out = []
    for path in sorted(folder.glob("tuning-*.json"))[:limit]:
        try:
            data = json.loads(path.read_bytes()[:MAX_BYTES].decode("utf-8"))
            identity = Identity.from_json(data["identity"])
            out.append({"file": str(path), "identity": data["identity"], **describe(_read(path, identity))})
        except (OSError, ValueError, KeyError, TypeError, AttributeError, BadCache) as exc:
            out.append({"file": str(path), "error": str(exc) or type(exc).__name__})
    return out


def describe(record: TuningRecord) -> Mapping[str, object]:
    """What doctor shows of a record: calls, T_batch(1), the draft step and a first pass's extra cost in ms, each proposer's acceptance at position 1."""
    shown: dict[str, object] = {"calls": record.calls}
    if record.costs is not None:
        shown["target_step_ms"] = round(record.costs.target_batch[0] * 1e3, 2)
        if record.costs.draft_step is not None:
            shown["draft_step_ms"] = round(record.costs.draft_step * 1e3, 2)
        if record.costs.first_pass is not None:
            shown["first_pass_ms"] = round(record.costs.first_pass * 1e3, 2)
    shown["acceptance_at_1"] = {n: round(e.hits[0] / e.trials[0], 3) for n, e in sorted(record.earned.items()) if e.trials and e.trials[0] > 0}
    return shown
