"""The maths, pure numpy: the processed distributions p and q and the accept/reject rules over one
target batch (after Leviathan et al. 2022, Chen et al. 2023 and Sun et al. 2025), one job a module:

- sampling.py: the settings (`SamplingParams`: temperature, top-k, top-p, min-p);
- distribution.py: the type of p and q (`Distribution`: a support and its probabilities);
- filters.py: a logits row to p or q (greedy, the filters, temperature; logprobs);
- dense.py: the whole-vocabulary softmax row, and the float32 bound that lets it be cheap;
- draw.py: one token drawn from a distribution;
- residual.py: normalise(max(0, p - q)), what a rejection draws from;
- speculative.py: the accept/reject rules (`verify`, `verify_block`);
- masking.py: a constraint's token mask applied to logits rows.

Every draw comes from a `np.random.Generator` the caller seeded.

Left out: any model (llama/), who drafts (drafting/), the loop (decoding/).
"""
