"""The drafting switch (tuning/switch.py): per batch size, drafting or not, by measured tokens per second."""

from __future__ import annotations

import math

import pytest

from specdec_cli.tuning.switch import MARGIN, PROBE_SHARE, DraftingSwitch

PASS = 0.05  # seconds per target pass in these scripted batches


def run(
    switch: DraftingSwitch, n: int, passes: int, rate: dict[bool, float], start: float = 0.0, speed=lambda i: 1.0, begun=None
) -> tuple[list[bool], float]:
    """n sequences, each choosing a round before every target pass and crediting what it gave
    afterwards (rate[mode] tokens per second of the batch times the machine's speed(pass index),
    split evenly); returns the mode each epoch ran in, as the sequences saw it, and the time at the
    end. `begun`, a list, gets the time each epoch began."""
    now, modes, seen = start, [], None
    for i in range(passes):
        chosen = [switch.drafting(n) for _ in range(n)]
        if chosen[0][1] is not None and chosen[0][1] != seen:
            seen = chosen[0][1]
            modes.append(chosen[0][0])
            if begun is not None:
                begun.append(now)
        now += PASS
        switch.after_pass(n, True, now)
        for seq, (mode, epoch) in enumerate(chosen):
            switch.credit(epoch, rate[mode] * speed(i) * PASS / n, seq)
    return modes, now


def test_the_switch_explores_then_keeps_the_faster_mode_and_probes_the_other():
    """Drafting gives 100 tokens/s, not drafting 120: epochs of 0.3 s (6 passes) alternate four
    times, then stay off; the 8th epoch after exploring drafts again, and the 8th after that; each
    probe since has left the choice as it was (plain ahead by 20 %, clearly), so the next ones wait
    16, then 32 epochs."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 2, 6 * 80, {True: 100.0, False: 120.0})
    assert modes[:4] == [True, False, True, False]
    assert modes[4:11] == [False] * 7 and modes[11] is True  # the 8th epoch after exploring
    assert modes[12:19] == [False] * 7 and modes[19] is True
    assert modes[20:35] == [False] * 15 and modes[35] is True  # the 16th after
    assert modes[36:67] == [False] * 31 and modes[67] is True  # the 32nd after
    assert sum(modes[4:]) == 4  # only the probes drafted (the next one waits 64 epochs)


def test_where_drafting_is_ahead_but_close_the_probes_stay_every_8th_epoch():
    """Drafting ahead by 8 % (more than MARGIN, less than CLEAR_GAIN): each probe of not drafting
    leaves the choice as it was, but the evidence is thin, so the next one still comes 8 epochs later."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 2, 6 * 60, {True: 108.0, False: 100.0})
    probes = [i for i, mode in enumerate(modes) if not mode][2:]
    assert len(probes) >= 5 and all(b - a == 8 for a, b in zip(probes, probes[1:])), probes


