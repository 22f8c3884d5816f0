"""The llama.cpp adapter: the only package that imports llama_cpp (llama-cpp-python's ctypes API).

- log.py: llama.cpp's log in a ring buffer, the backends' one initialisation;
- platform.py: the build's report, GPU offload, AMX and repacking, the devices;
- gguf.py: checking a model file and reading its header without loading it;
- model.py: `LlamaModel`, one loaded GGUF with its context, batches, logits and KV rollback;
- vocab.py: its vocabulary (`LlamaModel`'s base): tokens to bytes and text and back, each token's kind;
- chat_template.py: a conversation through the model's chat template (Jinja in a sandbox, llama.cpp's matcher as fallback);
- convert.py: rewriting a GGUF at another precision, in a child process;
- resources.py: the KV cache's size against free memory;
- crashguard.py: the forked child and the one line after a native crash.

Left out: sampling and drafting policy (maths/, drafting/, tuning/).
"""
