"""Who proposes draft tokens, behind one small interface (interface.py); never verification.

- interface.py: `Proposal`, `Proposer`, `Drafter`;
- model.py: the draft model;
- ngram.py: the n-gram table that lookup and the memory both search;
- lookup.py: prompt lookup, in the context and in the memory;
- memory.py: the drafting memory across calls, and its cache file;
- combined.py: model+lookup; cascade.py: the draft model checking lookup's guess;
- vocab_map.py, cross_vocab.py: a draft model of another vocabulary.

Left out: the model interface and the rule that brings a KV cache to a context (causal_model.py, shared
with the engine's target), the choice of k and of the drafter (tuning/policy.py), verification (maths/speculative.py).
"""
