"""cli/render.py: the coloured stream, rejected tokens in place, JSONL, the legend, the table, the spinner.

Events are scripted by hand (exact expectations) or come from the engine over the toy
Markov models of tests/fakes.py. No llama.cpp.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
from rich.console import Console

from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.tuning.cost_curve import CostCurve
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.events import Finished, Prefill, Rejected, Round, Source, Token
from specdec_cli.cli.render import (
    SGR,
    SGR_REJECTED,
    Activity,
    InPlace,
    JsonlRenderer,
    TextRenderer,
    color_enabled,
    legend,
    paint,
    stats_table,
)
from specdec_cli.decoding.consume import consume
from specdec_cli.decoding.stats import RunStats, measured_speedup

from fakes import MarkovModel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_color_enabled_follows_mode_terminal_and_no_color():
    tty, pipe = Tty(), io.StringIO()
    assert color_enabled("auto", tty, {}) is True
    assert color_enabled("auto", pipe, {}) is False
    assert color_enabled("auto", tty, {"NO_COLOR": "1"}) is False
    assert color_enabled("auto", tty, {"NO_COLOR": ""}) is True  # no-color.org: only a non-empty value counts
    assert color_enabled("auto", tty, {"TERM": "dumb"}) is False
    assert color_enabled("always", pipe, {"NO_COLOR": "1"}) is True  # an explicit flag beats NO_COLOR
    assert color_enabled("never", tty, {}) is False


def test_paint_wraps_only_when_there_is_colour_code_and_text():
    assert paint("x", "32") == "\x1b[32mx\x1b[0m"
    assert paint("x", "32", color=False) == "x"
    assert paint("x", "") == "x"
    assert paint("", "32") == ""


# One round with a rejection, as the engine emits it: the Rejected event comes before the
# round's accepted drafts; then a round whose drafts are all accepted, ending in a bonus.
ROUNDS = [
    Rejected(9, " dog", 3),
    Token(1, "The", Source.DRAFT, 1),
    Token(2, " cat", Source.DRAFT, 2),
    Token(3, " sat", Source.CORRECTION, 3),
    Token(4, " on", Source.DRAFT, 1),
    Token(5, " the", Source.BONUS, 2),
    Token(6, " mat", Source.TARGET, 1),
]


def render(events, **kwargs) -> str:
    out = io.StringIO()
    renderer = TextRenderer(out, **kwargs)
    for event in events:
        renderer(event)
    renderer.close()
    return out.getvalue()


def test_plain_stream_is_exactly_the_text_and_a_newline():
    assert render(ROUNDS) == "The cat sat on the mat\n"
    # --show-rejected without colour shows nothing extra: piped text stays the text.
    assert render(ROUNDS, show_rejected=True) == "The cat sat on the mat\n"


def test_coloured_stream_paints_each_provenance():
    g, y, c = SGR[Source.DRAFT], SGR[Source.CORRECTION], SGR[Source.BONUS]
    expected = (
        paint("The", g) + paint(" cat", g) + paint(" sat", y) + paint(" on", g) + paint(" the", c) + " mat\n"
    )
    assert render(ROUNDS, color=True) == expected
    assert {g, y, c} == {"32", "33", "36"}  # green, yellow, cyan: three distinct colours
    assert ANSI.sub("", expected) == "The cat sat on the mat\n"


def test_rejected_token_appears_struck_out_just_before_its_correction():
    out = render(ROUNDS, color=True, show_rejected=True)
    assert paint(" cat", SGR[Source.DRAFT]) + paint(" dog", SGR_REJECTED) + paint(" sat", SGR[Source.CORRECTION]) in out
    assert out.count("\x1b[2;9m") == 1


def test_rejected_newline_is_made_visible():
    out = render([Rejected(9, "\n", 1), Token(3, "x", Source.CORRECTION, 1)], color=True, show_rejected=True)
    assert paint("↵", SGR_REJECTED) in out


def test_in_place_holds_rejections_until_their_corrections_even_across_rounds():
    # A stop-string hold-back can release round 1's correction after round 2's Rejected event.
    order = InPlace()
    r1, r2 = Rejected(7, "x", 1), Rejected(8, "y", 2)
    c1, d, c2 = Token(1, "a", Source.CORRECTION, 1), Token(2, "b", Source.DRAFT, 1), Token(3, "c", Source.CORRECTION, 2)
    shown = [e for event in (r1, r2, c1, d, c2) for e in order(event)]
    assert shown == [r1, c1, d, r2, c2]


def test_jsonl_lines_carry_id_text_provenance_and_a_final_stats_object():
    out = io.StringIO()
    renderer = JsonlRenderer(out, show_rejected=True)
    for event in ROUNDS:
        renderer(event)
    renderer.close({"seed": 3, "stats": {"new_tokens": 6}})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    tokens = [line for line in lines if line["type"] == "token"]
    assert [t["provenance"] for t in tokens] == ["draft", "draft", "correction", "draft", "bonus", "target"]
    assert "".join(t["text"] for t in tokens) == "The cat sat on the mat"
    assert all(set(t) == {"type", "id", "text", "provenance", "position"} for t in tokens)
    assert [line["type"] for line in lines].index("rejected") == 2  # just before the correction
    assert lines[-1] == {"type": "stats", "seed": 3, "stats": {"new_tokens": 6}}


def test_jsonl_leaves_rejections_out_unless_asked():
    out = io.StringIO()
    renderer = JsonlRenderer(out)
    for event in ROUNDS:
        renderer(event)
    assert all(json.loads(line)["type"] == "token" for line in out.getvalue().splitlines())


def test_engine_stream_rendered_in_colour_strips_back_to_the_plain_text():
    # A toy pair that disagrees often (random tables, sampling) gives all provenances.
    rng = np.random.default_rng(5)
    target = MarkovModel(rng.standard_normal((26, 26)) * 3)
    draft = MarkovModel(np.asarray(target.table) + rng.standard_normal((26, 26)) * 2)
    engine = Engine(target, ModelDrafter(draft))
    events = list(engine.generate([0, 1], GenerationConfig(max_tokens=60, seed=11), draft_policy(4)))
    finished = events[-1]
    assert isinstance(finished, Finished)
    sources = {e.source for e in events if isinstance(e, Token)}
    assert {Source.DRAFT, Source.CORRECTION} <= sources
    coloured = render(events, color=True, show_rejected=True)
    plain = render(events)
    assert plain == finished.text + "\n"
    without_rejected = re.sub(r"\x1b\[2;9m.*?\x1b\[0m", "", coloured)
    assert ANSI.sub("", without_rejected) == plain
    assert coloured.count("\x1b[2;9m") == sum(isinstance(e, Rejected) for e in events) - (finished.reason == "eog")


def test_legend_names_every_colour_and_uses_the_stream_codes():
    line = legend(True, show_rejected=True)
    for source in (Source.DRAFT, Source.CORRECTION, Source.BONUS):
        assert f"\x1b[{SGR[source]}m" in line
    plain = legend(False, show_rejected=True)
    assert "\x1b" not in plain
    for word in ("green", "yellow", "cyan", "accepted draft", "correction", "bonus", "rejected"):
        assert word in plain
    assert "rejected" not in legend(False, show_rejected=False)


def scripted_stats() -> RunStats:
    return consume(
        (event for event in [
            Prefill(prompt_tokens=12, seconds=0.05),
            *[Token(i, "x", Source.DRAFT, 1) for i in range(7)],
            Round(drafted=4, accepted=4, draft_seconds=0.01, draft_decode_seconds=0.009, target_seconds=0.02, seconds=0.035),
            Round(drafted=4, accepted=1, draft_seconds=0.01, draft_decode_seconds=0.009, target_seconds=0.02, seconds=0.034),
            Finished(reason="max_tokens", tokens=tuple(range(7)), text="x" * 7),
        ])
    ).stats


def table_text(table) -> str:
    console = Console(file=io.StringIO(), width=120, no_color=True, color_system=None)
    console.print(table)
    return console.file.getvalue()


def test_stats_table_shows_the_figures_of_the_run():
    stats = scripted_stats()
    base = RunStats(new_tokens=7, target_passes=7, generation_seconds=0.1)
    costs = CostCurve(draft_step=0.002, target_batch=(0.01, 0.011, 0.012, 0.013, 0.014))
    text = table_text(stats_table(stats, k=4, seed=42, baseline=base, predicted=1.5, costs=costs))
    for needle in (
        f"{stats.prompt_tokens} tokens, prefill 50.0 ms",
        f"{stats.new_tokens} (stopped by --max-tokens reached)",
        f"{stats.target_passes} target forward passes, {stats.tokens_per_pass:.2f} tokens per pass",
        f"{stats.drafted} / {stats.accepted} ({stats.acceptance_rate:.1%} accepted)",
        " ".join(f"{i}:{r:.0%}" for i, r in enumerate(stats.acceptance_by_position, 1)),
        f"{stats.mean_accepted:.2f} of k = 4",
        f"{stats.tokens_per_second:.1f} tokens/s (prefill excluded)",
        f"{base.tokens_per_second:.1f} tokens/s",
        f"{measured_speedup(stats, base):.2f}x",
        "1.50x",
        f"alpha {stats.alpha:.3f}",
        "verify batch of 5 tokens 14.0 ms",
        "big-model steps",
        "drafting",
        "verifying",
        "everything else",
        "42",
    ):
        assert needle in text, needle


def test_stats_table_without_drafts_or_prediction_says_why():
    stats = RunStats(new_tokens=1, target_passes=1, generation_seconds=0.01, finish_reason="interrupted")
    text = table_text(stats_table(stats, k=4, note="n/a (nothing was drafted)"))
    assert "interrupted" in text and "n/a (nothing was drafted)" in text
    assert "measured speed-up" not in text


def test_activity_spins_on_a_terminal_and_stays_quiet_in_a_log():
    terminal = Console(file=io.StringIO(), force_terminal=True)
    with Activity(terminal, animate=True) as activity:
        activity.show("loading the target x.gguf ...")
        activity.show("loading the draft y.gguf ...")
    assert "loading the" in terminal.file.getvalue()

    log = Console(file=io.StringIO())
    with Activity(log, animate=False) as activity:
        activity.show("loading the target x.gguf ...")
        activity.show("converting once ...", note=True)
    assert log.file.getvalue() == "specdec: converting once ...\n"