def test_where_not_drafting_is_ahead_even_closely_each_probe_into_drafting_doubles_the_wait():
    """Not drafting ahead by 5 %: a probe into drafting costs its catch-up, so from the second
    probe on each one that leaves the choice as it was waits twice as long: 8, 16, 32 epochs."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 2, 6 * 80, {True: 100.0, False: 105.0})
    probes = [i for i, mode in enumerate(modes) if mode][2:]
    assert [b - a for a, b in zip(probes, probes[1:])][:3] == [8, 16, 32], probes


def test_drafting_ahead_by_less_than_the_margin_is_not_chosen():
    """Drafting ahead by 3 % (MARGIN is 5 %): about what the pairs read where both ways are alike,
    so it does not draft, and its probes into drafting thin out (8, 16, 32 epochs) as where not
    drafting is ahead; at 6 % ahead it drafts after exploring."""
    assert math.log(1.03) < MARGIN < math.log(1.06)
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 2, 6 * 80, {True: 103.0, False: 100.0})
    assert modes[:4] == [True, False, True, False] and modes[4:11] == [False] * 7
    probes = [i for i, mode in enumerate(modes) if mode][2:]
    assert [b - a for a, b in zip(probes, probes[1:])][:3] == [8, 16, 32], probes
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 2, 6 * 20, {True: 106.0, False: 100.0})
    assert modes[:4] == [True, False, True, False] and all(modes[4:11])


def test_a_probe_that_turns_the_choice_brings_the_probes_back_to_every_8th_epoch():
    """Not drafting wins for 60 epochs (probes every 8, 8, 16, 32 epochs), then the text changes
    and drafting gives twice as much: a probe finds it, and from then on drafting runs with a
    probe of not drafting 8 epochs after the one that turned it."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    before, now = run(switch, 2, 6 * 60, {True: 100.0, False: 120.0})
    assert [i for i, mode in enumerate(before) if mode][2:] == [11, 19, 35]
    after, _ = run(switch, 2, 6 * 60, {True: 240.0, False: 120.0}, start=now)
    turned = len(before) + after.index(True)  # the probe (32 epochs after the last) that found drafting ahead
    modes = before + after
    plain = [i for i in range(turned + 4, len(modes)) if not modes[i]]  # once its pairs are recorded
    assert len(plain) <= 4, modes[turned:]  # drafting runs, but for the probes
    assert plain[0] - turned <= 10, modes[turned:]  # probed again soon, not 64 epochs later


def test_a_machine_that_slows_down_does_not_fool_it():
    """Drafting gives 1.25 times what not drafting does, while the machine's speed falls by 3 % an
    epoch (a shared host; to 0.3 over the run): the pairs of adjacent epochs still see drafting
    ahead, where the ways' own rates, the plain one taken at the probes, long before, would not."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    passes = 6 * 40
    modes, _ = run(switch, 2, passes, {True: 100.0, False: 80.0}, speed=lambda i: 0.97 ** (i / 6))
    assert modes[:4] == [True, False, True, False]
    assert sum(modes[4:]) >= len(modes[4:]) - 6  # after exploring, only the probes do not draft
    assert switch.report()[2]["drafting_over_plain"] > 1.1


def test_where_drafting_is_faster_it_stays_on():
    """Drafting gives 180 tokens/s, not drafting 120: after exploring it drafts, and the plain
    epochs after exploring are probes only, fewer than one in 8 (the two plain exploring epochs lost
    a third of their 0.3 s each, 0.2 s, so the first probe waits for 4 s of epochs)."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    modes, _ = run(switch, 3, 6 * 60, {True: 180.0, False: 120.0})
    assert modes[:4] == [True, False, True, False]
    assert all(modes[4:12]) and 0 < modes[4:].count(False) <= len(modes[4:]) // 8


def test_each_batch_size_learns_apart_and_alone_always_drafts():
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2)
    _, now = run(switch, 2, 6 * 12, {True: 120.0, False: 80.0})
    modes, _ = run(switch, 4, 6 * 12, {True: 160.0, False: 240.0}, start=now)
    assert modes[:4] == [True, False, True, False] and not any(modes[4:10])
    assert switch.drafting(2) == (True, None)  # what an epoch at N = 2 would do: its own record
    assert switch.drafting(1) == (True, None)
    switch.after_pass(1, True, now + 10.0)
    assert switch.epoch is None  # alone: no epochs


def test_tokens_count_for_the_epoch_their_round_was_chosen_in():
    """A round chosen in epoch 1 and counted after epoch 1 ended still counts for epoch 1."""
    switch = DraftingSwitch(epoch_seconds=0.1)
    switch.after_pass(2, True, 0.0)  # epoch 1 starts
    mode, first = switch.drafting(2)
    assert mode is True and first == 1
    switch.after_pass(2, True, 0.2)  # epoch 1 ends, epoch 2 starts
    switch.credit(first, 30, "a")
    switch.credit(first, 10, "b")
    assert switch.drafting(2)[1] == 2
    switch.after_pass(2, True, 0.25)  # epoch 1 is recorded
    assert switch.rates[2, True].weight == 1.0 and switch.rates[2, True].value == 40 / 0.2  # one epoch, whole


