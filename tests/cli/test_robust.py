"""Issue 9's crash and runtime half, without a model: limits of the C types, seeds, the repack
decision, the KV-cache estimate, stale partial files, Ctrl-C inside llama.cpp's callbacks, and
`specdec doctor` with probe children that really crash or succeed.

The real-model side (default settings through a subprocess, --ctx 8 -k 16, a crash inside
llama_decode, Ctrl-C during a load) is in test_robust_real.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec_cli.llama import resources

from specdec_cli.doctor import findings as doctor

from specdec_cli.models import cache
from specdec_cli.cli.app import app
from specdec_cli.cli.run import describe_contexts
from specdec_cli.errors import BadInput
from test_cli import ToyPair, one_line

runner = CliRunner()

AMX_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
NO_AMX_INFO = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AMX_INT8 = 0 | REPACK = 1 | "


@pytest.fixture
def toy(tmp_path, monkeypatch) -> ToyPair:
    return ToyPair(tmp_path, monkeypatch)


def no_load(monkeypatch):
    """Make any model load fail the test: these errors must come before one."""
    from specdec_cli import session

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad option was refused")

    monkeypatch.setattr(session, "open_pair", refuse)


# -- options beyond the C types, and seeds -----------------------------------------------------


@pytest.mark.parametrize(
    "args, named",
    [
        (["--ctx", "4294967552"], "--ctx must be at most 4294967295 tokens (what llama.cpp's C type holds), got 4294967552"),
        (["--draft-ctx", str(2**32)], "--draft-ctx must be at most 4294967295 tokens"),
        (["--draft-ctx", "0"], "--draft-ctx must be at least 1 token, got 0"),
        (["--threads", str(2**31)], "--threads must be at most 2147483647 (what llama.cpp's C type holds)"),
        (["--threads", "0"], "--threads must be at least 1, got 0"),
        (["--gpu-layers", str(2**31)], "--gpu-layers must be -1 (all) or between 0 and 2147483647"),
        (["--draft-gpu-layers", "-2"], "--draft-gpu-layers must be -1 (all)"),
        (["--seed", "-1"], "--seed must be between 0 and 184467440737095516"),  # bench: minus its repeats
        (["--seed", str(2**64)], "--seed must be between 0 and 184467440737095516"),
    ],
)
@pytest.mark.parametrize("command", ["run", "bench"])
def test_values_the_c_types_cannot_hold_exit_2_before_any_model_loads(command, args, named, tmp_path, monkeypatch):
    no_load(monkeypatch)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(28))
    extra = ["hello"] if command == "run" else []
    result = runner.invoke(app, [command, "--draft", str(model), "--target", str(model), *args, *extra])
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr).startswith("specdec: error: " + named)  # the flag as typed, nothing before it
    assert result.stdout == ""


def test_bench_checks_the_seed_of_its_last_repeat(tmp_path, monkeypatch):
    no_load(monkeypatch)
    result = runner.invoke(app, ["bench", "--seed", str(2**64 - 2), "--repeats", "3"])
    assert result.exit_code == 2 and "--seed must be between 0 and 18446744073709551613" in one_line(result.stderr)


def test_the_largest_seed_runs(toy):
    result = runner.invoke(app, ["run", *toy.args, "--raw", "-k", "3", "-n", "4", "--seed", str(2**64 - 1), "--json", "a"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["seed"] == 2**64 - 1


# -- repacking ---------------------------------------------------------------------------------


def test_repack_default_is_off_exactly_when_llama_cpp_reports_amx():
    from specdec_cli.llama.platform import has_amx, repack_default

    assert has_amx(AMX_INFO) and not repack_default(AMX_INFO)
    assert not has_amx(NO_AMX_INFO) and repack_default(NO_AMX_INFO)
    assert repack_default("")  # an empty report (an old llama.cpp): keep llama.cpp's own default


@pytest.mark.parametrize("flag, expected", [([], None), (["--repack"], True), (["--no-repack"], False)])
def test_repack_flag_reaches_the_load_options(toy, flag, expected):
    result = runner.invoke(app, ["run", *toy.args, "--raw", "-k", "3", "-n", "2", *flag, "a"])
    assert result.exit_code == 0, result.stderr
    assert toy.opened_with.repack is expected


def test_the_auto_choice_on_amx_is_said_once_at_info_level(monkeypatch, caplog):
    from specdec_cli.llama import platform

    platform.auto_repack.cache_clear()
    monkeypatch.setattr(platform, "system_info", lambda: AMX_INFO)
    try:
        with caplog.at_level("INFO", logger="specdec"):
            assert platform.resolve_repack(None) is False
            assert platform.resolve_repack(None) is False
            assert platform.resolve_repack(True) is True
        said = [r for r in caplog.records if "AMX" in r.getMessage()]
        assert len(said) == 1 and said[0].levelname == "INFO"
    finally:
        platform.auto_repack.cache_clear()


# -- the context: memory, padding --------------------------------------------------------------


def test_kv_cache_refused_with_the_number_and_what_fits():
    per_token = resources.kv_bytes_per_token(n_layer=30, n_head_kv=3, head_k=64, head_v=64)
    assert per_token == 30 * 3 * 128 * 2
    with pytest.raises(BadInput) as refused:
        resources.check_kv_fits("smol.gguf", 10**9, per_token, 8 * 2**30)
    message = str(refused.value)
    assert "a context of 1000000000 tokens for smol.gguf needs a 23040.00 GB KV cache" in message
    assert "at most 372736 tokens fit" in message and "SPECDEC_NO_MEMORY_CHECK=1" in message
    resources.check_kv_fits("smol.gguf", 372736, per_token, 8 * 2**30)  # exactly what it said fits
    resources.check_kv_fits("smol.gguf", 10**9, per_token, None)  # unknown memory: no refusal


def test_available_memory_reads_meminfo_and_the_cgroup_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n")
    assert resources.available_memory(str(meminfo), str(tmp_path / "none")) == 20000000 * 1024
    (tmp_path / "memory.max").write_text("1073741824\n")
    (tmp_path / "memory.current").write_text("73741824\n")
    assert resources.available_memory(str(meminfo), str(tmp_path)) == 10**9
    (tmp_path / "memory.max").write_text("max\n")
    assert resources.available_memory(str(meminfo), str(tmp_path)) == 20000000 * 1024


def test_the_context_llama_cpp_allocated_is_reported():
    assert describe_contexts({"ctx": 256, "ctx_requested": 64, "draft_ctx": 256}, 64) == "256 tokens (asked for 64; llama.cpp pads), draft 256"
    assert describe_contexts({"ctx": 2048, "ctx_requested": 2048}, 2048) == "2048 tokens"


def test_run_json_and_table_carry_the_allocated_context(toy):
    result = runner.invoke(app, ["run", *toy.args, "--raw", "-k", "3", "-n", "2", "--ctx", "64", "--json", "a"])
    assert result.exit_code == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    assert (stats["ctx"], stats["ctx_requested"], stats["draft_ctx"]) == (4096, 64, 4096)  # the toy models hold 4096
    assert "4096 tokens (asked for 64; llama.cpp pads)" in result.stderr


# -- interrupted conversions -------------------------------------------------------------------


def test_stale_partial_files_of_dead_writers_are_removed(tmp_path):
    dst = tmp_path / "SmolLM2-135M-Instruct.F32.gguf"
    dead = tmp_path / f".{dst.name}.999999999.partial"
    alive = tmp_path / f".{dst.name}.{os.getpid()}.partial"
    other = tmp_path / ".Other.F32.gguf.999999999.partial"
    for path in (dead, alive, other):
        path.write_bytes(b"half")
    assert cache.remove_stale_partials(dst) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()


def test_a_conversion_starts_by_removing_stale_partials(tmp_path, monkeypatch):
    from specdec_cli.llama import convert

    src = tmp_path / "Model.Q4_1.gguf"
    src.write_bytes(b"GGUF")  # a header llama.cpp cannot read: no size known, no space check
    stale = tmp_path / ".Model.F32.gguf.999999999.partial"
    stale.write_bytes(b"half")
    monkeypatch.setattr(convert, "convert_in_child", lambda s, d, t: Path(d).write_bytes(b"GGUF whole"))
    dst = cache.ensure_converted(src, "F32", directory=tmp_path)
    assert dst.read_bytes() == b"GGUF whole" and not stale.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


class _InterruptingText:
    """Bytes whose decoding is interrupted, as a Ctrl-C lands inside llama.cpp's log callback."""

    def decode(self, *args, **kwargs):
        raise KeyboardInterrupt


