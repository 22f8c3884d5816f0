"""Can llama.cpp's sampler chain give us p and q as maths/filters.py defines them, and faster?

    flock /tmp/specdec-cpu.lock python3 benchmarks/backend_sampling.py
    flock /tmp/specdec-cpu.lock python3 benchmarks/backend_sampling.py --model ~/.cache/specdec/SmolLM2-135M-Instruct.F32.gguf

1. Without a model: random float32 logit rows at --vocab sizes; llama.cpp's CPU chain
   (top-k, top-p, min-p, temperature, then dist; llama_sampler_apply on a token array) against
   filters.distribution + draw.sample: microseconds per row and for k + 1 rows, the
   support each keeps and the largest probability difference on it.
2. With --model: backend sampling proper. The same chain is attached to sequence 0 through
   llama_context_params.samplers. One batch of k + 1 tokens asks for logits at every position
   (a verify batch): the script reports whether llama_decode accepts it, and llama.cpp's
   reason when it does not (the vendored llama.cpp allows one sampled output per sequence).
   Then the batch asks for the last position only (a draft step): the decode is timed with
   and without the chain (best of 5), and that row's llama_get_sampled_{probs,candidates}_ith
   are compared with filters.distribution of its logits from the chain-free context.
   --log shows llama.cpp's log.

An experiment, not part of the package: it imports llama_cpp itself (the package keeps that
to llama/model.py). Findings and figures: docs/benchmarks.md.

Produces docs/benchmarks.md, "Large vocabularies: the engine's own time": the paragraph on llama.cpp's backend sampling.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import llama_cpp  # before numpy: see specdec_cli/__init__.py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec_cli.maths.draw import sample  # noqa: E402
from specdec_cli.maths.filters import distribution  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402

LOG: list[str] = []  # llama.cpp's log lines (part 2 reports why a decode was refused)
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)


def chain(params: SamplingParams, seed: int = 1):
    sparams = llama_cpp.llama_sampler_chain_default_params()
    c = llama_cpp.llama_sampler_chain_init(sparams)
    llama_cpp.llama_sampler_chain_add(c, llama_cpp.llama_sampler_init_top_k(params.top_k))
    llama_cpp.llama_sampler_chain_add(c, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    llama_cpp.llama_sampler_chain_add(c, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    llama_cpp.llama_sampler_chain_add(c, llama_cpp.llama_sampler_init_temp(params.temperature))
    llama_cpp.llama_sampler_chain_add(c, llama_cpp.llama_sampler_init_dist(seed))
    return c


def cpu_chain_row(smpl, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Apply the chain to one row: (kept ids, their probabilities, seconds inside llama.cpp)."""
    data = np.empty(len(logits), dtype=TOKEN_DATA)
    data["id"] = np.arange(len(logits))
    data["logit"] = logits
    data["p"] = 0.0
    arr = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=len(logits), selected=-1, sorted=False
    )
    t0 = time.perf_counter()
    llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
    seconds = time.perf_counter() - t0
    kept = data[: arr.size]
    return kept["id"].copy(), kept["p"].astype(np.float64), seconds


def compare(ids: np.ndarray, probs: np.ndarray, logits: np.ndarray, params: SamplingParams) -> tuple[bool, float]:
    ours = distribution(logits, params).dense()
    theirs = np.zeros(len(logits))
    theirs[ids] = probs
    same_support = bool(((ours > 0) == (theirs > 0)).all())
    return same_support, float(np.abs(ours - theirs).max())


