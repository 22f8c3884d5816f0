"""How many tokens to draft and which rule verifies, from measured costs: the draft-length policy
(policy.py) and its priors by proposer (proposers.py), the verify rule's choice (rule_choice.py),
what they learn (estimates.py), the timed cost curve (cost_curve.py), Theorem 3.8's speed-up and
the draft length that maximises it (speedup.py), and whether a batch of several sequences drafts
at all, measured (switch.py).

Left out: the loop itself (decoding/engine.py), which is handed a policy by its caller.
"""
