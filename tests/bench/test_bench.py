"""`specdec bench`: the plan, the analysis, the writers and the CLI.

Most tests run the bench on toy Markov models (tests/fakes.py), so they are fast and need
no lock; the last one runs the real command on the built-in pair (marker `model`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.cli import app as cli
from specdec_cli.cli import bench as cli_bench
from specdec_cli.bench.run import plan, run_bench
from specdec_cli.bench.model import NATIVE, SPECULATIVE, TARGET, BenchConfig, RunRecord, Setting, Spread, Step, SummaryRow
from specdec_cli.bench.output import CSV_COLUMNS, report_dict, write_csv
from specdec_cli.bench.stats import analyse, first_divergence, recommend
from specdec_cli.options import option_list, parse_draft_length, parse_draft_tokens, parse_drafters, parse_temperatures
from specdec_cli.bench.model import DEFAULT_DRAFT_TOKENS, DEFAULT_DRAFTERS, DEFAULT_REPEATS
from specdec_cli.drafting.combined import ModelAndLookup
from specdec_cli.drafting.lookup import LookupDrafter, LookupOptions
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.tuning.cost_curve import CostCurve, DRAFT_RUN, measure_cost_curve, mid_generation
from specdec_cli.decoding.engine import Engine
from specdec_cli.errors import BadInput, SpecdecError
from specdec_cli.bench.native import NativeResult, find_binary, native_command, parse_output, run_native
from specdec_cli.prompts import BUILTIN_PROMPTS, Prompt, load_prompts
from specdec_cli.bench.render import by_position, divergence_message, recommendation_line, require_matplotlib, spread, write_plot
from specdec_cli.decoding.stats import RunStats
from specdec_cli.tuning.speedup import predict

VOCAB = 12


class FakePair:
    """session.LoadedPair over Markov models; `spec_target` (if given) scores the speculative side."""

    def __init__(self, seed: int = 0, spec_target: MarkovModel | None = None) -> None:
        rng = np.random.default_rng(seed)
        table = random_markov(VOCAB, rng)
        self.target = MarkovModel(table)
        # The draft: the target's table plus noise, so that some drafts are rejected.
        self.draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
        self.spec_target = spec_target
        self.engines: list[tuple[bool, str, LookupOptions]] = []  # what engine() was asked for

    def prompt_tokens(self, prompt: str, *, chat: bool = True) -> list[int]:
        return [len(prompt) % VOCAB, 3, 7]

    def draft_context(self, context) -> list[int]:
        return list(context)  # one vocabulary

    def engine(self, speculative: bool = True, drafter: str = "model", lookup: LookupOptions = LookupOptions()) -> Engine:
        self.engines.append((speculative, drafter, lookup))
        if not speculative:
            return Engine(self.target, None)
        by_lookup = LookupDrafter(lookup)
        chosen = {"model": ModelDrafter(self.draft), "lookup": by_lookup, "model+lookup": ModelAndLookup(ModelDrafter(self.draft), by_lookup)}
        return Engine(self.spec_target or self.target, chosen[drafter])


PROMPTS = [Prompt("a", "user", "one prompt"), Prompt("b", "user", "another, longer prompt")]
SMALL = BenchConfig(draft_tokens=(1, 3), drafters=("model",), temperatures=(0.0, 0.7), max_tokens=20, repeats=2, warmup_tokens=4, cost_repeats=1)


# -- options and prompts ------------------------------------------------------------------


def test_parse_draft_tokens_sorts_and_checks():
    assert parse_draft_tokens("8, 2,4,2") == (2, 4, 8)
    for bad in ("0", "2,x", "", "65"):
        with pytest.raises(BadInput):
            parse_draft_tokens(bad)


def test_parse_temperatures_keeps_order_and_checks():
    assert parse_temperatures("0.7,0,0.7") == (0.7, 0.0)
    for bad in ("-1", "hot", "", "nan"):
        with pytest.raises(BadInput):
            parse_temperatures(bad)


def test_builtin_suite_covers_the_kinds_and_carries_its_text():
    kinds = {p.kind for p in BUILTIN_PROMPTS}
    assert kinds == {"code", "chat", "summarise", "structured", "story", "edit", "mixed"}
    assert len({p.name for p in BUILTIN_PROMPTS}) == len(BUILTIN_PROMPTS)
    summary = next(p for p in BUILTIN_PROMPTS if p.kind == "summarise")
    assert "Marrow Bay" in summary.text and len(summary.text) > 400  # the text to summarise is in the prompt


def test_load_prompts_jsonl_and_plain(tmp_path):
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text('{"name": "sql", "prompt": "Write SQL"}\n\n{"prompt": "Say hi"}\n')
    assert load_prompts(jsonl) == [Prompt("sql", "user", "Write SQL"), Prompt("p2", "user", "Say hi")]
    plain = tmp_path / "mine.txt"
    plain.write_text("First prompt\n\n  Second prompt  \n")
    assert load_prompts(plain) == [Prompt("p1", "user", "First prompt"), Prompt("p2", "user", "Second prompt")]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("", "holds no prompts"),
        ('{"prompt": "ok"}\n{"prompt": \n', "line 2: not valid JSON"),
        ('{"text": "no prompt key"}\n', 'non-empty "prompt"'),
        ('{"name": "x", "prompt": "a"}\n{"name": "x", "prompt": "b"}\n', "more than one prompt"),
    ],
)
def test_load_prompts_errors_name_the_problem(tmp_path, content, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput, match=fragment):
        load_prompts(path)


# -- the plan and the run -----------------------------------------------------------------


def test_plan_interleaves_a_and_b_with_repeats_outermost():
    steps = plan(["a", "b"], SMALL)
    assert len(steps) == 2 * 2 * 2 * 2 * 2  # repeats x prompts x temperatures x k x sides
    assert [s.mode for s in steps] == [TARGET, SPECULATIVE] * (len(steps) // 2)
    pairs = list(zip(steps[::2], steps[1::2]))
    assert all(a.setting == b.setting and a.repeat == b.repeat for a, b in pairs)
    assert [s.repeat for s in steps] == [0] * 16 + [1] * 16
    assert [s.setting for s in steps[:16]] == [s.setting for s in steps[16:]]
    with_native = plan(["a"], SMALL, native=True)
    assert [s.mode for s in with_native[:6]] == [TARGET, SPECULATIVE, NATIVE] * 2


def test_run_bench_follows_the_plan_reports_progress_and_prints_nothing(capsys):
    seen = []
    report = run_bench(FakePair(), PROMPTS, SMALL, progress=lambda done, total, label: seen.append((done, total, label)))
    assert [r.step for r in report.runs] == plan(["a", "b"], SMALL)
    total = 2 + SMALL.repeats * len(PROMPTS) + len(report.runs)  # warm-up, cost curves, runs
    assert [d for d, _, _ in seen] == list(range(1, total + 1)) and {t for _, t, _ in seen} == {total}
    assert capsys.readouterr() == ("", "")
    # Same seed, budget and sampling on both sides: target-only runs of one repeat are identical across k.
    a_runs = [r for r in report.runs if r.step.mode == TARGET and r.step.repeat == 0 and r.step.setting.prompt == "a" and r.step.setting.temperature == 0.7]
    assert len({r.tokens for r in a_runs}) == 1
    assert all(r.new_tokens == SMALL.max_tokens for r in report.runs)
    assert set(report.cost_curves) == {"a", "b"} and all(len(c.target_batch) == 4 for c in report.cost_curves.values())


def test_mid_generation_docstring_example():
    assert mid_generation([5, 6], [7, 8, 9, 10]) == [5, 6, 7, 8]
    assert mid_generation((5, 6), (7,)) == [5, 6]  # half of one token is none


def test_cost_curve_times_every_size_in_turn_and_leaves_both_caches_as_it_found_them():
    """Each repeat times batches of 1..max_batch tokens, then draft steps in a row (as a round
    drafts them; min(DRAFT_RUN, max_batch - 1) of them), so that a slow spell falls on every size
    alike; the caches end at their contexts, also when a decode fails."""
    log = []

    class Logged(MarkovModel):
        def decode(self, tokens, n_logits=1):
            log.append((self.name, len(tokens)))
            return super().decode(tokens, n_logits)

    table = random_markov(VOCAB, np.random.default_rng(1))
    target, draft = Logged(table), Logged(table)
    target.name, draft.name = "target", "draft"
    target.decode([1, 2], 1)  # the target's cache holds more than the context, the draft's less
    target.decode([5], 1)
    curve = measure_cost_curve(target, draft, [1, 2, 3], 3, repeats=2)
    timed = log[log.index(("draft", 3)) + 1 :]  # after both catch-ups (the draft's: all 3 tokens)
    assert timed == [("target", 1), ("target", 2), ("target", 3), ("draft", 1), ("draft", 1)] * 2
    assert len(curve.target_batch) == 3 and curve.draft_step > 0
    assert target.tokens == [1, 2, 3] and draft.tokens == [1, 2, 3]
    log.clear()
    measure_cost_curve(target, draft, [1, 2, 3], 9, repeats=1)
    assert log[-9 - DRAFT_RUN :] == [("target", n) for n in range(1, 10)] + [("draft", 1)] * DRAFT_RUN  # after the catch-ups
    assert target.tokens == [1, 2, 3] and draft.tokens == [1, 2, 3]

    def fail_at_two(tokens, n_logits=1, decode=target.decode):
        rows = decode(tokens, n_logits)
        if len(tokens) == 2:
            raise RuntimeError("decode failed")  # after filling the cache
        return rows

    target.decode = fail_at_two  # fails after the catch-up and the batch of 1
    with pytest.raises(RuntimeError):
        measure_cost_curve(target, draft, [1, 2, 3], 3)
    assert target.tokens == [1, 2, 3] and draft.tokens == [1, 2, 3]


def test_cost_curves_are_timed_halfway_through_each_prompts_first_target_only_run(monkeypatch):
    """A step costs more as the context grows, so each (prompt, repeat)'s curve is timed right
    after its first run, target-only, at the prompt plus the first half of what that run generated."""
    contexts = []

    def spy(target, draft, context, *args):
        contexts.append(list(context))
        return measure_cost_curve(target, draft, context, *args)

    monkeypatch.setattr("specdec_cli.bench.run.measure_cost_curve", spy)
    labels = []
    pair = FakePair()
    report = run_bench(pair, PROMPTS, SMALL, progress=lambda done, total, label: labels.append(label))
    text = {p.name: p.text for p in PROMPTS}
    firsts = [
        next(r for r in report.runs if r.step.repeat == i and r.step.setting.prompt == p.name) for i in range(SMALL.repeats) for p in PROMPTS
    ]
    assert all(r.step.mode == TARGET for r in firsts)
    assert contexts == [pair.prompt_tokens(text[r.step.setting.prompt]) + list(r.tokens[: SMALL.max_tokens // 2]) for r in firsts]
    curves = [i for i, label in enumerate(labels) if label.startswith("cost curve")]
    settings = [(r.step.setting, r.step.repeat + 1) for r in firsts]
    assert [labels[i - 1] for i in curves] == [f"{s.prompt} T={s.temperature:g} model k={s.k} target (repeat {i}/2)" for s, i in settings]


def test_a_generation_that_fills_the_context_leaves_room_for_the_cost_curve():
    """Target-only stops when the context is full (3 prompt tokens + 5 of 20 in 8); halfway
    through it, 5 tokens, a batch of 4 would not fit: the curve is timed 4 tokens in."""
    pair = FakePair()
    pair.target.n_ctx = pair.draft.n_ctx = 8
    report = run_bench(pair, PROMPTS, SMALL)
    assert {r.new_tokens for r in report.runs} == {5}
    assert all(len(c.target_batch) == 4 for c in report.cost_curves.values())


def test_exact_at_temperature_zero_on_a_faithful_pair():
    report = run_bench(FakePair(seed=3), PROMPTS, SMALL)
    assert report.divergences == []
    assert report_dict(report)["exact"] is True
    greedy = [r for r in report.runs if r.step.setting.temperature == 0 and r.step.mode == SPECULATIVE]
    assert greedy and all(r.divergence is None for r in greedy)
    # The draft differs from the target, so the check has rejections to survive.
    assert any(r.stats.rejections for r in greedy)


def test_divergence_at_temperature_zero_is_found_with_its_position():
    pair = FakePair(seed=1)
    # The speculative side scores with a different model: its greedy output must differ somewhere.
    other = MarkovModel(random_markov(VOCAB, np.random.default_rng(99)))
    pair.spec_target = other
    config = BenchConfig(draft_tokens=(2,), drafters=("model",), temperatures=(0.0,), max_tokens=24, repeats=1, warmup_tokens=0, cost_repeats=1)
    report = run_bench(pair, PROMPTS[:1], config)
    a, b = report.runs
    expected = first_divergence(a.tokens, b.tokens)
    assert expected is not None
    (d,) = report.divergences
    assert (d.position, d.repeat, d.setting) == (expected, 0, Setting("a", 0.0, 2))
    assert d.target_token == a.tokens[expected] and d.speculative_token == b.tokens[expected]
    assert f"token {expected} (0-based)" in divergence_message(d)
    assert b.divergence == expected and report_dict(report)["exact"] is False


def test_first_divergence_examples():
    assert first_divergence([5, 6, 7], [5, 6, 9]) == 2
    assert first_divergence([5, 6], [5, 6, 7]) == 2
    assert first_divergence([5], [5]) is None
    assert first_divergence([], [1]) == 0


# -- the analysis ---------------------------------------------------------------------------


def _record(repeat, mode, tps, k=4, temperature=0.0, accepted=0, rejections=0) -> RunRecord:
    stats = RunStats(new_tokens=100, generation_seconds=100 / tps)
    if mode == SPECULATIVE:
        stats.accepted, stats.rejections, stats.drafted, stats.rounds_with_draft = accepted, rejections, 4 * (accepted + rejections), 10
    return RunRecord(Step(repeat, Setting("p", temperature, k), mode), 100, 100 / tps, 100 / tps, tps, stats, tokens=(1, 2))


def test_setting_result_medians_paired_speedups_and_prediction_by_hand():
    # A = 40, 42, 41 tok/s and B = 60, 58, 66 tok/s: paired speed-ups 1.5, 1.381, 1.610.
    runs = []
    for r, (a, b) in enumerate([(40, 60), (42, 58), (41, 66)]):
        runs += [_record(r, TARGET, a), _record(r, SPECULATIVE, b, accepted=8, rejections=2)]
    cost = CostCurve(draft_step=0.005, target_batch=(0.012, 0.013, 0.014, 0.016, 0.018))
    config = BenchConfig(draft_tokens=(4,), temperatures=(0.0,), repeats=3)
    (result,) = analyse(runs, {"p": cost}, config, ["p"])
    assert result.target_tps == Spread(41, 40, 42, 3)
    assert result.speculative_tps == Spread(60, 58, 66, 3)
    assert result.speedup.median == pytest.approx(1.5)
    assert (result.speedup.low, result.speedup.high) == (pytest.approx(58 / 42), pytest.approx(66 / 41))
    # alpha = 24 / (24 + 6) = 0.8 pooled; E = (1 - 0.8^5) / 0.2 = 3.3616; 3.3616 * 12 / (4 * 5 + 18) = 1.06156
    assert result.alpha == pytest.approx(0.8)
    assert (result.draft_step, result.target_step, result.verify_batch) == (0.005, 0.012, 0.018)
    assert result.predicted_speedup == pytest.approx(3.3616 * 0.012 / 0.038)
    assert result.measured_over_predicted == pytest.approx(1.5 / (3.3616 * 0.012 / 0.038))


def test_predict_against_hand_worked_numbers():
    # Every draft accepted: E = k + 1 = 4; 4 * 20 ms / (3 * 10 ms + 30 ms) = 1.333
    assert predict(1.0, 3, CostCurve(0.010, (0.020, 0.022, 0.025, 0.030))) == pytest.approx(4 / 3)
    # alpha = 0.5, k = 2: E = (1 - 0.125) / 0.5 = 1.75; 1.75 * 10 / (2 * 2 + 12) = 1.09375
    assert predict(0.5, 2, CostCurve(0.002, (0.010, 0.011, 0.012))) == pytest.approx(1.09375)
    # The verify cost is the batch of k + 1 tokens, not the first entry: a costlier batch lowers the prediction.
    assert predict(0.5, 2, CostCurve(0.002, (0.010, 0.011, 0.020))) == pytest.approx(1.75 * 10 / 24)


def _row(t, k, speedup, predicted=1.0, drafter="model"):
    return SummaryRow(t, drafter, k, speedup, speedup, speedup, predicted, 10.0, 10.0 * speedup, 0.8, 0.8, [0.8], 1.0)


def test_recommend_takes_the_best_geometric_mean_over_temperatures():
    summary = [_row(0.0, 2, 1.5), _row(0.7, 2, 1.1), _row(0.0, 4, 1.9), _row(0.7, 4, 0.8), _row(0.0, 8, 1.2), _row(0.7, 8, 1.2)]
    # geometric means: k=2 sqrt(1.65) = 1.285, k=4 sqrt(1.52) = 1.233, k=8 1.2
    rec = recommend(summary)
    assert rec.k == 2 and rec.worthwhile
    assert rec.speedups == {0.0: 1.5, 0.7: 1.1}
    assert (rec.drafter, rec.k) == ("model", 2)
    assert recommendation_line(rec).startswith("best: --drafter model --draft-tokens 2: 1.50x at T=0 (predicted 1.00x)")


def test_recommend_ties_go_to_the_smaller_k_and_a_loss_says_so():
    assert recommend([_row(0.0, 4, 1.3), _row(0.0, 2, 1.3)]).k == 2
    rec = recommend([_row(0.0, 1, 0.9), _row(0.0, 2, 0.7)])
    assert rec.k == 1 and not rec.worthwhile and "no drafter and k beats target-only" in recommendation_line(rec)


# -- what it writes -------------------------------------------------------------------------


def test_csv_has_one_row_per_run_with_the_documented_columns():
    report = run_bench(FakePair(), PROMPTS, SMALL)
    out = io.StringIO()
    write_csv(report, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(report.runs)
    assert [r["mode"] for r in rows[:4]] == [TARGET, SPECULATIVE, TARGET, SPECULATIVE]
    spec = [r for r in rows if r["mode"] == SPECULATIVE]
    assert all(int(r["drafted"]) > 0 and float(r["tokens_per_second"]) > 0 for r in spec)
    assert all(r["divergence_position"] == "" for r in rows)


def test_json_holds_every_measurement_and_is_strict_json():
    report = run_bench(FakePair(), PROMPTS, SMALL)
    data = json.loads(json.dumps(report_dict(report), allow_nan=False))
    assert data["schema"] == "specdec-bench/2"
    assert set(data) >= {"config", "models", "prompts", "summary", "results", "cost_curves", "runs", "recommendation", "divergences", "exact"}
    assert len(data["runs"]) == len(report.runs) and len(data["results"]) == 2 * 2 * 2
    assert len(data["summary"]) == 2 * 2
    result = data["results"][0]
    for key in ("target_tps", "speculative_tps", "speedup", "predicted_speedup", "acceptance_by_position", "alpha", "mean_accepted", "measured_over_predicted"):
        assert key in result
    assert set(result["speedup"]) == {"median", "low", "high", "n"}
    assert len(data["cost_curves"]["a"]["target_batch"]) == max(SMALL.draft_tokens) + 1
    assert data["recommendation"]["k"] in SMALL.draft_tokens


def test_render_helpers():
    assert spread(Spread(1.47, 1.40, 1.52, 3), 2) == "1.47 (1.40-1.52)"
    assert spread(Spread(2.0, 2.0, 2.0, 1)) == "2.0"
    assert by_position([1.0, 0.95, 0.5]) == "100 95 50"


def test_plot_without_matplotlib_is_a_clear_bad_input(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(BadInput, match="pip install"):
        require_matplotlib()


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    report = run_bench(FakePair(), PROMPTS, SMALL)
    path = tmp_path / "bench.png"
    write_plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- llama.cpp's binary --------------------------------------------------------------------

# The end of llama-speculative-simple's output, in the format its source prints
# (examples/speculative-simple/speculative-simple.cpp: LOG_INF("decoded %4d tokens in %8.3f
# seconds, speed: %8.3f t/s\n", ...) and the n_* counters), followed by llama.cpp's perf lines.
NATIVE_SAMPLE = """
Once upon a time, in a small workshop, a robot named Pixel ...

