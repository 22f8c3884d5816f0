"""`LlamaModel`: one GGUF model loaded with GPU offload, its context, and the tokens its KV cache holds.

It gives the engine exactly what speculative decoding needs:

    model = LlamaModel("smollm2.gguf", n_ctx=2048)
    rows = model.decode([1, 2, 3], n_logits=3)      # (3, n_vocab) float32 view, no copy
    model.rewind(1)                                  # KV cache now holds [1] only

Left out on purpose: sampling (maths/), drafting policy (drafting/, tuning/), rendering a Jinja
chat template (chat_template.py), and the high-level `llama_cpp.Llama` class, whose
`logits_all=True` allocates an n_ctx x n_vocab float buffer. Here a batch asks for logits only
on the rows the loop will read, and those rows come back as numpy views over llama.cpp's own
output buffer: they are valid until the next `decode` call on the same model.

Before a context is created its KV cache is sized from the model's metadata and checked
against free memory (resources.py), so a huge --ctx is refused instead of swapping to death.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import llama_cpp as lc  # before numpy: see specdec_cli/__init__.py
import numpy as np

from ..errors import BadInput, ModelLoadError, SpecdecError, check_context
from . import crashguard, ggml, resources, rpc
from .chat_template import render_jinja_template
from .gguf import check_gguf_file, no_chat_template
from .log import llama_log
from .platform import can_choose_repack, resolve_gpu_layers, resolve_repack

log = logging.getLogger("specdec")

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


@dataclass(frozen=True)
class VocabInfo:
    """What llama.cpp's compatibility rule compares between a draft and a target."""

    n_vocab: int
    vocab_type: str
    bos: int
    eos: int
    eot: int
    add_bos: bool
    add_eos: bool



