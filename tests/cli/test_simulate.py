"""`specdec simulate`: the i.i.d. acceptance model, its printout, and the command. No models.

Statistical tests use fixed seeds; each states its sample size and false-failure rate.
"""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from specdec_cli.cli.app import app
from specdec_cli.cli.simulate import SimRound, cells, play, simulate
from specdec_cli.tuning.speedup import expected_tokens_per_round

ANSI = re.compile(r"\x1b\[[0-9;]*m")
runner = CliRunner()


def test_accepted_counts_follow_the_truncated_geometric_law():
    # P(n = i) = alpha^i (1 - alpha) for i < k, P(n = k) = alpha^k. Chi-square goodness of fit
    # on 20,000 rounds; p < 1e-4 fails, so a correct simulator fails once in 10,000 seeds.
    alpha, k, n = 0.7, 4, 20_000
    counts = np.bincount([r.accepted for r in simulate(alpha, k, n, np.random.default_rng(1))], minlength=k + 1)
    law = np.array([alpha**i * (1 - alpha) for i in range(k)] + [alpha**k])
    assert law.sum() == pytest.approx(1.0)
    assert sps.chisquare(counts, law * n).pvalue > 1e-4


def test_mean_tokens_per_round_matches_the_expected_value():
    # Mean of 20,000 rounds against E = (1 - a^(k+1)) / (1 - a): within 4.4 standard errors
    # (two-sided false-failure rate about 1e-5 under the normal approximation).
    alpha, k, n = 0.8, 6, 20_000
    tokens = np.array([r.tokens for r in simulate(alpha, k, n, np.random.default_rng(2))])
    expected = expected_tokens_per_round(alpha, k)
    assert abs(tokens.mean() - expected) < 4.4 * tokens.std(ddof=1) / np.sqrt(n)


def test_extreme_rates():
    rng = np.random.default_rng(0)
    assert all(r.accepted == 5 and r.bonus and r.tokens == 6 for r in simulate(1.0, 5, 50, rng))
    assert all(r.accepted == 0 and not r.bonus and r.tokens == 1 for r in simulate(0.0, 5, 50, rng))


def test_cells_show_kept_rejected_unchecked_and_the_target_token():
    assert cells(SimRound(k=4, accepted=2), color=False) == "■ ■ ✗ · → ■"
    assert cells(SimRound(k=3, accepted=3), color=False) == "■ ■ ■ → ■"
    coloured = cells(SimRound(k=2, accepted=0), color=True)
    assert "\x1b[2;9m✗" in coloured and "\x1b[33m■" in coloured  # struck rejection, yellow correction
    assert "\x1b[36m■" in cells(SimRound(k=2, accepted=2), color=True)  # cyan bonus


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("round")]


def test_play_prints_running_totals_that_add_up():
    out = io.StringIO()
    tally = play(0.6, 3, 25, seed=9, out=out)
    rounds = list(simulate(0.6, 3, 25, np.random.default_rng(9)))
    text = out.getvalue()
    assert len(lines_of(text)) == 25
    assert tally.steps == 25 and tally.tokens == sum(r.tokens for r in rounds)
    last = lines_of(text)[-1]
    assert "steps 25" in last and f"tokens {tally.tokens}" in re.sub(r" +", " ", last)
    expected = f"{expected_tokens_per_round(0.6, 3):.2f}"
    assert f"(expected {expected})" in last
    assert f"{tally.tokens_per_step:.2f} tokens per step (expected {expected})" in text
    assert "\x1b" not in text and "\r" not in text


def test_animation_redraws_each_round_in_place():
    out = io.StringIO()
    play(0.7, 4, 2, seed=1, out=out, color=True, animate=True, delay=0)
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 2  # one verdict redraw per round
    assert "□" in text


def test_command_is_reproducible_and_plain_when_piped():
    args = ["simulate", "--accept-rate", "0.7", "--draft-tokens", "4", "--rounds", "8", "--seed", "5"]
    a, b = runner.invoke(app, args), runner.invoke(app, args)
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert "\x1b" not in a.stdout and "\r" not in a.stdout  # not a terminal: no colour, no animation
    assert len(lines_of(a.stdout)) == 8
    assert f"{expected_tokens_per_round(0.7, 4):.2f}" in a.stdout
    assert "seed 5" in a.stdout


def test_command_forced_colour():
    result = runner.invoke(app, ["simulate", "--rounds", "30", "--seed", "2", "--color", "always"])
    assert result.exit_code == 0
    assert "\x1b[32m■" in result.stdout and "\x1b[2;9m✗" in result.stdout
    assert "\r" not in result.stdout  # coloured, but still not animated into a pipe
    plain = runner.invoke(app, ["simulate", "--rounds", "30", "--seed", "2", "--color", "never"])
    assert lines_of(ANSI.sub("", result.stdout)) == lines_of(plain.stdout)  # the same rounds, only painted


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--accept-rate", "1.5"], "--accept-rate must be between 0 and 1, got 1.5"),
        (["--accept-rate", "-0.1"], "--accept-rate must be between 0 and 1, got -0.1"),
        (["--draft-tokens", "0"], "--draft-tokens must be between 1 and 64, got 0"),
        (["--rounds", "0"], "--rounds must be between 1 and 1000000, got 0"),
        (["--delay", "-1"], "--delay must be 0 or more seconds, got -1.0"),
    ],
)
def test_bad_arguments_exit_2(args, needle):
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == f"specdec: error: {needle}"


def run_on_a_terminal(*args: str, no_color: bool) -> str:
    """Run `specdec` with stdout on a pseudo-terminal (as in an interactive shell); return what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env["TERM"] = "xterm"
    if no_color:
        env["NO_COLOR"] = "1"
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "specdec_cli.cli", *args], stdout=slave, stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_unless_no_color():
    args = ("simulate", "--rounds", "3", "--seed", "4", "--delay", "0")  # no delay: colour without animation
    assert "\x1b[32m" in run_on_a_terminal(*args, no_color=False)
    assert "\x1b[" not in run_on_a_terminal(*args, no_color=True)


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_out_of_range_is_one_line_naming_seed_and_exit_2(seed):
    """Issue 24: `specdec simulate --seed=-1` printed numpy's traceback; now run's check and message."""
    result = runner.invoke(app, ["simulate", f"--seed={seed}", "--rounds", "2"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line == f"specdec: error: --seed must be between 0 and {2**64 - 1}, got {seed}"