def test_a_ctrl_c_inside_the_log_callback_is_kept_and_raised_after_the_call():
    from specdec_cli.llama.log import llama_log

    captured = llama_log()
    captured._on_log(2, _InterruptingText(), None)  # would be printed and dropped by ctypes
    with pytest.raises(KeyboardInterrupt):
        captured.raise_pending()
    captured.raise_pending()  # raised once only


# -- specdec doctor ----------------------------------------------------------------------------

FACTS = {
    "llama_cpp_python": "0.0-test", "python": "3.11", "platform": "test", "system_info": NO_AMX_INFO,
    "backends": ["CPU"], "gpu_offload": False, "cpu_features": ["AVX2"], "amx": False,
    "repack_default": True, "repack_choosable": True,
    "devices": [{"name": "CPU", "description": "Test CPU", "kind": "cpu", "free_mib": 900, "total_mib": 1000}],
}  # fmt: skip

CRASH = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]
SUCCEED = [sys.executable, "-c", "import json; print(json.dumps({'ok': True, 'tokens': 4, 'seconds': 0.1, 'desc': 'fake Q4_1'}))"]


def crash_when_repacking(path, repack, tokens):
    return CRASH if repack else SUCCEED


def test_parse_system_info_finds_backends_and_cpu_features():
    info = "CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 0 | REPACK = 1 | CUDA : ARCHS = 890 | USE_GRAPHS = 1 |"
    assert doctor.parse_system_info(info) == {"backends": ["CPU", "CUDA"], "cpu_features": ["SSE3", "AVX2", "REPACK"]}


