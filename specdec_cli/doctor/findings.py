"""`specdec doctor`'s findings: the llama.cpp build, the paths specdec uses, and a probe of each model.

Each model is loaded and decodes a few tokens in a child process (doctor/probe.py), once with
repacking and once without, so a native crash becomes a finding instead of the end:

    report = examine([("draft", Path("tiny.gguf"))], timeout=120)
    report["models"][0]["probes"]
    -> [{"repack": True, "outcome": "crashed", "signal": 11, "detail": "signal 11 (SIGSEGV)", ...},
        {"repack": False, "outcome": "ok", "detail": "4 tokens in 0.4 s", ...}]

`report["ok"]` is True when every model decodes with the repack setting specdec uses by
default (what `run` and `bench` will do); a crash with the other setting is reported but
does not fail the doctor, since the default already avoids it (that is the AMX case).

Left out: printing (cli/doctor.py), loading in this process (only the build facts, which
cannot crash, come from the llama.cpp loaded here).
"""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

PACKAGE_ROOT = Path(__file__).resolve().parents[2]

ProbeCommand = Callable[[Path, bool, int], Sequence[str]]


@dataclass(frozen=True)
class Probe:
    """How one child process that loaded a model and decoded a few tokens ended."""

    repack: bool
    default: bool  # the setting specdec uses unless told otherwise
    outcome: str  # "ok", "crashed", "failed" or "timed out"
    detail: str
    signal: int | None = None
    exit_code: int | None = None
    desc: str | None = None
    offloaded: int | None = None  # layers on the GPU, of `layers` (llama.cpp counts the output layer)
    layers: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def probe_command(path: Path, repack: bool, tokens: int, rpc: Sequence[str] = ()) -> list[str]:
    where = ["--rpc", ",".join(rpc)] if rpc else []
    return [sys.executable, "-m", "specdec_cli.doctor.probe", str(path), "--repack" if repack else "--no-repack", "--tokens", str(tokens), *where]


