"""tuning/record.py: `-k auto`'s record kept between calls. Written and read back; refused when
a model file, the machine or a setting changes (another file) or when it is corrupt or foreign
(one line, then rebuilt); and exactness with a record present: greedy output is the target's
own, and the first two tokens follow the exact law (fake models, fixed seeds)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from fakes import MarkovModel
from stat_checks import ALPHA, first_two_law, first_two_pvalue
from test_batch import V, prompts, tables
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.events import AUTO, Earned, Finished
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.tuning import record as records
from specdec_cli.tuning.cost_curve import CostCurve
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.tuning.record import Identity, TuningRecord, load_record, record_path, save_record

COSTS = CostCurve(draft_step=0.004, target_batch=(0.030, 0.031, 0.033, 0.036), first_pass=0.05)
EARNED = {"model": Earned((0.9, 0.7), (1.0, 0.9), 0.15), "lookup:2": Earned((0.2,), (3.0,), None)}


@pytest.fixture
def pair_files(tmp_path):
    draft, target = tmp_path / "draft.gguf", tmp_path / "target.gguf"
    draft.write_bytes(b"GGUF draft")
    target.write_bytes(b"GGUF target")
    return draft, target


def identity(draft, target, **changed) -> Identity:
    settings = {"threads": 2, "gpu_layers": 0, "draft_gpu_layers": 0, **changed}
    return Identity.of(draft, target, **settings)


def test_a_record_is_written_and_read_back(tmp_path, pair_files):
    me = identity(*pair_files)
    assert load_record(tmp_path / "tuning", me) == (TuningRecord(), None)  # the first call: nothing yet
    save_record(tmp_path / "tuning", me, TuningRecord(COSTS, dict(EARNED), 3))
    record, note = load_record(tmp_path / "tuning", me)
    assert note is None and record.calls == 3 and record.costs == COSTS
    assert record.earned == EARNED


def test_a_record_without_a_first_pass_cost_reads_as_not_measured(tmp_path, pair_files):
    """A record kept before first passes were (or where none was timed: no "first_pass") reads
    with first_pass None, the rest as written."""
    me = identity(*pair_files)
    save_record(tmp_path, me, TuningRecord(COSTS, {}, 1))
    path = record_path(tmp_path, me)
    path.write_text(path.read_text().replace(',"first_pass":0.05', ""))
    assert load_record(tmp_path, me) == (TuningRecord(dataclasses.replace(COSTS, first_pass=None), {}, 1), None)


def test_another_model_file_machine_or_setting_reads_no_record(tmp_path, pair_files, monkeypatch):
    draft, target = pair_files
    save_record(tmp_path, identity(draft, target), TuningRecord(COSTS, dict(EARNED), 1))
    assert load_record(tmp_path, identity(draft, target))[0].calls == 1
    assert load_record(tmp_path, identity(draft, target, threads=4)) == (TuningRecord(), None)
    assert load_record(tmp_path, identity(draft, target, gpu_layers=99)) == (TuningRecord(), None)
    assert load_record(tmp_path, identity(draft, target, rpc=("127.0.0.1:50052",))) == (TuningRecord(), None)
    monkeypatch.setattr(records, "cpu_name", lambda: "another CPU")
    assert load_record(tmp_path, identity(draft, target)) == (TuningRecord(), None)
    monkeypatch.undo()
    target.write_bytes(b"GGUF target, requantized")  # the model changed: its size and time
    assert load_record(tmp_path, identity(draft, target)) == (TuningRecord(), None)


@pytest.mark.parametrize(
    "mangle, says",
    [
        (lambda text: text[: len(text) // 2], "is not valid JSON (truncated?)"),
        (lambda text: json.dumps({"format": "something else"}), "is not a specdec tuning record"),
        (lambda text: text.replace('"version":1', '"version":99'), "is of version 99, not 1"),
        (lambda text: text.replace('"trials":[1.0,0.9]', '"trials":[1.0,-5]'), "holds a malformed record for drafter 'model'"),
        (lambda text: text.replace('"target_batch":[0.03', '"target_batch":["x"'), "holds a malformed cost curve"),
        (lambda text: text.replace('"first_pass":0.05', '"first_pass":true'), "holds a malformed cost curve"),
    ],
    ids=["truncated", "foreign", "version", "earned", "costs", "first pass"],
)
def test_a_corrupt_or_foreign_record_is_refused_in_one_line_and_rebuilt(tmp_path, pair_files, mangle, says):
    me = identity(*pair_files)
    save_record(tmp_path, me, TuningRecord(COSTS, dict(EARNED), 1))
    path = record_path(tmp_path, me)
    path.write_text(mangle(path.read_text()))
    record, note = load_record(tmp_path, me)
    assert record == TuningRecord() and note == f"tuning record {path} {says}; starting afresh" and "\n" not in note
    save_record(tmp_path, me, TuningRecord(COSTS, {}, 1))  # the next save rebuilds it
    assert load_record(tmp_path, me) == (TuningRecord(COSTS, {}, 1), None)


def test_a_record_written_for_another_identity_under_this_name_is_refused(tmp_path, pair_files):
    me = identity(*pair_files)
    save_record(tmp_path, identity(*pair_files, threads=8), TuningRecord(COSTS, {}, 1))
    os.replace(record_path(tmp_path, identity(*pair_files, threads=8)), record_path(tmp_path, me))
    record, note = load_record(tmp_path, me)
    assert record == TuningRecord() and note.endswith("was written for other models, another machine or other settings; starting afresh")


def test_the_option_and_the_variable_turn_it_off(monkeypatch):
    monkeypatch.delenv(records.DISABLE_VARIABLE, raising=False)
    assert records.enabled() and not records.enabled(option_off=True)
    monkeypatch.setenv(records.DISABLE_VARIABLE, "1")
    assert not records.enabled()
    monkeypatch.setenv(records.DISABLE_VARIABLE, "0")
    assert records.enabled()


def engine(record: TuningRecord) -> Engine:
    t, d = tables()
    return Engine(MarkovModel(t), ModelDrafter(MarkovModel(d)), vocab_limit=V, earned=record.earned)


def test_greedy_output_is_the_targets_own_with_a_record_present():
    """A record that says the draft model is nearly always right (so auto drafts long from the
    first round) and one that says it is always wrong: the same greedy tokens as target-only."""
    t, _ = tables()
    config = GenerationConfig(max_tokens=40, sampling=GREEDY)
    for earned in ({"model": Earned((0.99,) * 8, (1.0,) * 8, 0.1)}, {"model": Earned((0.0,) * 8, (1.0,) * 8, 0.1)}):
        for p in prompts(3):
            alone = [e for e in Engine(MarkovModel(t), None, vocab_limit=V).generate(p, config) if isinstance(e, Finished)][0].tokens
            record = TuningRecord(COSTS, dict(earned), 5)
            got = [e for e in engine(record).generate(p, config, draft_policy(AUTO, costs=record.costs)) if isinstance(e, Finished)][0].tokens
            assert got == alone


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_first_two_law_holds_with_a_record_present(temperature):
    """N = 2,000 two-token generations at fixed seeds, each starting its policy from the record
    the generations before it wrote back (as calls do): the first two tokens against the exact
    law at ALPHA = 1e-4 (a false failure has probability at most 1e-4 per temperature)."""
    n = 2000
    t, _ = tables()
    params = SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0)
    prompt = prompts(1)[0]
    record = TuningRecord(COSTS, {"model": Earned((0.9,) * 4, (1.0,) * 4, 0.1)}, 1)
    outputs = []
    for seed in range(n):
        config = GenerationConfig(max_tokens=2, sampling=params, seed=seed)
        events = engine(record).generate(prompt, config, draft_policy(AUTO, costs=record.costs))
        outputs.append([e for e in events if isinstance(e, Finished)][0].tokens)
    law = first_two_law(lambda prefix: probabilities(t[(prompt + list(prefix))[-1]], params), n)
    assert first_two_pvalue(outputs, law) > ALPHA


def test_the_costs_a_call_keeps_are_the_policys_own():
    """AdaptivePolicy.costs: None before a round; after a generation drafted by the model, the
    curve the policy plans with and the draft model's step it measured."""
    policy = draft_policy(AUTO)
    assert policy.costs() is None
    list(engine(TuningRecord()).generate(prompts(1)[0], GenerationConfig(max_tokens=30, sampling=GREEDY), policy))
    costs = policy.costs()
    assert costs.target_batch == tuple(policy.curve()) and len(costs.target_batch) > 1
    assert costs.draft_step == policy.drafters["model"].draft_step.value > 0


def test_a_call_that_timed_no_first_pass_or_draft_step_keeps_the_records(tmp_path, pair_files):
    """cli/run.keep_tuning: where this call's policy has no estimate of the draft step or of a
    first pass's extra cost (None), the record's go on; where it has one, its own is kept."""
    from specdec_cli.cli.run import Tuning, keep_tuning

    class Policy:
        def __init__(self, costs):
            self._costs = costs

        def costs(self):
            return self._costs

    me = identity(*pair_files)
    tuning = Tuning(tmp_path, me, TuningRecord(COSTS, {}, 1))
    keep_tuning(tuning, Policy(CostCurve(draft_step=None, target_batch=(0.02, 0.021))), {})
    assert load_record(tmp_path, me)[0] == TuningRecord(CostCurve(0.004, (0.02, 0.021), first_pass=0.05), {}, 2)
    keep_tuning(tuning, Policy(CostCurve(draft_step=0.003, target_batch=(0.02, 0.021), first_pass=0.01)), {})
    assert load_record(tmp_path, me)[0].costs == CostCurve(0.003, (0.02, 0.021), first_pass=0.01)