def test_a_probe_child_that_really_crashes_is_a_finding(tmp_path):
    report = doctor.examine([("draft", tmp_path / "d.gguf")], facts=FACTS, command=crash_when_repacking, timeout=60)
    with_repack, without = report["models"][0]["probes"]
    assert (with_repack["outcome"], with_repack["signal"], with_repack["detail"]) == ("crashed", 11, "signal 11 (SIGSEGV)")
    assert (without["outcome"], without["detail"], without["desc"]) == ("ok", "4 tokens in 0.1 s", "fake Q4_1")
    assert report["ok"] is False  # the default (repacking, as on a machine without AMX) crashed


def test_the_doctor_is_ok_when_only_the_setting_it_avoids_crashes(tmp_path):
    on_amx = {**FACTS, "amx": True, "repack_default": False}
    report = doctor.examine([("draft", tmp_path / "d.gguf")], facts=on_amx, command=crash_when_repacking, timeout=60)
    assert report["ok"] is True


def test_a_probe_that_fails_or_hangs(tmp_path):
    failing = lambda path, repack, tokens: [sys.executable, "-c", "import sys; print('{\"ok\": false, \"error\": \"not GGUF\"}'); sys.exit(1)"]  # noqa: E731
    hanging = lambda path, repack, tokens: [sys.executable, "-c", "import time; time.sleep(30)"]  # noqa: E731
    failed = doctor.examine([("target", tmp_path / "t.gguf")], facts=FACTS, command=failing)["models"][0]["probes"][0]
    assert (failed["outcome"], failed["detail"]) == ("failed", "exit 1: not GGUF")
    hung = doctor.examine([("target", tmp_path / "t.gguf")], facts=FACTS, command=hanging, timeout=0.5)["models"][0]["probes"][0]
    assert (hung["outcome"], hung["detail"]) == ("timed out", "no answer within 0.5 s")


@pytest.mark.parametrize("command, code", [(crash_when_repacking, 1), (lambda path, repack, tokens: SUCCEED, 0)])
def test_doctor_json_shape_and_exit_code(command, code, tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "probe_command", command)
    monkeypatch.setattr(doctor, "build_facts", lambda: FACTS)
    model = tmp_path / "d.gguf"
    model.write_bytes(b"GGUF" + bytes(28))
    result = runner.invoke(app, ["doctor", "--draft", str(model), "--json"])
    assert result.exit_code == code, result.output
    report = json.loads(result.stdout)
    assert set(report) == {"ok", "llama_cpp", "paths", "rpc", "models", "tuning"}
    assert report["rpc"] == []  # no --rpc: no endpoint examined
    assert report["ok"] is (code == 0)
    assert set(report["llama_cpp"]) == set(FACTS)
    assert {"cache", "models_toml_shipped", "models_toml_user", "hf_cache"} <= set(report["paths"])
    (model_report,) = report["models"]
    assert (model_report["role"], model_report["path"], model_report["rpc"]) == ("draft", str(model), [])
    assert [p["repack"] for p in model_report["probes"]] == [True, False]
    assert set(model_report["probes"][0]) == {"repack", "default", "outcome", "detail", "signal", "exit_code", "desc", "offloaded", "layers"}


