"""`specdec doctor`: what to run (and paste) before filing a bug.

    specdec doctor                                   # the build, the paths, the built-in pair probed
    specdec doctor --draft d.gguf --target t.gguf    # your models instead
    specdec doctor --json | jq .models               # the same as one JSON object

The report goes to stdout (it is the output); progress notes go to stderr. Exit 0 when every
model decodes with specdec's default repack setting, 1 otherwise (doctor/findings.py says why).

Left out: the findings themselves (doctor/findings.py) and the probe child (doctor/probe.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import BadInput
from .options import DraftOption, DraftRpcOption, PairOption, RpcOption, TargetOption, _err, resolve_paths


def doctor(
    draft: DraftOption = None,
    target: TargetOption = None,
    pair_name: PairOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds each probe child may take to load a model and decode.")] = 120,
    tokens: Annotated[int, typer.Option(help="Tokens each probe decodes.")] = 4,
    rpc: RpcOption = None,
    draft_rpc: DraftRpcOption = None,
) -> None:
    """Report the llama.cpp build and paths, and load and decode each model in a child process.

    Example: specdec doctor --draft tiny.gguf --target big.gguf --json
    """
    from ..doctor.findings import examine

    if not timeout > 0:
        raise BadInput(f"--timeout must be more than 0 seconds, got {timeout}")
    if not 1 <= tokens <= 256:
        raise BadInput(f"--tokens must be between 1 and 256, got {tokens}")
    from ..llama.rpc import parse_endpoints

    servers = {"target": parse_endpoints(rpc) if rpc else (), "draft": parse_endpoints(draft_rpc, "--draft-rpc") if draft_rpc else ()}
    report = examine(models_to_probe(draft, target, pair_name), timeout=timeout, tokens=tokens, progress=lambda m: _err(f"specdec: {m}"), rpc=servers)
    typer.echo(json.dumps(report, indent=2) if json_out else report_text(report))
    if not report["ok"]:
        raise typer.Exit(1)


def models_to_probe(draft: str | None, target: str | None, pair_name: str | None) -> list[tuple[str, Path]]:
    """The models named (only those), or the --pair's, or the built-in pair."""
    if pair_name is None and (draft or target):
        from ..models.registry import model_path, parse_model

        notify = lambda message: _err(f"specdec: {message}")  # noqa: E731
        return [(role, model_path(parse_model(spec), notify)) for role, spec in (("draft", draft), ("target", target)) if spec]
    draft_path, target_path = resolve_paths(draft, target, pair=pair_name)
    return [("draft", draft_path), ("target", target_path)]


def report_text(report: dict) -> str:
    facts, paths = report["llama_cpp"], report["paths"]
    repack = "off (llama.cpp reports AMX; --repack turns it on)" if not facts["repack_default"] else "on (--no-repack turns it off)"
    user = paths["models_toml_user"] or f"none (would be {paths['models_toml_user_default']})"
    if paths["models_toml_user_error"]:
        user = f"unusable: {paths['models_toml_user_error']}"
    lines = [
        f"llama-cpp-python {facts['llama_cpp_python']}, Python {facts['python']}, {facts['platform']}",
        f"llama.cpp system info: {facts['system_info']}",
        f"backends compiled in: {', '.join(facts['backends']) or 'unknown'}; GPU offload: {'yes' if facts['gpu_offload'] else 'no'}; "
        + f"RPC client (--rpc): {'yes' if facts.get('rpc') else 'no (rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=on)'}",
        "devices: " + ("; ".join(device_text(d) for d in facts["devices"]) or "none listed"),
        f"CPU features: {' '.join(facts['cpu_features']) or 'none reported'}",
        f"AMX: {'yes' if facts['amx'] else 'no'}; repacking by default: {repack}"
        + ("" if facts["repack_choosable"] else " (this llama-cpp-python cannot turn it off)"),
        f"cache: {paths['cache']}",
        f"models.toml: shipped {paths['models_toml_shipped']}; user {user}",
        f"Hugging Face cache: {paths['hf_cache']}",
    ]
    for e in report.get("rpc", []):
        if e["ok"]:
            devices = "; ".join(f"device {i}: {d['free_mib']} of {d['total_mib']} MiB free" for i, d in enumerate(e["devices"]))
            lines.append(f"RPC server {e['endpoint']}: protocol {e['version']}, {devices}")
        else:
            lines.append(f"RPC server {e['endpoint']}: {e['error']}")
    lines += [tuning_text(r) for r in report.get("tuning", [])] or ["-k auto's records: none kept yet (each `specdec run -k auto` keeps one per pair, machine and settings)"]
    for model in report["models"]:
        desc = next((p["desc"] for p in model["probes"] if p["desc"]), None)
        through = f" through RPC {', '.join(model['rpc'])}" if model.get("rpc") else ""
        lines.append(f"{model['role']} {model['path']}{through}" + (f" ({desc})" if desc else ""))
        for p in model["probes"]:
            how = "with repacking" if p["repack"] else "without repacking"
            lines.append(f"  {how}{' (default)' if p['default'] else ''}: {p['outcome']}, {p['detail']}")
    lines.append("everything works" if report["ok"] else "a model does not decode with the default settings, or an RPC server does not answer: see above")
    return "\n".join(lines)


def tuning_text(kept: dict) -> str:
    """One record of `-k auto` (tuning/record.kept). Example: "-k auto's record: big.gguf + tiny.gguf,
    2 threads: 12 calls, T_batch(1) 30.1 ms, draft step 4.0 ms, a first pass at a new size +50.0 ms;
    acceptance at 1: model 0.81 (FILE)"."""
    if "error" in kept:
        return f"-k auto's record {kept['file']}: {kept['error']}"
    who = kept["identity"]
    names = " + ".join(Path(who[role]["path"]).name for role in ("target", "draft") if who.get(role))
    figures = [f"{kept['calls']} calls"]
    if "target_step_ms" in kept:
        figures.append(f"T_batch(1) {kept['target_step_ms']} ms")
    if "draft_step_ms" in kept:
        figures.append(f"draft step {kept['draft_step_ms']} ms")
    if "first_pass_ms" in kept:
        figures.append(f"a first pass at a new size {kept['first_pass_ms']:+} ms")
    rates = ", ".join(f"{name} {rate}" for name, rate in kept["acceptance_at_1"].items())
    threads = f"{who['threads']} threads" if who.get("threads") else "default threads"
    return f"-k auto's record: {names}, {threads}: {', '.join(figures)}" + (f"; acceptance at 1: {rates}" if rates else "") + f" ({kept['file']})"


def device_text(device: dict) -> str:
    """Example: {"name": "Vulkan0", "description": "llvmpipe", "kind": "gpu", "free_mib": 7934, "total_mib": 7934}
    -> "Vulkan0 (gpu: llvmpipe, 7934 of 7934 MiB free)"."""
    return f"{device['name']} ({device['kind']}: {device['description']}, {device['free_mib']} of {device['total_mib']} MiB free)"
