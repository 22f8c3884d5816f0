"""llama.cpp's own speculative decoder as a reference: build its command line, run it, read its speed.

`llama-speculative-simple` (llama.cpp, examples/speculative-simple) decodes a prompt with a
target (-m) and a draft (-md) and ends its log with lines such as

    encoded   38 tokens in    0.101 seconds, speed:  376.238 t/s
    decoded  133 tokens in    1.712 seconds, speed:   77.687 t/s

    n_draft   = 8
    n_predict = 133
    n_drafted = 128
    n_accept  = 112
    accept    = 87.500%

`parse_output` reads the "decoded" line (its tokens/s excludes the prompt, like specdec's)
and the counters, from stdout and stderr together (llama.cpp logs INFO to stderr):

    parse_output(text).tokens_per_second   # -> 77.687

Its drafting is llama.cpp's, not specdec's: it may draft fewer than --draft-max tokens when
the draft is unsure (--draft-p-min), and it may decode a few tokens past -n. Pass its own
options through `extra` to change that.

`run_native` sends the binary's output to a log file and stops it (and all it started)
after `timeout` seconds (`--native-timeout`); a run that fails keeps its log and names it:

    --native: llama-speculative-simple exited with code 1 (its last line: error: failed to
    load model); its full log: /tmp/specdec-native-3f9a.log

Left out: the bench that calls it (bench/run.py) and the table it lands in (bench/render.py).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..errors import BadInput, SpecdecError

BINARY_NAME = "llama-speculative-simple"
DEFAULT_NATIVE_TIMEOUT = 600.0  # seconds for one llama-speculative-simple run: load both models, decode -n tokens

_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens\s+in\s+([0-9.]+)\s+seconds,\s+speed:\s+([0-9.]+|inf|nan|-?nan)\s+t/s")
_COUNTER = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(-?\d+)")


@dataclass(frozen=True)
class NativeResult:
    decoded_tokens: int
    seconds: float
    tokens_per_second: float
    n_draft: int | None = None
    n_drafted: int | None = None
    n_accept: int | None = None

    @property
    def acceptance_rate(self) -> float | None:
        if not self.n_drafted or self.n_accept is None:
            return None
        return self.n_accept / self.n_drafted

    def to_dict(self) -> dict:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate}


def find_binary(path: str | os.PathLike[str]) -> Path:
    """The executable at `path`, or found by that name on PATH; BadInput if there is none."""
    candidate = Path(path).expanduser()
    if candidate.is_file():
        if not os.access(candidate, os.X_OK):
            raise BadInput(f"--native: {candidate} is not executable; run chmod +x {candidate}")
        return candidate
    found = shutil.which(str(path))
    if found:
        return Path(found)
    raise BadInput(
        f"--native: no executable at {path}; give the path of llama.cpp's {BINARY_NAME} "
        f"(built by cmake --build build --target {BINARY_NAME}, in build/bin/)"
    )


def native_command(
    binary: Path,
    draft: Path,
    target: Path,
    prompt: str,
    *,
    draft_tokens: int,
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int,
    ctx: int,
    threads: int | None = None,
    gpu_layers: int = -1,
    draft_gpu_layers: int = -1,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line that runs llama-speculative-simple with the bench's settings.

    `prompt` is the text exactly as specdec tokenizes it (chat template already applied);
    llama.cpp tokenizes -p with special tokens parsed, so both see the same ids. A negative
    layer count means "all" (llama.cpp spells that as a large number).
    """

    def layers(n: int) -> str:
        return "999" if n < 0 else str(n)

    cmd = [
        str(binary),
        "-m", str(target),
        "-md", str(draft),
        "-p", prompt,
        "-n", str(max_tokens),
        "--spec-type", "draft-simple",  # llama.cpp of llama-cpp-python 0.3.36 drafts nothing without it
        "--spec-draft-n-max", str(draft_tokens),  # was --draft-max, which that llama.cpp refuses
        "--temp", str(temperature),
        "--top-k", str(top_k),
        "--top-p", str(top_p),
        "--min-p", str(min_p),
        "--seed", str(seed),
        "-c", str(ctx),
        "-ngl", layers(gpu_layers),
        "-ngld", layers(draft_gpu_layers),
    ]  # fmt: skip
    if threads:
        cmd += ["-t", str(threads)]
    return cmd + list(extra)


def parse_output(text: str) -> NativeResult:
    """The speed and counters llama-speculative-simple prints at its end; SpecdecError if absent."""
    matches = _DECODED.findall(text)
    if not matches:
        raise SpecdecError(
            f"--native: found no 'decoded N tokens in S seconds, speed: X t/s' line in the output of "
            f"{BINARY_NAME}; its last lines were:\n{_tail(text)}"
        )
    tokens, seconds, speed = matches[-1]
    counters = {name: int(value) for name, value in _COUNTER.findall(text)}
    return NativeResult(
        decoded_tokens=int(tokens),
        seconds=float(seconds),
        tokens_per_second=_float(speed),
        n_draft=counters.get("n_draft"),
        n_drafted=counters.get("n_drafted"),
        n_accept=counters.get("n_accept"),
    )


def run_native(command: Sequence[str], timeout: float = 600.0) -> NativeResult:
    """Run the binary with its output going to a log file, wait at most `timeout` s, and parse the log.

    A run that fails, hangs or prints no speed raises SpecdecError in one line, ending with the
    path of its full log, which is kept; a good run's log is removed. The binary runs in its own
    session, so a timeout or Ctrl-C stops it and every process it started.
    """
    fd, name = tempfile.mkstemp(prefix="specdec-native-", suffix=".log")
    log_path = Path(name)
    with open(fd, "wb") as log:
        try:
            proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            log_path.unlink(missing_ok=True)
            raise BadInput(f"--native: cannot run {command[0]}: {exc.strerror or exc}") from None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise SpecdecError(
                f"--native: {BINARY_NAME} did not finish within {timeout:g} s and was stopped "
                f"(raise --native-timeout if it is only slow); its log: {log_path}"
            ) from None
        except BaseException:  # Ctrl-C: never leave it running
            _stop(proc)
            raise
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise SpecdecError(f"--native: {BINARY_NAME} {how} ({_last_line(text)}); its full log: {log_path}")
    try:
        result = parse_output(text)
    except SpecdecError:
        raise SpecdecError(
            f"--native: found no 'decoded N tokens in S seconds, speed: X t/s' line in the output of {BINARY_NAME} "
            f"({_last_line(text)}); its full log: {log_path}"
        ) from None
    log_path.unlink(missing_ok=True)
    return result


def _stop(proc: subprocess.Popen) -> None:
    """Kill the process and everything in its session, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _last_line(text: str) -> str:
    """The line that says what went wrong: the last one naming an error, else the last one.
    Example: "error while handling argument ...\nto show complete usage, run with -h" -> the first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    if errors:
        return errors[-1]
    return f"its last line: {lines[-1]}" if lines else "it printed nothing"


def _float(text: str) -> float:
    return float("nan") if "nan" in text else float(text)


def _tail(text: str, n: int = 8) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:]) if lines else "(nothing)"
