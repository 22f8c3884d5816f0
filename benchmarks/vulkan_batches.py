"""Batches of 1 to 16 tokens, three of each, decoded one after another after a short prompt:
the sequence that crashes Mesa 22.3.6's lavapipe under llama.cpp's fused Vulkan shaders (issue 28).

    GGML_VK_VISIBLE_DEVICES=0 ~/.cache/specdec/vulkan-0.3.36/bin/python benchmarks/vulkan_batches.py MODEL.gguf
    n=1 rep=0 ok 0.60 s
    ...

Each line is printed once its decode returned, so a crash's last line says how far it got.
On Debian 12's lavapipe with the built-in F32 target it segfaults (exit 139) at the first batch
of 4 (of 5 with LP_NUM_THREADS=1), in a thread of libvulkan_lvp.so; with
GGML_VK_DISABLE_FUSION=1 all 48 decodes pass. Run it with the Vulkan build that
benchmarks/vulkan_check.sh makes.
Left out: timing (lavapipe's speed says nothing of a GPU's); the first decode of each size
includes its shaders' compilation.

Produces docs/benchmarks.md, "The GPU machine": the lavapipe crash and the unfused path.
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specdec_cli.llama.model import LlamaModel  # noqa: E402  (llama.cpp before numpy)
from specdec_cli.llama.platform import devices  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--largest", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    faulthandler.enable()
    model = LlamaModel(args.model, n_ctx=512)
    ids = model.tokenize("The history of the Roman Empire is long and", add_special=True)
    model.decode(ids)
    print(f"devices: {', '.join(d.name for d in devices())}; {model.offloaded_layers}/{model.n_layer + 1} layers offloaded", flush=True)
    for n in range(1, args.largest + 1):
        for rep in range(args.repeats):
            model.rewind(len(ids))
            start = time.perf_counter()
            model.decode(list(range(100, 100 + n)), n)
            print(f"n={n} rep={rep} ok {time.perf_counter() - start:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
