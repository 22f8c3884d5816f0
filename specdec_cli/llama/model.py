"""`LlamaModel`: one GGUF model loaded with GPU offload, its context, and the tokens its KV cache holds.

It gives the engine exactly what speculative decoding needs:

    model = LlamaModel("smollm2.gguf", n_ctx=2048)
    rows = model.decode([1, 2, 3], n_logits=3)      # (3, n_vocab) float32 view, no copy
    model.rewind(1)                                  # KV cache now holds [1] only

Loading goes in two stages, each its own method: the weights (`_load`: GPU layers, RPC devices,
repacking, Ctrl-C through the progress callback), then the context (`_create_context`: the KV
cache sized from the model's metadata and checked against free memory by resources.py, so a huge
--ctx is refused instead of swapping to death; one stream of n_seq sequences for the server's
slots). A batch asks for logits only on the rows the loop will read, and those rows come back as
numpy views over llama.cpp's own output buffer: they are valid until the next `decode` call on
the same model.

Left out on purpose: sampling (maths/), drafting policy (drafting/, tuning/), the vocabulary
(vocab.py, `LlamaModel`'s base: tokenize, piece, token kinds), rendering a chat template
(chat_template.py), and the high-level `llama_cpp.Llama` class, whose `logits_all=True`
allocates an n_ctx x n_vocab float buffer.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Sequence

import llama_cpp as lc  # before numpy: see specdec_cli/__init__.py
import numpy as np

from ..errors import ModelLoadError, SpecdecError, check_context
from . import crashguard, ggml, resources, rpc
from .chat_template import render_chat
from .gguf import check_gguf_file, no_chat_template
from .log import llama_log
from .platform import can_choose_repack, resolve_gpu_layers, resolve_repack
from .vocab import Vocabulary

log = logging.getLogger("specdec")


class LlamaModel(Vocabulary):
    """One GGUF model with one context and the tokens its KV cache holds.

    `decode` and `rewind` work on sequence 0 and keep `tokens`. A context made for n_seq > 1
    sequences (the server's slots) is shared through `decode_rows` and `seq_rm` by
    decoding/batch.py, which keeps each sequence's tokens; `n_ctx` is then each one's context.
    The vocabulary's methods (tokenize, piece, token_kind, ...) come from `Vocabulary` (vocab.py).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        n_batch: int = 512,
        vocab_only: bool = False,
        repack: bool | None = None,
        role: str = "model",
        rpc_servers: Sequence[str] = (),
        n_seq: int = 1,
    ) -> None:
        self.path = Path(path)
        check_gguf_file(self.path)
        self._log = llama_log()
        self._model = None
        self._weights: LlamaModel | None = None  # set on a sibling: the model whose weights it shares
        self._ctx = None
        self._batch = None
        self.tokens: list[int] = []
        self.decoded = 0  # tokens llama_decode has evaluated over this model's life (what a cache hit saves)
        self._load(n_gpu_layers, vocab_only, repack, role, rpc_servers)
        super().__init__(lc.llama_model_get_vocab(self._model))
        # llama.cpp offloads the repeating layers first, then the output layer: n_layer + 1 in all
        self.n_layer = int(lc.llama_model_n_layer(self._model))
        self.offloaded_layers = min(self.n_gpu_layers, self.n_layer + 1)
        if vocab_only:
            self.n_ctx = 0
            return
        self._create_context(n_ctx, n_threads, n_batch, n_seq, role)

    # -- loading: the weights, then the context ----------------------------------------

    def _load(self, n_gpu_layers: int | None, vocab_only: bool, repack: bool | None, role: str, rpc_servers: Sequence[str]) -> None:
        """The weights, on the devices asked for; ModelLoadError with llama.cpp's reason if it fails."""
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0 if vocab_only else resolve_gpu_layers(n_gpu_layers)
        self.rpc_servers = tuple(rpc_servers) if not vocab_only else ()
        self.rpc_probed: list[rpc.RpcServer] = []  # what the probes before loading found (an endpoint ggml already served is not probed)
        if self.rpc_servers:
            self._devices = self._rpc_devices(role)  # kept alive: llama.cpp reads the array while loading
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            mparams.n_gpu_layers = 999 if n_gpu_layers is None or n_gpu_layers < 0 else n_gpu_layers
        mparams.vocab_only = vocab_only
        self.repack = resolve_repack(repack)
        if can_choose_repack():
            mparams.use_extra_bufts = self.repack
        elif not self.repack:
            log.warning("this llama-cpp-python cannot turn repacking off (no use_extra_bufts); loading with it")
            self.repack = True
        self.n_gpu_layers = mparams.n_gpu_layers
        # Returning False from the progress callback aborts the load: that is how Ctrl-C gets in.
        progress = lc.llama_progress_callback(self._on_progress)
        mparams.progress_callback = progress
        mark = self._log.count
        # What the crash guard names if llama.cpp dies: built once here, marked on every decode
        # with the RPC servers, of which the guard names the one that failed.
        what = f"the {role} {self.path.name}" + ("" if self.repack or vocab_only else " (repacking off)")
        if self.rpc_servers:
            what += " over RPC"
        self._decoding = f"decoding with {what}"
        crashguard.mark(f"loading {what}", self.rpc_servers)
        self._model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        self._log.raise_pending()
        if not self._model:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {self._log.reason(mark)} "
                "(SPECDEC_LLAMA_LOG=1 shows llama.cpp's full log)"
            )

    def _create_context(self, n_ctx: int, n_threads: int | None, n_batch: int, n_seq: int, role: str) -> None:
        """The context: n_seq sequences of n_ctx tokens each, once their KV cache fits in memory."""
        if self.n_gpu_layers == 0 and resources.memory_check_enabled():
            try:
                resources.check_kv_fits(self.path.name, n_ctx * n_seq, self.kv_bytes_per_token(), resources.available_memory())
            except SpecdecError:
                self.close()
                raise
        threads = n_threads or max(os.cpu_count() or 1, 1)
        cparams = lc.llama_context_default_params()
        # llama.cpp pads n_ctx to 256 but caps n_batch at the unpadded request (--ctx 8 gave a
        # 256-token context taking 8-token batches, too few to verify -k 16): ask for the padded size.
        # With n_seq sequences (the server's slots) the cache is one stream of n_seq contexts, so
        # that one batch holds rows of every sequence (llama.cpp splits a batch of several streams
        # into one ubatch per equal share); each sequence is held to its own n_ctx here.
        padded = resources.padded_ctx(n_ctx) * n_seq
        cparams.n_ctx = padded if padded <= 0xFFFFFFFF else n_ctx  # uint32_t
        cparams.n_batch = min(n_batch, cparams.n_ctx)
        cparams.n_ubatch = cparams.n_batch
        cparams.n_seq_max = n_seq
        cparams.kv_unified = n_seq > 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        mark = self._log.count
        crashguard.mark(f"allocating the context of the {role} {self.path.name}")
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            self._log.raise_pending()
            raise ModelLoadError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}: {self._log.reason(mark)}")
        self.n_seq = n_seq
        self.n_ctx = int(lc.llama_n_ctx(self._ctx)) // n_seq  # per sequence
        self.n_ctx_requested = n_ctx
        self.n_batch = min(int(lc.llama_n_batch(self._ctx)), int(lc.llama_n_ubatch(self._ctx)))
        self.n_threads = threads
        self._memory = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)

    def _rpc_devices(self, role: str) -> ctypes.Array:
        """The devices of this model's RPC servers, each probed first (one line naming a faulty one)."""
        if not ggml.has_rpc():
            raise SpecdecError(rpc.NO_RPC)
        devices = []
        for endpoint in self.rpc_servers:
            if not ggml.rpc_connected(endpoint):  # ggml already talks to it: the server would not answer a second client
                self.rpc_probed.append(rpc.probe(endpoint))
            crashguard.mark(f"connecting the {role} {self.path.name} to the RPC server {endpoint}", (endpoint,))
            found = ggml.rpc_add_server(endpoint)
            if not found:
                raise rpc.RpcError(f"the RPC server at {endpoint} offers no device to llama.cpp")
            devices += found
        return ggml.device_array(devices)

    def _on_progress(self, progress: float, user_data: ctypes.c_void_p) -> bool:
        try:
            return self._log.pending is None
        except BaseException as exc:  # KeyboardInterrupt landed here: keep it, abort the load
            self._log.pending = self._log.pending or exc
            return False

    def sibling(self) -> "LlamaModel":
        """A second context over these same weights (nothing loaded again), with its own KV cache
        of this one's size and threads, on sequence 0: `run --baseline` decodes target-only in it,
        in turns with the speculative run in this one. Close it before this model.

            beside = target.sibling()
            beside.decode([1, 2, 3]); target.tokens   # unchanged: each context has its own cache
        """
        twin = object.__new__(LlamaModel)
        Vocabulary.__init__(twin, self._vocab)
        twin._pieces = self._pieces  # the same vocabulary: its pieces are read once
        for name in ("path", "_log", "rpc_servers", "rpc_probed", "repack", "n_gpu_layers", "n_layer", "offloaded_layers"):
            setattr(twin, name, getattr(self, name))
        twin._model, twin._ctx, twin._batch = self._model, None, None
        twin._weights = self  # the owner of the weights, kept alive while the twin is
        twin.tokens, twin.decoded = [], 0
        twin._decoding = self._decoding + " (its second context)"
        twin._create_context(self.n_ctx_requested, self.n_threads, self.n_batch, 1, "target")
        return twin

    # -- the model file's metadata -----------------------------------------------------

    def describe(self) -> str:
        """llama.cpp's one-line description, e.g. "llama 134M Q4_1 - Medium"."""
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else "unknown"

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, e.g. meta("general.architecture") -> "llama"."""
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def kv_bytes_per_token(self) -> int:
        """f16 K and V bytes per token over all layers, from the metadata (head sizes default to n_embd / n_head)."""
        n_layer = self.n_layer
        n_head = max(int(lc.llama_model_n_head(self._model)), 1)
        n_head_kv = int(lc.llama_model_n_head_kv(self._model))
        head = int(lc.llama_model_n_embd(self._model)) // n_head
        arch = self.meta("general.architecture") or ""

        def dim(key: str) -> int:
            value = self.meta(f"{arch}.attention.{key}")
            return int(value) if value and value.isdigit() else head

        return resources.kv_bytes_per_token(n_layer, n_head_kv, dim("key_length"), dim("value_length"))

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            if self._weights is None:  # a sibling's weights are its owner's
                lc.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> "LlamaModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- the chat template ---------------------------------------------------------------

    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def apply_chat_template(self, messages: Sequence, tools: list[dict] | None = None) -> str:
        """Format messages with the model's own template, ending on the assistant's turn: (role,
        content) tuples, or Hugging Face's message dicts, with `tools` for the template's `tools`
        (chat_template.render_chat: Jinja first, llama.cpp's matcher as the fallback)."""
        template = self.chat_template()
        if not template:
            raise no_chat_template(self.path)
        bos, eos = self.token_text(self.vocab.bos), self.token_text(self.vocab.eos)
        return render_chat(template, messages, bos=bos, eos=eos, name=self.path.name, tools=tools)

    # -- evaluation -------------------------------------------------------------------

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
        """Append `tokens` to the KV cache; return logits of the last `n_logits` as a (rows, n_vocab) view.

        n_logits=0 asks for no logits (prefill of text whose next token is not needed).
        Rows with logits must fit in one batch of n_batch tokens. The view aliases
        llama.cpp's buffer: read it before the next decode on this model.
        """
        n = len(tokens)
        assert n > 0, "decode needs at least one token"
        assert 0 <= n_logits <= min(n, self.n_batch), f"n_logits={n_logits} for {n} tokens, n_batch={self.n_batch}"
        start = len(self.tokens)
        check_context(self.n_ctx, start + n)
        # Chunks of at most n_batch tokens; the last one holds every row that wants logits.
        last_start = max(0, n - self.n_batch)
        bounds = list(range(0, last_start, self.n_batch)) + [last_start, n]
        try:
            for lo, hi in zip(bounds, bounds[1:]):
                rows = self.decode_rows([(0, start + lo, tokens[lo:hi], n_logits if hi == n else 0)])[0]
        except SpecdecError:
            # The chunks before the failed one are in the KV cache but not yet in self.tokens:
            # drop them by position, so that the cache holds exactly self.tokens again.
            lc.llama_memory_seq_rm(self._memory, 0, start, -1)
            raise
        self.tokens.extend(int(t) for t in tokens)
        return rows

    def decode_rows(self, parts: Sequence[tuple[int, int, Sequence[int], int]]) -> list[np.ndarray | None]:
        """One llama_decode of several sequences' rows: each part is (sequence id, the position of its
        first token, its tokens, how many of its last rows want logits), all in one batch of at most
        n_batch tokens. Returns each part's logits as a view (None for n_logits 0), valid until the next
        decode on this model. The caller keeps each sequence's tokens (`decode` those of sequence 0);
        when the decode fails every part's positions are dropped again and SpecdecError is raised.

            model.decode_rows([(0, 5, [7], 1), (1, 9, [3, 4, 5], 3)])   # -> [(1, n_vocab), (3, n_vocab)]
        """
        batch = self._batch
        i = 0
        firsts = []
        for seq, start, tokens, n_logits in parts:
            first_logit = len(tokens) - n_logits
            firsts.append(i + first_logit)
            for j, token in enumerate(tokens):
                batch.token[i] = token
                batch.pos[i] = start + j
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = j >= first_logit
                i += 1
        assert 0 < i <= self.n_batch, f"a batch of {i} tokens for n_batch={self.n_batch}"
        batch.n_tokens = i
        crashguard.mark(self._decoding, self.rpc_servers)
        rc = lc.llama_decode(self._ctx, batch)
        if rc != 0:
            for seq, start, _, _ in parts:
                lc.llama_memory_seq_rm(self._memory, seq, start, -1)
            raise SpecdecError(f"llama_decode failed with code {rc} on {self.path.name}:\n{self._log.tail(4)}")
        self.decoded += i
        return [self._logits_view(first, part[3]) if part[3] else None for first, part in zip(firsts, parts)]

    def _logits_view(self, first: int, rows: int) -> np.ndarray:
        ptr = lc.llama_get_logits_ith(self._ctx, first)
        if not ptr:
            raise SpecdecError(f"llama.cpp returned no logits for row {first} of {self.path.name}")
        if rows > 1:
            # The output rows are contiguous in batch order; check that before trusting one view.
            last = lc.llama_get_logits_ith(self._ctx, first + rows - 1)
            step = ctypes.addressof(last.contents) - ctypes.addressof(ptr.contents)
            assert step == (rows - 1) * self.n_vocab * 4, "llama.cpp output rows are not contiguous"
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))

    def rewind(self, n_keep: int) -> None:
        """Drop every cached token from position `n_keep` on (KV rollback)."""
        if n_keep >= len(self.tokens):
            return
        self.seq_rm(0, n_keep)
        del self.tokens[n_keep:]

    def seq_rm(self, seq: int, n_keep: int) -> None:
        """Drop sequence `seq`'s cached tokens from position `n_keep` on (the caller keeps its tokens)."""
        ok = lc.llama_memory_seq_rm(self._memory, seq, n_keep, -1)
        if not ok:
            raise SpecdecError(
                f"{self.path.name}: llama.cpp cannot roll back this model's memory (recurrent architecture?); "
                "speculative decoding needs a model whose KV cache can be truncated"
            )