encoded   38 tokens in    0.101 seconds, speed:  376.238 t/s
decoded  133 tokens in    1.712 seconds, speed:   77.687 t/s

n_draft   = 8
n_predict = 133
n_drafted = 128
n_accept  = 112
accept    = 87.500%

draft:

llama_perf_context_print:        load time =      71.12 ms
llama_perf_context_print: prompt eval time =      20.31 ms /    38 tokens (    0.53 ms per token,  1871.00 tokens per second)

target:

llama_perf_sampler_print:    sampling time =      12.85 ms /   133 runs   (    0.10 ms per token, 10350.19 tokens per second)
llama_perf_context_print:        load time =     302.54 ms
llama_perf_context_print:        eval time =    1184.60 ms /    24 runs   (   49.36 ms per token,    20.26 tokens per second)
"""


def test_parse_native_output():
    result = parse_output(NATIVE_SAMPLE)
    assert result == NativeResult(decoded_tokens=133, seconds=1.712, tokens_per_second=77.687, n_draft=8, n_drafted=128, n_accept=112)
    assert result.acceptance_rate == pytest.approx(112 / 128)
    # The "encoded" line and the perf lines' "tokens per second" are not the decode speed.
    assert parse_output(NATIVE_SAMPLE.replace("decoded  133", "decoded  140")).decoded_tokens == 140


def test_parse_native_output_without_a_speed_line_fails_with_the_tail():
    with pytest.raises(SpecdecError, match="error: invalid argument: --draft-max"):
        parse_output("usage: ...\nerror: invalid argument: --draft-max\n")


def test_native_binary_missing_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="llama-speculative-simple"):
        find_binary(tmp_path / "nope" / "llama-speculative-simple")
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(BadInput, match="chmod"):
        find_binary(script)


def test_native_command_carries_the_bench_settings(tmp_path):
    cmd = native_command(
        tmp_path / "bin", tmp_path / "d.gguf", tmp_path / "t.gguf", "<|im_start|>user\nhi",
        draft_tokens=4, max_tokens=64, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
        seed=7, ctx=2048, threads=2, gpu_layers=-1, draft_gpu_layers=0, extra=["--draft-p-min", "0"],
    )  # fmt: skip
    flags = dict(zip(cmd[1::2], cmd[2::2]))
    assert flags["-m"] == str(tmp_path / "t.gguf") and flags["-md"] == str(tmp_path / "d.gguf")
    assert flags["-p"] == "<|im_start|>user\nhi" and flags["-n"] == "64" and flags["--spec-draft-n-max"] == "4"
    assert flags["--spec-type"] == "draft-simple"
    assert (flags["--temp"], flags["--seed"], flags["-c"], flags["-t"]) == ("0.0", "7", "2048", "2")
    assert (flags["-ngl"], flags["-ngld"]) == ("999", "0")
    assert cmd[-2:] == ["--draft-p-min", "0"]


def test_run_native_reads_a_fake_binary(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(NATIVE_SAMPLE)
    fake = tmp_path / "llama-speculative-simple"
    fake.write_text(f"#!/bin/sh\necho 'some text'\ncat {log} >&2\n")
    fake.chmod(0o755)
    assert run_native([str(find_binary(fake)), "-m", "x"]).tokens_per_second == 77.687
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'error: failed to load model' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(SpecdecError, match="(?s)exited with code 1.*failed to load model"):
        run_native([str(failing)])


def test_native_runs_interleave_and_land_in_the_results():
    calls = []

    def native(prompt, setting):
        calls.append((prompt.name, setting))
        return NativeResult(decoded_tokens=20, seconds=0.5, tokens_per_second=40.0 + setting.k, n_drafted=10, n_accept=5)

    config = BenchConfig(draft_tokens=(1, 3), drafters=("model",), temperatures=(0.0,), max_tokens=10, repeats=2, warmup_tokens=0, cost_repeats=1)
    report = run_bench(FakePair(), PROMPTS[:1], config, native=native)
    assert [r.step.mode for r in report.runs] == [TARGET, SPECULATIVE, NATIVE] * 4
    assert len(calls) == 4
    assert [r.native_tps.median for r in report.results] == [41.0, 43.0]
    assert report.results[0].native_acceptance == 0.5
    assert report.summary[1].native_tps == 43.0


# -- the command line ------------------------------------------------------------------------


def _main(monkeypatch, capsys, *args):
    """Run `specdec bench ARGS` through cli.app.main; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["specdec", "bench", *map(str, args)])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--draft-tokens", "0"], "--draft-tokens must be between 1 and 64, got 0"),
        (["--draft-tokens", "4,sometimes"], "whole numbers and/or auto"),
        (["--drafter", "model,oracle"], "--drafter takes a comma-separated list of model, lookup, model+lookup"),
        (["--temperature", "0,-1"], "--temperature values must be 0"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--draft", "x.gguf"], "give both --draft and --target"),
        (["--native", "/nonexistent/llama-speculative-simple"], "--native: no executable"),
        (["--csv", "/nonexistent-dir/out.csv"], "--csv: the folder"),
        (["--verify", "tree"], "--verify must be one of token, block, auto, got 'tree'"),
    ],
)
def test_cli_rejects_bad_options_before_loading(monkeypatch, capsys, args, fragment):
    code, out, err = _main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert fragment in err