def test_doctor_shows_what_auto_keeps_and_a_record_it_cannot_read(tmp_path, monkeypatch):
    """Two records in the cache folder (tuning/record.py), one of them mangled: the text report
    has a line for each, the good one with its pair, calls, costs and acceptance."""
    from specdec_cli.cli.doctor import tuning_text
    from specdec_cli.events import Earned
    from specdec_cli.tuning.cost_curve import CostCurve
    from specdec_cli.tuning.record import Identity, TuningRecord, record_path, save_record

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    draft, target = tmp_path / "tiny.gguf", tmp_path / "big.gguf"
    draft.write_bytes(b"GGUF d")
    target.write_bytes(b"GGUF t")
    folder = tmp_path / "cache" / "tuning"
    good = Identity.of(draft, target, threads=2, gpu_layers=0, draft_gpu_layers=0)
    save_record(folder, good, TuningRecord(CostCurve(0.004, (0.0301, 0.031), first_pass=0.05), {"model": Earned((0.81,), (1.0,), 0.13)}, 12))
    bad = Identity.of(draft, target, threads=4, gpu_layers=0, draft_gpu_layers=0)
    save_record(folder, bad, TuningRecord(None, {}, 1))
    record_path(folder, bad).write_text("{")
    kept = doctor.tuning_records()
    lines = sorted(tuning_text(k) for k in kept)
    assert lines[0] == f"-k auto's record {record_path(folder, bad)}: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    assert lines[1] == f"-k auto's record: big.gguf + tiny.gguf, 2 threads: 12 calls, T_batch(1) 30.1 ms, draft step 4.0 ms, a first pass at a new size +50.0 ms; acceptance at 1: model 0.81 ({record_path(folder, good)})"


def test_doctor_text_names_the_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "probe_command", crash_when_repacking)
    monkeypatch.setattr(doctor, "build_facts", lambda: FACTS)
    model = tmp_path / "d.gguf"
    model.write_bytes(b"GGUF" + bytes(28))
    result = runner.invoke(app, ["doctor", "--draft", str(model)])
    assert result.exit_code == 1
    assert "  with repacking (default): crashed, signal 11 (SIGSEGV)" in result.stdout
    assert "  without repacking: ok, 4 tokens in 0.1 s" in result.stdout
    assert "devices: CPU (cpu: Test CPU, 900 of 1000 MiB free)" in result.stdout


def test_a_probe_on_the_gpu_says_how_many_layers_went_there(tmp_path):
    on_gpu = [sys.executable, "-c", "import json; print(json.dumps({'ok': True, 'tokens': 4, 'seconds': 0.1, 'offloaded': 31, 'layers': 31}))"]
    report = doctor.examine([("draft", tmp_path / "d.gguf")], facts=FACTS, command=lambda path, repack, tokens: on_gpu, timeout=60)
    probe = report["models"][0]["probes"][0]
    assert (probe["detail"], probe["offloaded"], probe["layers"]) == ("4 tokens in 0.1 s, 31/31 layers on the GPU", 31, 31)


def test_the_device_line_of_the_doctor():
    from specdec_cli.cli.doctor import device_text

    vulkan = {"name": "Vulkan0", "description": "llvmpipe", "kind": "gpu", "free_mib": 7934, "total_mib": 7934}
    assert device_text(vulkan) == "Vulkan0 (gpu: llvmpipe, 7934 of 7934 MiB free)"


def test_backends_named_by_devices_only_are_listed():
    from specdec_cli.llama.platform import Device

    devices = [Device("CPU", "Test CPU", "cpu", 1, 1), Device("Vulkan0", "llvmpipe", "gpu", 1, 1), Device("Vulkan1", "other", "gpu", 1, 1)]
    assert doctor.backends_of(["CPU"], devices) == ["CPU", "Vulkan"]
    assert doctor.backends_of(["CPU", "CUDA"], [Device("CUDA0", "H200", "gpu", 1, 1)]) == ["CPU", "CUDA"]
