"""specdec: speculative decoding for llama.cpp models (command line: cli/app.py; the loop: decoding/engine.py).

Importing the package loads llama.cpp's shared libraries (llama/) before anything of ours
imports numpy. On the H200 machine (CUDA build of llama-cpp-python 0.3.36, the image's numpy
2.5.2) every process that imported numpy first segfaulted inside llama_model_load_from_file
with all layers on the GPU, and every process that loaded llama.cpp first loaded the same
model (19 processes, 2026-11-30; docs/benchmarks.md, "The GPU machine"). The cause inside the
libraries is not established. A program that imports numpy before specdec_cli can still meet it.

Left out: any public name here; import from the modules.
"""

from .llama import log  # noqa: F401  (first: see above)