def test_cli_plot_without_matplotlib_fails_early(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = _main(monkeypatch, capsys, "--plot", tmp_path / "x.png")
    assert code == 2 and "--plot needs matplotlib" in err and out == ""


def _fake_models(monkeypatch, pair):
    """Make `specdec bench` load `pair` instead of GGUF files."""
    import contextlib

    import specdec_cli.session

    for model in (pair.target, pair.draft):
        model.n_threads, model.n_gpu_layers, model.repack = 1, 0, True  # as LlamaModel has them

    @contextlib.contextmanager
    def open_pair(draft, target, options=None, on_load=None):
        yield pair

    monkeypatch.setattr(specdec_cli.session, "open_pair", open_pair)
    monkeypatch.setattr(cli_bench, "resolve_paths", lambda draft, target, **options: (None, None))


def test_cli_writes_json_csv_and_tables_on_the_right_streams(monkeypatch, capsys, tmp_path):
    _fake_models(monkeypatch, FakePair())
    csv_path = tmp_path / "runs.csv"
    code, out, err = _main(monkeypatch, capsys, "-n", 10, "-k", "1,3", "--drafter", "model", "--temperature", "0,0.7", "--repeats", 2, "--json", "--csv", csv_path)
    assert code == 0, err
    data = json.loads(out)
    assert data["exact"] is True and len(data["runs"]) == 7 * 2 * 2 * 2 * 2  # built-in suite (default drafters: model, lookup)
    assert len(list(csv.DictReader(csv_path.open()))) == len(data["runs"])
    assert "summary over prompts" in err and "recommendation: " in err


def test_cli_bench_takes_verify_auto(monkeypatch, capsys):
    _fake_models(monkeypatch, FakePair())
    code, out, err = _main(monkeypatch, capsys, "-n", 12, "-k", "3", "--drafter", "model", "--temperature", "0.7", "--repeats", 1, "--verify", "auto", "--json")
    assert code == 0, err
    speculative = [run["stats"] for run in json.loads(out)["runs"] if run["mode"] == "speculative"]
    assert speculative and all(set(stats["rounds_by_rule"]) <= {"token", "block"} for stats in speculative)
    assert any("block" in stats["rounds_by_rule"] for stats in speculative)  # round 2 of each drafted run


def test_cli_divergence_exits_1_and_says_where(monkeypatch, capsys):
    pair = FakePair(seed=1)
    pair.spec_target = MarkovModel(random_markov(VOCAB, np.random.default_rng(99)))
    _fake_models(monkeypatch, pair)
    code, out, err = _main(monkeypatch, capsys, "-n", 16, "-k", "2", "--temperature", "0", "--repeats", 1, "--json")
    assert code == 1
    data = json.loads(out)  # the measurements are still written
    assert data["exact"] is False and data["divergences"]
    first = data["divergences"][0]
    assert f"differs from target-only at generated token {first['position']} (0-based)" in err
    assert err.rstrip().splitlines()[-1].startswith("specdec: error: ")


@pytest.mark.model
def test_cli_bench_end_to_end_on_the_builtin_pair(monkeypatch, capsys, tmp_path, builtin_paths):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Write a short story about a robot who learns to paint.\n")
    csv_path = tmp_path / "bench.csv"
    code, out, err = _main(
        monkeypatch, capsys, "-n", 12, "--draft-tokens", "2,4", "--drafter", "model", "--temperature", "0", "--repeats", 1,
        "--prompts", prompts, "--json", "--csv", csv_path, "--warmup", 4,
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)  # stdout holds only the JSON object
    assert data["exact"] is True and data["divergences"] == []
    runs = data["runs"]
    assert [r["mode"] for r in runs] == [TARGET, SPECULATIVE] * 2
    assert all(r["new_tokens"] == 12 and r["tokens_per_second"] > 0 for r in runs)
    assert runs[0]["tokens"] == runs[1]["tokens"]  # greedy: speculative == target-only
    spec = [r for r in runs if r["mode"] == SPECULATIVE]
    assert all(r["stats"]["drafted"] > 0 for r in spec)
    assert all(math.isfinite(r["predicted_speedup"]) and r["predicted_speedup"] > 0 for r in data["results"])
    assert "recommendation: best: --drafter" in err or "recommendation: no drafter and k beats" in err
    assert len(list(csv.DictReader(csv_path.open()))) == 4


# -- auto and the lookup drafter ---------------------------------------------------------

MIXED = BenchConfig(
    draft_tokens=(2, "auto"), drafters=("model", "lookup"), temperatures=(0.0, 0.7), max_tokens=24, repeats=2, warmup_tokens=4, cost_repeats=1
)


def test_parse_draft_tokens_and_drafters_take_auto_and_lists():
    assert parse_draft_tokens("auto,4,1,2,AUTO") == (1, 2, 4, "auto")
    assert parse_draft_tokens("auto") == ("auto",)
    assert parse_drafters("lookup, model,lookup") == ("lookup", "model")
    for bad in ("", "model,draft", "oracle"):
        with pytest.raises(BadInput, match="--drafter"):
            parse_drafters(bad)


def test_option_text_of_the_defaults_parses_back_to_them():
    # The bench's --draft-tokens/--drafter/--temperature defaults are option_list(value): the
    # text must parse back to the value BenchConfig uses.
    assert option_list(DEFAULT_DRAFT_TOKENS) == "2,4,8,12,auto" and option_list((0.0, 0.7)) == "0,0.7"
    assert parse_draft_tokens(option_list(DEFAULT_DRAFT_TOKENS)) == BenchConfig().draft_tokens == DEFAULT_DRAFT_TOKENS
    assert parse_drafters(option_list(DEFAULT_DRAFTERS)) == BenchConfig().drafters == DEFAULT_DRAFTERS
    assert parse_temperatures(option_list(BenchConfig().temperatures)) == BenchConfig().temperatures
    assert DEFAULT_REPEATS == BenchConfig().repeats


def test_run_takes_one_draft_length():
    assert parse_draft_length("8") == 8 and parse_draft_length(" AUTO ") == "auto"
    for bad, fragment in (("2,4", "one value"), ("0", "between 1 and 64, got 0"), ("65", "got 65"), ("eight", "whole numbers and/or auto"), ("", "or auto")):
        with pytest.raises(BadInput, match=fragment):
            parse_draft_length(bad)


def test_plan_sweeps_drafters_and_auto_like_any_k_and_native_only_for_model_at_fixed_k():
    steps = plan(["a"], MIXED, native=True)
    settings = [(s.setting.temperature, s.setting.drafter, s.setting.k) for s in steps if s.repeat == 0 and s.mode == TARGET]
    assert settings == [(t, d, k) for t in (0.0, 0.7) for d in ("model", "lookup") for k in (2, "auto")]
    # Every setting, auto and lookup included, is an A right before its B.
    ab = [s for s in steps if s.mode != NATIVE]
    assert [s.mode for s in ab] == [TARGET, SPECULATIVE] * (len(ab) // 2)
    assert all(a.setting == b.setting and a.repeat == b.repeat for a, b in zip(ab[::2], ab[1::2]))
    natives = [s.setting for s in steps if s.mode == NATIVE]
    assert natives and all(s.drafter == "model" and s.k == 2 for s in natives)
    assert len(steps) == 2 * 2 * 2 * 2 * 2 + len(natives) and len(natives) == 2 * 2  # repeats x temperatures


def test_run_bench_with_auto_and_lookup_is_exact_and_fills_the_new_fields():
    pair = FakePair(seed=3)
    report = run_bench(pair, PROMPTS, MIXED)
    # One target-only engine and one per drafter; lookup proposals as long as the largest fixed k needs.
    assert [(spec, d) for spec, d, _ in pair.engines] == [(False, "model"), (True, "model"), (True, "lookup")]
    assert all(opts.max_tokens == 10 for *_, opts in pair.engines)  # max(2, the default 10)
    assert report.divergences == []
    results = {(r.setting.prompt, r.setting.temperature, r.setting.drafter, r.setting.k): r for r in report.results}
    assert len(results) == len(report.results) == 2 * 2 * 2 * 2
    for (prompt, t, drafter, k), r in results.items():
        assert r.speedup is not None and r.speedup.n == 2
        # Theorem 3.8 only for the model drafter at a fixed k.
        assert math.isfinite(r.predicted_speedup) == (drafter == "model" and k == 2)
        assert math.isfinite(r.verify_batch) == (k == 2)
        assert 0 <= r.mean_k <= (2 if k == 2 else 16)
    # Fixed k = 2 from the model drafter drafts 2 tokens every round but (perhaps) the last.
    assert all(r.mean_k > 1.5 for key, r in results.items() if key[2:] == ("model", 2))
    summary = {(row.temperature, row.drafter, row.k) for row in report.summary}
    assert summary == {(t, d, k) for t in (0.0, 0.7) for d in ("model", "lookup") for k in (2, "auto")}
    # Lookup found something to copy in these tiny-vocabulary outputs, so the lookup rows are real.
    assert any(row.drafter == "lookup" and row.mean_k > 0 for row in report.summary)
    assert (0.0, report.recommendation.drafter, report.recommendation.k) in summary


def test_schema_carries_the_drafter_and_auto():
    report = run_bench(FakePair(), PROMPTS[:1], MIXED)
    data = json.loads(json.dumps(report_dict(report), allow_nan=False))
    assert data["config"]["drafters"] == ["model", "lookup"] and data["config"]["draft_tokens"] == [2, "auto"]
    assert {(r["setting"]["drafter"], r["setting"]["k"]) for r in data["results"]} == {("model", 2), ("model", "auto"), ("lookup", 2), ("lookup", "auto")}
    assert all("mean_k" in r for r in data["results"]) and all("drafter" in row and "mean_k" in row for row in data["summary"])
    assert {(r["drafter"], r["k"]) for r in data["runs"]} == {("model", 2), ("model", "auto"), ("lookup", 2), ("lookup", "auto")}
    auto = next(r for r in data["results"] if r["setting"]["k"] == "auto")
    assert auto["predicted_speedup"] is None and auto["verify_batch"] is None  # NaN -> null
    assert set(data["recommendation"]) >= {"drafter", "k", "line"}
    out = io.StringIO()
    write_csv(report, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert "drafter" in rows[0] and "mean_k" in rows[0]
    assert {(r["drafter"], r["k"]) for r in rows} == {("model", "2"), ("model", "auto"), ("lookup", "2"), ("lookup", "auto")}


def test_recommend_picks_the_best_drafter_and_k_and_names_both():
    summary = [
        _row(0.0, 4, 1.5), _row(0.7, 4, 1.2),
        _row(0.0, "auto", 1.6, math.nan), _row(0.7, "auto", 1.2, math.nan),
        _row(0.0, 4, 1.1, math.nan, "lookup"), _row(0.7, 4, 1.0, math.nan, "lookup"),
        _row(0.0, "auto", 1.9, math.nan, "lookup"), _row(0.7, "auto", 1.3, math.nan, "lookup"),
    ]  # fmt: skip
    # geometric means: model 4 1.342, model auto 1.386, lookup 4 1.049, lookup auto 1.572
    rec = recommend(summary)
    assert (rec.drafter, rec.k, rec.worthwhile) == ("lookup", "auto", True)
    assert recommendation_line(rec) == "best: --drafter lookup --draft-tokens auto: 1.90x at T=0, 1.30x at T=0.7"  # no prediction for auto
    # Ties: the drafter listed first, then the smaller k, auto after every number.
    tie = [_row(0.0, "auto", 1.3, drafter="model"), _row(0.0, 8, 1.3, drafter="model"), _row(0.0, 2, 1.3, drafter="lookup")]
    assert (recommend(tie).drafter, recommend(tie).k) == ("model", 8)


def test_builtin_suite_has_an_edit_prompt_quoting_its_paragraph_and_a_mixed_one():
    edit = next(p for p in BUILTIN_PROMPTS if p.kind == "edit")
    assert "return the whole paragraph" in edit.text
    paragraph = edit.text.split("\n\n", 1)[1]
    assert len(paragraph) > 400 and "Marrow Bay" in paragraph
    # Three misspellings to correct, the rest as in the summary text.
    summary = next(p for p in BUILTIN_PROMPTS if p.kind == "summarise").text.split("\n\n", 1)[1]
    assert paragraph != summary and len(paragraph.split()) == len(summary.split())
    assert sum(a != b for a, b in zip(paragraph.split(), summary.split())) == 3
    mixed = next(p for p in BUILTIN_PROMPTS if p.kind == "mixed")
    assert "def top_words(text, n):" in mixed.text and "Explain in a short paragraph" in mixed.text
    assert mixed.text.count("\n    ") >= 5  # quoted code, indented


def test_plot_with_auto_and_lookup_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    report = run_bench(FakePair(), PROMPTS[:1], MIXED)
    path = tmp_path / "bench.png"
    write_plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_table_marks_the_recommended_drafter_and_k():
    from rich.console import Console

    from specdec_cli.bench.render import print_report

    report = run_bench(FakePair(), PROMPTS[:1], MIXED)
    console = Console(file=io.StringIO(), width=200)
    print_report(report, console)
    text = console.file.getvalue()
    rec = report.recommendation
    marked = [line for line in text.splitlines() if f" {rec.k}* " in line or f"│ {rec.k}*" in line]
    assert marked and all(rec.drafter in line for line in marked)
    assert "lookup" in text and "auto" in text and "mean k" in text