class LlamaModel:
    """One GGUF model with one context and the tokens its KV cache holds.

    `decode` and `rewind` work on sequence 0 and keep `tokens`. A context made for n_seq > 1
    sequences (the server's slots) is shared through `decode_rows` and `seq_rm` by
    decoding/batch.py, which keeps each sequence's tokens; `n_ctx` is then each one's context.
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
        self._ctx = None
        self._batch = None
        self.tokens: list[int] = []
        self.decoded = 0  # tokens llama_decode has evaluated over this model's life (what a cache hit saves)
        self._pieces: dict[int, bytes] = {}

        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0 if vocab_only else resolve_gpu_layers(n_gpu_layers)
        self.rpc_servers = tuple(rpc_servers) if not vocab_only else ()
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
        # What the crash guard names if llama.cpp dies: built once here, marked on every decode.
        what = f"the {role} {self.path.name}" + ("" if self.repack or vocab_only else " (repacking off)")
        if self.rpc_servers:
            what += " on the RPC server " + ", ".join(self.rpc_servers)
        self._decoding = f"decoding with {what}"
        crashguard.mark(f"loading {what}")
        self._model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        self._log.raise_pending()
        if not self._model:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {self._log.reason(mark)} "
                "(SPECDEC_LLAMA_LOG=1 shows llama.cpp's full log)"
            )
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self._vocab))
        # llama.cpp offloads the repeating layers first, then the output layer: n_layer + 1 in all
        self.n_layer = int(lc.llama_model_n_layer(self._model))
        self.offloaded_layers = min(self.n_gpu_layers, self.n_layer + 1)
        if vocab_only:
            self.n_ctx = 0
            return

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
                rpc.probe(endpoint)
            crashguard.mark(f"connecting the {role} {self.path.name} to the RPC server {endpoint}")
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

    # -- vocabulary -------------------------------------------------------------------

    @functools.cached_property
    def vocab(self) -> VocabInfo:
        v = self._vocab
        return VocabInfo(
            n_vocab=self.n_vocab,
            vocab_type=VOCAB_TYPES.get(int(lc.llama_vocab_type(v)), "unknown"),
            bos=int(lc.llama_vocab_bos(v)),
            eos=int(lc.llama_vocab_eos(v)),
            eot=int(lc.llama_vocab_eot(v)),
            add_bos=bool(lc.llama_vocab_get_add_bos(v)),
            add_eos=bool(lc.llama_vocab_get_add_eos(v)),
        )

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text for a token (not its rendered piece)."""
        raw = lc.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_end_of_generation(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self._vocab, token))

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text (str, or UTF-8 bytes) to token ids. `add_special` adds BOS only if the model asks for it."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        size = len(data) + 8
        buf = (lc.llama_token * size)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, size, add_special, parse_special)
        if n < 0:
            size = -n
            buf = (lc.llama_token * size)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, size, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders as (special tokens render as nothing). Cached."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def token_kind(self, token: int) -> str:
        """"text" (normal or user-defined: it stands for its piece), "byte" (byte fallback,
        <0x0A> -> b"\\n") or "special" (control, unknown, unused: renders as nothing)."""
        attr = int(lc.llama_vocab_get_attr(self._vocab, token))
        if attr & lc.LLAMA_TOKEN_ATTR_BYTE:
            return "byte"
        if attr & (lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN | lc.LLAMA_TOKEN_ATTR_UNUSED):
            return "special"
        if attr & (lc.LLAMA_TOKEN_ATTR_NORMAL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED):
            return "text"
        return "special"  # undefined

    @functools.cached_property
    def vocab_table(self) -> tuple[list[bytes], list[str]]:
        """Every token's piece and kind (see `token_kind`), for vocab_map.build. Read once (a second for 262k tokens)."""
        return [self.piece(t) for t in range(self.n_vocab)], [self.token_kind(t) for t in range(self.n_vocab)]

    @functools.cached_property
    def grammar_tokenizer(self):
        """The vocabulary as llguidance reads it, for constraints (grammar/): every token's bytes,
        control tokens marked special (a grammar never emits them), the end-of-generation tokens
        as what ends a grammar's output. Built once: about 0.2 s at 49,152 tokens, 1.6 s at 262,144."""
        from llguidance.llamacpp import lltokenizer_from_vocab  # imports llama_cpp: it belongs here

        ends = [t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(self._vocab, t)]
        with warnings.catch_warnings():  # it reads each token's attributes by a name llama-cpp-python deprecates: a warning per token
            warnings.simplefilter("ignore", DeprecationWarning)
            return lltokenizer_from_vocab(self._vocab, eos_token=ends or None)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def apply_chat_template(self, messages: Sequence, tools: list[dict] | None = None) -> str:
        """Format messages with the model's own template, ending on the assistant's turn: (role,
        content) tuples, or Hugging Face's message dicts, with `tools` for the template's `tools`.

        The GGUF's Jinja template is rendered as Hugging Face does (so a default system
        prompt written into the template is kept); llama.cpp's built-in template matcher is
        the fallback for templates Jinja cannot render (without tools: it knows none).
        """
        template = self.chat_template()
        if not template:
            raise no_chat_template(self.path)
        try:
            return render_jinja_template(
                template, messages, bos=self.token_text(self.vocab.bos), eos=self.token_text(self.vocab.eos), tools=tools
            )
        except BadInput as exc:  # a limit was hit: the template is at fault, no fallback
            raise BadInput(f"{self.path.name}: {exc}") from None
        except Exception as exc:  # jinja2 errors of every kind: fall back to llama.cpp's matcher
            if tools:
                raise BadInput(f"{self.path.name}: the chat template cannot render this conversation with tools: {exc}") from None
            log.debug("jinja rendering of the chat template failed (%s); using llama.cpp's matcher", exc)
        return self._apply_builtin_template(template, messages)

    def special_id(self, text: str) -> int | None:
        """The id of the one token that spells `text` and that llguidance reads as special (a control
        token, or a user-defined one in angle brackets: llguidance.llamacpp's rule), or None.
        Example: Qwen 2.5's "<tool_call>" -> its id; "hello" -> None."""
        ids = self.tokenize(text, add_special=False, parse_special=True)
        if len(ids) != 1:
            return None
        attr = int(lc.llama_vocab_get_attr(self._vocab, ids[0]))
        spelled = self.token_text(ids[0])
        if attr & lc.LLAMA_TOKEN_ATTR_CONTROL or (attr & lc.LLAMA_TOKEN_ATTR_USER_DEFINED and spelled.startswith("<") and spelled.endswith(">")):
            return ids[0]
        return None

    def _apply_builtin_template(self, template: str, messages: Sequence) -> str:
        turns = [(m["role"], m.get("content") or "") if isinstance(m, dict) else m for m in messages]
        keep = [(role.encode(), content.encode()) for role, content in turns]
        chat = (lc.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            chat[i].role = role
            chat[i].content = content
        size = 2 * sum(len(c) + len(r) for r, c in keep) + 256
        buf = ctypes.create_string_buffer(size)
        n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, size)
        if n > size:
            buf = ctypes.create_string_buffer(n)
            n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, n)
        if n < 0:
            raise SpecdecError(
                f"llama.cpp does not recognise the chat template of {self.path.name}; pass --raw and format the prompt yourself"
            )
        return buf.raw[:n].decode("utf-8", errors="replace")

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
        crashguard.mark(self._decoding)
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
