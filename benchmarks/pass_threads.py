"""Which thread runs a pass: the same passes from one thread, from threads taking turns, and handed to the compute thread.

    flock /tmp/llama.lock python3 benchmarks/pass_threads.py
    flock /tmp/llama.lock python3 benchmarks/pass_threads.py --target big.gguf --sequences 4 --repeats 3

Each way runs in a process of its own (a process's OpenMP pools outlive the passes that made
them), every other repeat in reverse order. In each, --sequences sequences are prefilled with 40
tokens, then --steps passes each add one token to every sequence (LlamaModel.decode_rows), run:

  - one thread:     every pass from the same thread (as `specdec run` decodes);
  - turns:          threads take turns, one pass each (as decoding/batch.py ran them before
                    compute_thread.py: whichever sequence's thread arrived last);
  - compute thread: the same threads take turns handing each pass to compute_thread.py's thread.

Reported: each way's median milliseconds per pass. The llama.cpp that llama-cpp-python builds
computes with OpenMP; "turns" is slow where the process then holds more OpenMP threads than the
machine has cores (decoding/compute_thread.py).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

WAYS = ("one thread", "turns", "compute thread")


def measure(way: str, target: Path, sequences: int, steps: int, threads: int) -> float:
    """This process: the median seconds of a pass run `way`."""
    import specdec_cli  # noqa: F401  before numpy: see specdec_cli/__init__.py
    from specdec_cli.decoding.compute_thread import run_on_compute_thread
    from specdec_cli.llama.model import LlamaModel

    with LlamaModel(target, n_ctx=256, n_threads=threads, role="target", n_seq=sequences) as model:
        prompt = list(range(100, 140))
        prefill = [(seq, 0, prompt, 1) for seq in range(sequences)]
        if way == "compute thread":
            run_on_compute_thread(lambda: model.decode_rows(prefill))
        else:
            model.decode_rows(prefill)
        seconds: list[float] = []

        def step(i: int) -> None:
            parts = [(seq, len(prompt) + i, [300 + i], 1) for seq in range(sequences)]
            start = time.perf_counter()
            if way == "compute thread":
                run_on_compute_thread(lambda: model.decode_rows(parts))
            else:
                model.decode_rows(parts)
            seconds.append(time.perf_counter() - start)

        if way == "one thread":
            for i in range(steps):
                step(i)
        else:  # a thread per sequence, each running every `sequences`-th pass, one at a time
            turn = threading.Condition()
            at = [0]

            def run(me: int) -> None:
                for i in range(me, steps, sequences):
                    with turn:
                        turn.wait_for(lambda: at[0] == i)
                    step(i)
                    with turn:
                        at[0] += 1
                        turn.notify_all()

            workers = [threading.Thread(target=run, args=(me,)) for me in range(sequences)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="GGUF (default: the built-in pair's target)")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp's threads")
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # the child process's one way
    args = parser.parse_args()
    if args.target is None:
        from specdec_cli.models.cache import builtin_pair

        args.target = builtin_pair()[1]
    if args.way:
        print(measure(args.way, args.target, args.sequences, args.steps, args.threads))
        return 0
    results: dict[str, list[float]] = {way: [] for way in WAYS}
    for repeat in range(args.repeats):
        for way in WAYS if repeat % 2 == 0 else reversed(WAYS):
            command = [sys.executable, __file__, "--way", way, "--target", str(args.target), "--sequences", str(args.sequences),
                       "--steps", str(args.steps), "--threads", str(args.threads)]  # fmt: skip
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[way].append(float(out.split()[-1]) * 1e3)
            print(f"repeat {repeat} {way:15}: {results[way][-1]:5.1f} ms per pass", flush=True)
    for way, ms in results.items():
        print(f"{way:15}: median {statistics.median(ms):5.1f} ms per pass of {args.sequences} rows ({', '.join(f'{m:.1f}' for m in ms)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
