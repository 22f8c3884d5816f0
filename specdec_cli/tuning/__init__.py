"""How many tokens to draft and which rule verifies, from measured costs, one job a module:

- policy.py: the draft-length policy of a generation, a fixed k or `auto` (`draft_policy`);
- adaptive.py: `auto`, the drafter and k with the most expected tokens per second;
- carried.py: the record a call starts each proposer from, earned in earlier calls;
- chain.py: calls one after another on one pair, each policy going on from the last;
- proposers.py: the priors by proposer; estimates.py: what `auto` learns from rounds;
- cost_curve.py: the timed cost curve; speedup.py: Theorem 3.8's speed-up and its best k;
- pass_cost.py: the cost line of a shared model's passes; switch.py: whether a batch of several
  sequences drafts at all, measured;
- rule_choice.py: which verify rule (`--verify auto`).

Left out: the loop itself (decoding/engine.py), which is handed a policy by its caller.
"""
