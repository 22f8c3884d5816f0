"""The maths, pure numpy: the processed distributions p and q (sampling.py) and the accept/reject
rules over one target batch (speculative.py, after Leviathan et al. 2022, Chen et al. 2023 and
Sun et al. 2025). Every draw comes from a `np.random.Generator` the caller seeded.

Left out: any model (llama/), who drafts (drafting/), the loop (decoding/).
"""