def part1(vocabs: list[int], k: int, reps: int) -> None:
    rng = np.random.default_rng(0)
    settings = {"T=0.8 defaults": SamplingParams(), "T=1 no filter": SamplingParams(1.0, 0, 1.0, 0.0)}
    print("| vocabulary | setting | llama.cpp chain us/row | numpy us/row | llama.cpp k+1 rows ms | numpy k+1 rows ms | same support | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for n in vocabs:
        rows = (rng.standard_normal((reps, n)) * 2).astype(np.float32)
        rows[np.arange(reps), rng.integers(n, size=reps)] += 6
        for name, params in settings.items():
            smpl = chain(params)
            theirs, ours, same, diff = [], [], 0, 0.0
            for row in rows:
                ids, probs, seconds = cpu_chain_row(smpl, row)
                theirs.append(seconds)
                gen = np.random.default_rng(1)
                t0 = time.perf_counter()
                sample(distribution(row, params), gen)
                ours.append(time.perf_counter() - t0)
                s, d = compare(ids, probs, row, params)
                same += s
                diff = max(diff, d)
            llama_cpp.llama_sampler_free(smpl)
            t, o = np.median(theirs), np.median(ours)
            print(f"| {n:,} | {name} | {1e6 * t:.0f} | {1e6 * o:.0f} | {1e3 * t * (k + 1):.2f} | {1e3 * o * (k + 1):.2f} | {same}/{reps} | {diff:.1e} |", flush=True)


def part2(model_path: str, k: int, params: SamplingParams, repack: bool = False) -> None:
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    if hasattr(mparams, "use_extra_bufts"):
        mparams.use_extra_bufts = repack  # off by default: the AMX repack crash (issue 9)
    mparams.n_gpu_layers = 999 if llama_cpp.llama_supports_gpu_offload() else 0  # every layer on the GPU if there is one
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), mparams)
    assert model, "model failed to load"
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    smpl = chain(params)

    def context(with_sampler: bool):
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_threads, cparams.n_threads_batch = 512, 64, 2, 2
        if with_sampler:
            configs = (llama_cpp.llama_sampler_seq_config * 1)()
            configs[0].seq_id = 0
            configs[0].sampler = ctypes.cast(smpl, ctypes.c_void_p)
            cparams.samplers = configs
            cparams.n_samplers = 1
            context.keep = configs
        return llama_cpp.llama_init_from_model(model, cparams)

    tokens = [t % n_vocab for t in (1, 504, 3458, 282, 253, 1789, 2593, 28, 1230, 314, 216, 17, 99, 7, 1000, 42, 5)[: k + 1]]

    def decode(ctx, every_row: bool) -> tuple[int, float]:
        """Decode the tokens in sequence 0 from an empty cache, with logits for every row (a
        verify batch) or for the last one only (a draft step); (llama_decode's code, seconds)."""
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if every_row or i == len(tokens) - 1 else 0
        batch.n_tokens = len(tokens)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(ctx, batch)
        seconds = time.perf_counter() - t0
        llama_cpp.llama_batch_free(batch)
        return rc, seconds

    def best_of(ctx, every_row: bool, times: int = 5) -> float:
        runs = [decode(ctx, every_row) for _ in range(times)]
        assert all(rc == 0 for rc, _ in runs), f"llama_decode returned {runs[0][0]}"
        return min(seconds for _, seconds in runs)

    plain = context(False)
    plain_all, plain_last = best_of(plain, True), best_of(plain, False)
    decode(plain, True)
    logits = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(plain, i), shape=(n_vocab,)).copy() for i in range(len(tokens))]
    where = "every layer on the GPU" if mparams.n_gpu_layers else "CPU"
    print(f"\nbackend sampling, {Path(model_path).name} ({where}), vocabulary {n_vocab:,}, one batch of {len(tokens)} tokens in sequence 0", flush=True)
    sampled = context(True)
    if not sampled:
        print("llama_init_from_model refused the sampler configuration")
        return
    seen = len(LOG)
    rc, _ = decode(sampled, True)
    reason = " ".join(line.strip() for line in LOG[seen:] if line.strip())
    print(f"logits for every row (a verify batch), chain attached: llama_decode returned {rc}"
          + (f"; llama.cpp said: {reason}" if rc != 0 else ""), flush=True)
    sampled_last = best_of(sampled, False)
    print(f"logits for the last row only (a draft step): decode without the chain {1e3 * plain_last:.1f} ms, "
          f"with it {1e3 * sampled_last:.1f} ms (best of 5; every row, no chain: {1e3 * plain_all:.1f} ms)")
    i = len(tokens) - 1  # the last token's output, the only one
    n_probs = llama_cpp.llama_get_sampled_probs_count_ith(sampled, i)
    n_cand = llama_cpp.llama_get_sampled_candidates_count_ith(sampled, i)
    token = llama_cpp.llama_get_sampled_token_ith(sampled, i)
    line = f"last row: sampled token {token}, {n_probs} probabilities, {n_cand} candidates"
    if n_probs and n_cand == n_probs:
        probs = np.ctypeslib.as_array(llama_cpp.llama_get_sampled_probs_ith(sampled, i), shape=(n_probs,)).astype(np.float64)
        cand = np.ctypeslib.as_array(llama_cpp.llama_get_sampled_candidates_ith(sampled, i), shape=(n_cand,)).copy()
        same, diff = compare(cand[probs > 0], probs[probs > 0], logits[i], params)
        line += f"; same support as ours: {same}, max abs diff {diff:.1e}"
    raw = llama_cpp.llama_get_logits_ith(sampled, i)
    line += "; raw logits still readable" if raw else "; raw logits not available"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[49_152, 151_936, 262_144])
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--model", help="a GGUF file for part 2 (backend sampling on a real context)")
    parser.add_argument("--log", action="store_true", help="llama.cpp's log on stderr")
    parser.add_argument("--repack", action=argparse.BooleanOptionalAction, default=False,
                        help="load part 2's model with repacking (llama.cpp's extra buffer types; default off)")
    args = parser.parse_args()
    # Keep the callback object alive for as long as llama.cpp may log: a temporary one is freed at
    # once, and llama.cpp's next log line (loading the model in part 2) calls freed memory.
    def keep(level, text, data) -> None:
        LOG.append(text.decode(errors="replace"))
        if args.log:
            sys.stderr.write(LOG[-1])

    log = llama_cpp.llama_log_callback(keep)
    llama_cpp.llama_log_set(log, ctypes.c_void_p(0))
    print(f"llama-cpp-python {llama_cpp.__version__}; k = {args.k}; medians of {args.reps} random rows\n")
    part1(args.vocab, args.k, args.reps)
    if args.model:
        part2(args.model, args.k, SamplingParams(), args.repack)


if __name__ == "__main__":
    main()