def test_an_epoch_that_a_join_or_leave_cuts_short_is_dropped():
    switch = DraftingSwitch(epoch_seconds=0.1)
    switch.after_pass(2, True, 0.0)
    _, epoch = switch.drafting(2)
    switch.credit(epoch, 20, "a")
    switch.credit(epoch, 20, "b")
    switch.after_pass(3, False, 0.04)  # a third joined (its prompt in this pass), before half an epoch
    assert switch.epoch is None and switch.drafting(3) == (True, None)
    switch.after_pass(3, True, 0.2)  # a new epoch at N = 3 starts; nothing was recorded
    switch.after_pass(3, True, 0.21)
    assert switch.rates[2, True].value is None  # nothing recorded
    assert switch.tried[2, True] == 0


def test_an_epoch_that_a_join_or_leave_ends_is_dropped_however_long_and_its_neighbours_pair_across_it():
    """Answers end, and the next prompts begin, at moments that have nothing to do with the way.
    Here the drafting epoch (4 sequences, 0.3 s, 60 tokens) is followed by a plain one that a
    leave ends after 0.2 s: it is dropped, not counted at N = 4; 0.05 s at N = 3 count nowhere;
    the next epoch at N = 4, plain, 0.25 s after the drafting one ended, pairs with it."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=1)
    switch.after_pass(4, True, 0.0)
    _, first = switch.drafting(4)
    assert switch.epoch.drafting is True
    for seq in "abcd":
        switch.credit(first, 15, seq)
    switch.after_pass(4, True, 0.3)  # epoch 1 ends, epoch 2 (plain, exploring) starts
    mode, second = switch.drafting(4)
    assert mode is False
    for seq in "abcd":
        switch.credit(second, 7.5, seq)
    switch.turn()  # "d" left
    switch.after_pass(3, True, 0.5)  # epoch 2 ends at 0.2 s of its 0.3: dropped
    assert switch.rates[4, True].value == 60 / 0.3
    switch.after_pass(3, True, 0.55)
    assert switch.tried[4, False] == 0 and switch.rates[4, False].value is None
    assert switch.tried[3, True] + switch.tried[3, False] == 0  # 0.05 s at N = 3: nothing ended there
    switch.turn()  # "e" joined
    switch.after_pass(4, True, 0.55)  # an epoch at N = 4 begins, 0.25 s after epoch 1 ended
    mode, third = switch.drafting(4)
    assert mode is False  # plain is still to be explored
    for seq in "abce":
        switch.credit(third, 10, seq)
    switch.after_pass(4, True, 0.95)
    switch.after_pass(4, True, 1.0)  # recorded, and paired with epoch 1 across the gap
    assert switch.rates[4, False].value == pytest.approx(40 / 0.4)
    assert switch.gain[4].value == pytest.approx(math.log((60 / 0.3) / (40 / 0.4)))


def test_an_answer_that_ends_as_the_next_request_joins_ends_the_epoch_at_one_n():
    """An answer ends and its client's next request joins between two passes (as at 4 clients
    with answers of one length): N stays 2 at every pass, but the time between (the end, the
    next prompt's prefill) is no way's. The epoch (0.2 s of its 0.3 when "b" left and "c"
    joined) ends at the next pass and is dropped; the new one begins at the first pass after
    that which holds both."""
    switch = DraftingSwitch(epoch_seconds=0.3)
    switch.after_pass(2, True, 0.0)
    _, first = switch.drafting(2)
    switch.credit(first, 10, "a")
    switch.credit(first, 10, "b")
    switch.turn()  # "b" left
    switch.turn()  # "c" joined
    switch.after_pass(2, False, 0.2)  # "c"'s prompt alone
    assert switch.epoch is None and switch.tried[2, True] == 0
    switch.after_pass(2, True, 0.25)  # holds both: the next epoch begins
    assert switch.epoch is not None and switch.epoch.start == 0.25
    switch.after_pass(2, True, 0.6)
    assert switch.rates[2, True].value is None


def test_what_the_passes_spent_on_prompts_is_no_ways_time():
    """An epoch of 0.4 s, 0.1 s of it a joiner's prompt chunks beside the others' rows: it lasts
    until 0.3 s of generating, and its rate is its tokens over those 0.3 s."""
    switch = DraftingSwitch(epoch_seconds=0.3)
    switch.after_pass(2, True, 0.0)
    _, first = switch.drafting(2)
    switch.set_aside(0.1)
    switch.after_pass(2, True, 0.2)
    assert switch.epoch.id == first  # 0.1 s of generating: not over
    switch.after_pass(2, True, 0.4)
    assert switch.epoch.id != first
    switch.credit(first, 15, "a")
    switch.credit(first, 15, "b")
    switch.after_pass(2, True, 0.45)  # recorded
    assert switch.rates[2, True].value == pytest.approx(30 / 0.3)


def test_a_catch_up_is_set_aside_and_counts_against_the_probes_share_where_its_epoch_lost():
    """The first epoch of drafting (exploring) spends 0.2 s catching the draft model up: its rate
    is its tokens over its 0.3 s of generating (100 tokens/s), not over 0.5 s. The plain epoch
    after it gives 120 tokens/s: the trying epoch lost 0.3 x (1 - 100/120) = 0.05 s, and its
    0.2 s of catch-up with it."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=1)
    switch.after_pass(2, True, 0.0)
    mode, first = switch.drafting(2)
    assert mode is True and switch.epoch.trying
    switch.catch_up(0.2)
    switch.after_pass(2, True, 0.3)
    assert switch.epoch.id == first  # 0.1 s of generating so far
    switch.after_pass(2, True, 0.5)
    for seq in "ab":
        switch.credit(first, 15, seq)
    _, second = switch.drafting(2)
    for seq in "ab":
        switch.credit(second, 18, seq)
    switch.after_pass(2, True, 0.8)
    switch.after_pass(2, True, 0.85)
    assert switch.rates[2, True].value == pytest.approx(100.0)
    assert switch.rates[2, False].value == pytest.approx(120.0)
    assert switch._tried_cost == pytest.approx(0.3 * (1 - 100 / 120) + 0.2)


def test_an_epoch_open_while_no_pass_ran_is_dropped():
    """The last two requests of a load end in one pass, and the next load starts with three
    sequences 5 s later: the epoch open at N = 2 measured nothing and is not recorded."""
    switch = DraftingSwitch(epoch_seconds=0.3)
    switch.after_pass(2, True, 0.0)
    _, epoch = switch.drafting(2)
    switch.credit(epoch, 2, "a")
    switch.credit(epoch, 2, "b")
    switch.after_pass(3, True, 5.0)
    switch.after_pass(3, True, 5.1)
    assert switch.tried[2, True] == 0 and switch.rates[2, True].value is None
    assert switch.epoch is not None and switch.epoch.n == 3  # the new load's first epoch
    _, epoch = switch.drafting(3)
    for seq in "abc":
        switch.credit(epoch, 2, seq)
    switch.after_pass(3, True, 9.0)  # and a load of three again, 4 s later
    switch.after_pass(3, True, 9.1)
    assert switch.tried[3, True] + switch.tried[3, False] == 0


def test_an_epoch_counts_only_when_every_sequence_counted_its_rounds():
    """A sequence with a fixed k (no BatchedPolicy) credits nothing: its epochs measure no mode."""
    switch = DraftingSwitch(epoch_seconds=0.1)
    switch.after_pass(2, True, 0.0)
    _, epoch = switch.drafting(2)
    switch.credit(epoch, 20, "a")  # "b" never credits
    switch.after_pass(2, True, 0.2)
    switch.after_pass(2, True, 0.25)
    assert switch.rates[2, True].value is None  # nothing recorded
    assert switch.tried[2, True] == 1  # tried all the same: exploring goes on to the other mode
    assert switch.drafting(2) == (False, 2)


def test_drafting_saves_per_token_what_was_paired_at_the_batch_size_or_at_most_what_it_saved_below():
    """Plain 30 tokens/s at 2 sequences, drafting paired 1.6x ahead: 12.5 ms a token. At 4, before
    anything was paired there, the bound from 2; once paired (plain 40 tokens/s, drafting 0.8x):
    its own (-6.25 ms), but in an epoch that tries drafting at 4 the bound again. Nothing paired
    anywhere: None."""
    switch = DraftingSwitch(epoch_seconds=0.1)
    assert switch.saving_per_token(2) is None
    switch.rates[2, False].add(30.0)
    switch.gain[2].add(math.log(1.6))
    assert switch.saving_per_token(2) == pytest.approx(0.0125)
    assert switch.saving_per_token(4) == pytest.approx(0.0125)
    switch.rates[4, False].add(40.0)
    switch.gain[4].add(math.log(0.8))
    assert switch.saving_per_token(4) == pytest.approx(-0.00625)
    switch.tried[4, True] = switch.tried[4, False] = 1
    switch._chosen[4] = 7  # the next epoch at 4 is the 8th: a probe of drafting
    switch.after_pass(4, True, 0.0)
    assert switch.epoch.drafting and switch.epoch.trying
    assert switch.saving_per_token(4) == pytest.approx(0.0125)


def test_the_report_gives_each_batch_sizes_rates_and_way():
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2)
    run(switch, 2, 6 * 6, {True: 80.0, False: 120.0})
    assert switch.report() == {
        2: {"drafting_tokens_per_s": 80.0, "plain_tokens_per_s": 120.0, "drafting_over_plain": 0.667, "epochs": {"drafting": 2, "plain": 3},
            "drafts_now": False}  # fmt: skip
    }