def run_probe(command: Sequence[str], repack: bool, default: bool, timeout: float) -> Probe:
    """Run one probe child and classify its end: a JSON line and exit 0, a signal, an error, a timeout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Probe(repack, default, "timed out", f"no answer within {timeout:g} s")
    if done.returncode < 0:
        number = -done.returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        return Probe(repack, default, "crashed", f"signal {number} ({name})", signal=number)
    result = _last_json(done.stdout)
    if done.returncode == 0 and result.get("ok"):
        offloaded, layers = result.get("offloaded"), result.get("layers")
        device = "on the RPC servers" if result.get("rpc") else "on the GPU"
        where = f", {offloaded}/{layers} layers {device}" if offloaded else ""
        return Probe(repack, default, "ok", f"{result['tokens']} tokens in {result['seconds']:.1f} s{where}", exit_code=0,
                     desc=result.get("desc"), offloaded=offloaded, layers=layers)
    reason = result.get("error") or _last_line(done.stderr) or "no output"
    return Probe(repack, default, "failed", f"exit {done.returncode}: {reason}", exit_code=done.returncode)


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


_SECTION = re.compile(r"(?:^|\|)\s*([A-Za-z][\w ]*?)\s+:\s")
_FLAG = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*=\s*1\b")


def parse_system_info(info: str) -> dict:
    """Backends and CPU features from llama.cpp's system info.

    Example: "CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 0 | REPACK = 1 | CUDA : ARCHS = 890 |"
    -> {"backends": ["CPU", "CUDA"], "cpu_features": ["SSE3", "AVX2", "REPACK"]}
    """
    backends = _SECTION.findall(info)
    cpu = info.split("CPU :", 1)[1] if "CPU :" in info else ""
    for other in backends:
        if other != "CPU" and f"{other} :" in cpu:
            cpu = cpu.split(f"{other} :", 1)[0]
    return {"backends": backends, "cpu_features": _FLAG.findall(cpu)}


def backends_of(reported: Sequence[str], devices: Sequence) -> list[str]:
    """The backends in the system info, then those only a device names (a Vulkan build's system
    info lists the CPU's features alone). Example: (["CPU"], [CPU, Vulkan0]) -> ["CPU", "Vulkan"]."""
    found = list(reported)
    for device in devices:
        name = device.name.rstrip("0123456789")
        if name and name not in found:
            found.append(name)
    return found


def build_facts() -> dict:
    """What the llama.cpp loaded here was built with. Imports llama_cpp (through llama/platform.py)."""
    from ..llama import platform as llama

    info = llama.system_info()
    parsed = parse_system_info(info)
    devices = llama.devices()
    return {
        "llama_cpp_python": llama.llama_cpp_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "system_info": info.strip(),
        "backends": backends_of(parsed["backends"], devices),
        "gpu_offload": llama.gpu_offload_supported(),
        "rpc": llama.rpc_supported(),
        "devices": [asdict(device) for device in devices],
        "cpu_features": parsed["cpu_features"],
        "amx": llama.has_amx(info),
        "repack_default": llama.repack_default(info),
        "repack_choosable": llama.can_choose_repack(),
    }


def paths() -> dict:
    from ..models.cache import cache_dir
    from ..models.catalogue import user_catalogue_path
    from ..models.download import hub_cache_dir

    user_error = None
    try:
        user = user_catalogue_path()
    except Exception as exc:  # a broken SPECDEC_MODELS is a finding here, not a reason to stop
        user, user_error = None, str(exc)
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "specdec" / "models.toml"
    return {
        "cache": str(cache_dir()),
        "models_toml_shipped": str(PACKAGE_ROOT / "specdec_cli" / "models" / "models.toml"),
        "models_toml_user": str(user) if user else None,
        "models_toml_user_default": str(config),
        "models_toml_user_error": user_error,
        "specdec_models_env": os.environ.get("SPECDEC_MODELS"),
        "hf_cache": str(hub_cache_dir()),
    }


def examine(
    models: Sequence[tuple[str, Path]],
    *,
    timeout: float = 120,
    tokens: int = 4,
    facts: dict | None = None,
    command: ProbeCommand | None = None,  # default: probe_command (tests give a child that crashes)
    progress: Callable[[str], None] = lambda message: None,
    rpc: dict[str, tuple[str, ...]] | None = None,  # role -> the RPC servers its layers go to (--rpc, --draft-rpc)
) -> dict:
    """The whole report: build facts, paths, each RPC endpoint, and both probes of every model
    (through its RPC servers, when it has some); "ok" as the module says, and every endpoint answering."""
    facts = facts if facts is not None else build_facts()
    command = command or probe_command
    default = facts["repack_default"]
    rpc = rpc or {}
    endpoints = [rpc_endpoint(e) for e in dict.fromkeys(e for servers in rpc.values() for e in servers)]
    found = []
    for role, path in models:
        probes = []
        servers = rpc.get(role, ())
        for repack in (True, False):
            through = f" through {', '.join(servers)}" if servers else ""
            progress(f"decoding {path.name} {'with' if repack else 'without'} repacking{through} in a child process ...")
            argv = command(path, repack, tokens, servers) if servers else command(path, repack, tokens)
            probes.append(run_probe(argv, repack, repack == default, timeout))
        found.append({"role": role, "path": str(path), "rpc": list(servers), "probes": [asdict(p) for p in probes]})
    ok = all(p["outcome"] == "ok" for m in found for p in m["probes"] if p["default"]) and all(e["ok"] for e in endpoints)
    return {"ok": ok, "llama_cpp": facts, "paths": paths(), "rpc": endpoints, "models": found, "tuning": tuning_records()}


def tuning_records() -> list[dict]:
    """What `-k auto` keeps between calls in the cache folder (tuning/record.py): each record's pair,
    machine and settings, its calls, costs and acceptance at the first position; [] without a cache folder."""
    from ..models.cache import cache_dir
    from ..tuning.record import kept

    try:
        return kept(cache_dir() / "tuning")
    except Exception:  # a cache folder that cannot be one is reported under paths
        return []


def rpc_endpoint(endpoint: str) -> dict:
    """One RPC endpoint as found (llama/rpc.probe, in Python: it cannot crash this process).
    Example: {"endpoint": "10.0.0.2:50052", "ok": True, "version": "7.0.0", "devices": [{"free_mib": 7934, "total_mib": 8192}], "error": None}."""
    from ..llama import rpc

    try:
        server = rpc.probe(endpoint)
    except rpc.RpcError as exc:
        return {"endpoint": endpoint, "ok": False, "version": None, "devices": [], "error": str(exc)}
    devices = [{"free_mib": free >> 20, "total_mib": total >> 20} for free, total in server.devices]
    return {"endpoint": endpoint, "ok": True, "version": ".".join(map(str, server.version)), "devices": devices, "error": None}