def test_a_larger_batch_starts_without_drafting_where_a_smaller_one_lost():
    """Drafting lost at N = 2: N = 3 runs plain from its first epoch, drafting only in its probes,
    and learns from those that drafting pays there after all (an unlikely machine, but the
    probes must be able to tell)."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=4)
    _, now = run(switch, 2, 6 * 12, {True: 100.0, False: 120.0})
    assert switch.report()[2]["drafting_over_plain"] < 1
    modes, _ = run(switch, 3, 6 * 30, {True: 240.0, False: 120.0}, start=now)
    assert modes[:3] == [False, False, False] and modes[3] is True  # the 4th epoch probes
    assert sum(modes[-8:]) >= 6  # the probes' pairs turned it on (every 4th epoch now probes not drafting)


def test_alone_for_a_moment_between_requests_it_does_not_draft_yet():
    switch = DraftingSwitch(epoch_seconds=0.3)
    assert switch.drafting(1, now=0.0) == (True, None)  # alone from the start
    switch.after_pass(2, True, 5.0)
    assert switch.drafting(1, now=5.1) == (False, None)  # the other request just ended
    assert switch.drafting(1, now=5.31) == (True, None)  # alone for an epoch's length


def test_probes_wait_while_trying_has_cost_more_than_its_share_of_the_time():
    """Drafting gives 20 tokens/s, not drafting 120 (a probe that first catches the draft model up
    with all it missed): the two exploring epochs that drafted lost 0.3 s * (1 - 20/120) each,
    0.5 s, so no probe begins before the epochs so far last 0.5 / PROBE_SHARE (17 s), where 8
    epochs after exploring (the 12th, at 3.3 s) would have been the first."""
    switch = DraftingSwitch(epoch_seconds=0.3, explore=2, probe_every=8)
    begun: list[float] = []
    modes, _ = run(switch, 2, 6 * 120, {True: 20.0, False: 120.0}, begun=begun)
    assert modes[:4] == [True, False, True, False]
    probes = [i for i, mode in enumerate(modes) if mode][2:]
    assert probes, modes
    first = probes[0]
    assert begun[first] - begun[0] >= 0.5 / PROBE_SHARE - 1e-9  # the epochs before it lasted that long
    assert begun[first - 1] - begun[0] < 0.5 / PROBE_SHARE + 0.3  # it was not held back longer than an epoch
    # each probe adds its own 0.25 s: the next waits until 0.75 s is within the share
    assert len(probes) >= 2 and begun[probes[1]] - begun[0] >= 0.75 / PROBE_SHARE - 1e-9
