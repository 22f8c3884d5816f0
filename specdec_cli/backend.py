"""The one place that talks to llama.cpp (through llama-cpp-python's low-level ctypes API).

`LlamaModel` loads a GGUF file with GPU offload, keeps its own KV cache and the list of
tokens that cache holds, and gives the engine exactly what speculative decoding needs:

    model = LlamaModel("smollm2.gguf", n_ctx=2048)
    rows = model.decode([1, 2, 3], n_logits=3)      # (3, n_vocab) float32 view, no copy
    model.rewind(1)                                  # KV cache now holds [1] only

What it leaves out on purpose: sampling (see `sampling.py`, `speculative.py`), drafting policy
(see `drafters.py`), rendering a Jinja chat template (`chat_template.py`), and the high-level
`llama_cpp.Llama` class, whose `logits_all=True` allocates an n_ctx x n_vocab float buffer.
Here a batch asks for logits only on the rows the loop will read, and those rows come back
as numpy views over llama.cpp's own output buffer: they are valid until the next `decode`
call on the same model.

llama.cpp's own log is captured into a ring buffer (`LlamaLog`) rather than printed, and
its tail is attached to the error when a load fails. `SPECDEC_LLAMA_LOG=1` echoes it live.
A Ctrl-C that lands inside one of llama.cpp's callbacks (where ctypes would print and drop
it) is kept, aborts a load through the progress callback, and is raised once the C call returns.

Repacking: llama.cpp copies quantized weights into "extra buffer types" laid out for the
CPU's SIMD units. Its AMX buffer type crashes on some Intel CPUs (ggml-org/llama.cpp #20824),
so `resolve_repack(None)` turns repacking off when the system info reports AMX_INT8 = 1:

    repack_default("CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 |")  -> False
    repack_default("CPU : SSE3 = 1 | AVX2 = 1 |")                 -> True

Before a context is created its KV cache is sized from the model's metadata and checked
against free memory (resources.py), so a huge --ctx is refused instead of swapping to death.

A GGUF header can be read without loading the model, by llama.cpp's own gguf reader (the
key/value pairs and tensor infos; no tensor data), for what must be known before a long load:

    header = read_gguf_header(Path("gemma-3-270m-q4_k_m.gguf"))
    header.chat_template                 # None: `run` without --raw is refused before loading
    header.converted_size("F32")         # 1078917824 bytes once rewritten at F32
"""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import llama_cpp as lc  # before numpy: see __init__.py
import numpy as np

from . import crashguard, resources
from .chat_template import render_jinja_template
from .errors import BadInput, ContextOverflow, ModelLoadError, SpecdecError
from .inputs import read_head

log = logging.getLogger("specdec")

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}
FILE_TYPES = {  # name -> (llama.cpp's file type, the ggml type its weights get)
    "F32": (lc.LLAMA_FTYPE_ALL_F32, lc.GGML_TYPE_F32),
    "F16": (lc.LLAMA_FTYPE_MOSTLY_F16, lc.GGML_TYPE_F16),
    "Q8_0": (lc.LLAMA_FTYPE_MOSTLY_Q8_0, lc.GGML_TYPE_Q8_0),
    "Q4_0": (lc.LLAMA_FTYPE_MOSTLY_Q4_0, lc.GGML_TYPE_Q4_0),
    "Q4_1": (lc.LLAMA_FTYPE_MOSTLY_Q4_1, lc.GGML_TYPE_Q4_1),
}
GGUF_MAGIC = b"GGUF"
GGUF_TYPE_STRING = 8  # gguf.h's enum gguf_type
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"  # what llama_model_chat_template(model, NULL) reads


class LlamaLog:
    """llama.cpp's log lines, kept in a bounded buffer instead of flooding stderr."""

    def __init__(self, keep: int = 200) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.count = 0  # lines seen so far, kept or not: `since(mark)` finds the newer ones
        self.echo = os.environ.get("SPECDEC_LLAMA_LOG", "") not in ("", "0")
        self._partial = ""
        self.pending: BaseException | None = None  # a Ctrl-C that arrived inside a callback
        # The ctypes callback must outlive every call into llama.cpp, so this object holds it.
        self._callback = lc.llama_log_callback(self._on_log)
        lc.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        try:
            piece = text.decode("utf-8", errors="replace")
            if self.echo:
                sys.stderr.write(piece)
            self._partial += piece
            *done, self._partial = self._partial.split("\n")
            for line in done:
                if line.strip():
                    self.lines.append(line)
                    self.count += 1
        except BaseException as exc:  # KeyboardInterrupt: ctypes would print it and drop it
            self.pending = self.pending or exc

    def raise_pending(self) -> None:
        """Raise the Ctrl-C (or other exception) that arrived inside a callback, once."""
        exc, self.pending = self.pending, None
        if exc is not None:
            raise exc

    def tail(self, n: int = 12) -> str:
        return "\n".join(list(self.lines)[-n:])

    def since(self, mark: int) -> list[str]:
        """The kept lines logged after `count` was `mark`."""
        n = min(self.count - mark, len(self.lines))
        return list(self.lines)[len(self.lines) - n :] if n > 0 else []

    def reason(self, mark: int) -> str:
        """llama.cpp's error lines since `mark` as one line, without function-name prefixes.

        Example: "llama_model_load: error loading model: tensor 'x' data is not within the
        file bounds, model is corrupted or incomplete" -> "tensor 'x' data is not within ...".
        Falls back to the last line logged when none mentions an error.
        """
        found: list[str] = []
        for line in self.since(mark):
            if not _ERROR_LINE.search(line) or _GENERIC_FAILURE.search(line):
                continue
            text = line.strip()
            while True:
                shorter = _LOG_PREFIX.sub("", text, count=1)
                if shorter == text:
                    break
                text = shorter
            if text and text not in found:
                found.append(text)
        if found:
            return "; ".join(found)
        recent = self.since(mark)
        return recent[-1].strip() if recent else "no reason given in llama.cpp's log"


_ERROR_LINE = re.compile(r"error|fail|invalid|corrupt", re.IGNORECASE)
_GENERIC_FAILURE = re.compile(r"^\s*llama_model_load_from_file\w*: failed to load model\s*$")
_LOG_PREFIX = re.compile(r"^(?:[A-Za-z_][\w:]*: |error loading model: )")


@functools.lru_cache(maxsize=1)
def llama_log() -> LlamaLog:
    """Initialise llama.cpp's backends once and route its log into a `LlamaLog`."""
    captured = LlamaLog()
    lc.llama_backend_init()
    return captured


def gpu_offload_supported() -> bool:
    llama_log()
    return bool(lc.llama_supports_gpu_offload())


def system_info() -> str:
    """llama.cpp's one-line build report, e.g. "CPU : SSE3 = 1 | AVX2 = 1 | ... | REPACK = 1 |"."""
    llama_log()
    raw = lc.llama_print_system_info()
    return raw.decode("utf-8", errors="replace") if raw else ""


def llama_cpp_version() -> str:
    return getattr(lc, "__version__", "unknown")


_AMX = re.compile(r"\bAMX_INT8\s*=\s*1\b")


def has_amx(info: str) -> bool:
    return bool(_AMX.search(info))


def repack_default(info: str) -> bool:
    """Repack weights for the CPU unless llama.cpp reports AMX, whose buffer type can crash (#20824)."""
    return not has_amx(info)


def can_choose_repack() -> bool:
    """Whether this llama-cpp-python exposes llama_model_params.use_extra_bufts."""
    return any(name == "use_extra_bufts" for name, *_ in lc.llama_model_params._fields_)


@functools.lru_cache(maxsize=1)
def auto_repack() -> bool:
    """The repack default for the loaded llama.cpp, said once on the specdec logger (info level)."""
    repack = repack_default(system_info())
    if not repack:
        log.info("llama.cpp reports AMX_INT8 = 1: loading models without repacking (llama.cpp #20824); --repack overrides")
    return repack


def resolve_repack(requested: bool | None) -> bool:
    """None means auto: off on AMX, on elsewhere."""
    return auto_repack() if requested is None else requested


# ggml's enum ggml_backend_dev_type, in its order (ggml-backend.h)
DEVICE_KINDS = ("cpu", "gpu", "igpu", "accel", "meta")


@dataclass(frozen=True)
class Device:
    """One device llama.cpp can place layers on, e.g. Device("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 7934, 7934)."""

    name: str
    description: str
    kind: str  # DEVICE_KINDS; "gpu" and "igpu" take offloaded layers
    free_mib: int
    total_mib: int


@functools.lru_cache(maxsize=1)
def devices() -> tuple[Device, ...]:
    """The devices of every backend compiled in, from ggml's device registry (ggml_backend_dev_*).

    Example on a CPU-only build: (Device("CPU", "Intel(R) Xeon(R) ...", "cpu", 24000, 24000),).
    Empty when this llama-cpp-python does not expose libggml (then doctor lists none)."""
    llama_log()
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_type.restype = ctypes.c_int
        lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        lib.ggml_backend_dev_memory.restype = None
    except (ImportError, AttributeError, OSError) as exc:
        log.info("cannot list llama.cpp's devices: %s", exc)
        return ()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        found.append(Device(
            name=(lib.ggml_backend_dev_name(dev) or b"?").decode("utf-8", "replace"),
            description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
            kind=DEVICE_KINDS[kind] if 0 <= kind < len(DEVICE_KINDS) else f"type {kind}",
            free_mib=free.value // 2**20,
            total_mib=total.value // 2**20,
        ))
    return tuple(found)


def resolve_gpu_layers(requested: int | None) -> int:
    """None or -1 means "all layers on the GPU if there is one"; without a GPU every request means 0
    (the command line warns about it once, in options.gpu_layers_to_load)."""
    has_gpu = gpu_offload_supported()
    if requested is None or requested < 0:
        return 999 if has_gpu else 0
    return requested if has_gpu else 0


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


def check_gguf_file(path: Path) -> None:
    """Fail early and clearly for a missing file, a FIFO/socket/device/folder, an unreadable file, or one that is not GGUF.

    `stat` is asked first and the file opened non-blocking (inputs.read_head): a FIFO is never
    opened. The path must be UTF-8, since llama.cpp is handed str(path).encode().
    """
    magic = read_head(path, 4, "model file")
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # a file name in another encoding, passed through argv as surrogates
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")  # the bytes as they are: mod\xe8le.gguf
        raise BadInput(f"the model path {shown} is not valid UTF-8, which llama.cpp needs; rename the file or link it under a UTF-8 name") from None


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file's header says, as far as specdec needs it before loading the model."""

    chat_template: str | None
    data_offset: int  # bytes before the tensor data: the key/value pairs and the tensor infos
    alignment: int
    tensor_elements: tuple[int, ...]  # weights per tensor, in file order

    def converted_size(self, file_type: str) -> int:
        """Bytes of the file rewritten at `file_type` (llama.cpp's quantizer, every tensor at that type).

        Exact for F32 (the built-in target: 539845696 bytes from the Q4_1 draft); for the other
        types a little high or low where tensors the quantizer keeps as they are (norms) differ.
        """
        weight_type = FILE_TYPES[file_type][1]
        type_size, block = _gguf().ggml_type_size(weight_type), _gguf().ggml_blck_size(weight_type)
        size = -(-self.data_offset // self.alignment) * self.alignment
        for n in self.tensor_elements:
            data = -(-n // block) * type_size
            size += -(-data // self.alignment) * self.alignment  # each tensor's data is padded to the alignment
        return size


class _GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]  # gguf.h's struct gguf_init_params


@functools.lru_cache(maxsize=1)
def _gguf() -> ctypes.CDLL:
    """llama.cpp's gguf reader (in libggml-base, reached through libllama), declared for ctypes.

    A handle of its own, so that these declarations never touch llama-cpp-python's.
    """
    lib = ctypes.CDLL(lc.llama_cpp._lib._name)
    ctx, i64, size = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    for name, restype, argtypes in (
        ("gguf_init_from_file", ctx, [ctypes.c_char_p, _GgufInitParams]),
        ("gguf_free", None, [ctx]),
        ("gguf_find_key", i64, [ctx, ctypes.c_char_p]),
        ("gguf_get_kv_type", ctypes.c_int, [ctx, i64]),
        ("gguf_get_val_str", ctypes.c_char_p, [ctx, i64]),
        ("gguf_get_data_offset", size, [ctx]),
        ("gguf_get_alignment", size, [ctx]),
        ("gguf_get_n_tensors", i64, [ctx]),
        ("gguf_get_tensor_type", ctypes.c_int, [ctx, i64]),
        ("gguf_get_tensor_size", size, [ctx, i64]),
        ("ggml_type_size", size, [ctypes.c_int]),
        ("ggml_blck_size", i64, [ctypes.c_int]),
    ):
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def read_gguf_header(path: Path) -> GgufHeader | None:
    """The header of the GGUF file at `path`, read by llama.cpp without loading any tensor.

    The file is checked as a load checks it first (check_gguf_file: never opens a FIFO, raises
    for a file that is not GGUF). None when llama.cpp's reader refuses a file that starts
    like a GGUF (truncated, an unknown version): the load that follows says why.
    """
    check_gguf_file(path)
    llama_log()  # the reader's complaints go to the captured log, not to stderr
    lib = _gguf()
    ctx = lib.gguf_init_from_file(str(path).encode(), _GgufInitParams(True, None))
    if not ctx:
        return None
    try:
        key = lib.gguf_find_key(ctx, CHAT_TEMPLATE_KEY.encode())
        template = None
        if key >= 0 and lib.gguf_get_kv_type(ctx, key) == GGUF_TYPE_STRING:  # gguf_get_val_str aborts on other types
            template = lib.gguf_get_val_str(ctx, key).decode("utf-8", errors="replace") or None
        elements = []
        for i in range(lib.gguf_get_n_tensors(ctx)):
            kind = lib.gguf_get_tensor_type(ctx, i)
            elements.append(lib.gguf_get_tensor_size(ctx, i) // lib.ggml_type_size(kind) * lib.ggml_blck_size(kind))
        return GgufHeader(template, lib.gguf_get_data_offset(ctx), lib.gguf_get_alignment(ctx), tuple(elements))
    finally:
        lib.gguf_free(ctx)


def no_chat_template(path: Path) -> BadInput:
    """The error for a prompt to be wrapped in the chat template of a model that has none."""
    return BadInput(f"{path.name} has no chat template; pass --raw to send the prompt as it is")


def require_chat_template(path: Path) -> None:
    """BadInput before anything loads when the GGUF at `path` has no chat template (the prompt cannot be wrapped)."""
    header = read_gguf_header(path)
    if header is not None and not header.chat_template:
        raise no_chat_template(path)


class LlamaModel:
    """One GGUF model with one context (one sequence) and the tokens its KV cache holds."""

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
    ) -> None:
        self.path = Path(path)
        check_gguf_file(self.path)
        self._log = llama_log()
        self._model = None
        self._ctx = None
        self._batch = None
        self.tokens: list[int] = []
        self._pieces: dict[int, bytes] = {}

        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0 if vocab_only else resolve_gpu_layers(n_gpu_layers)
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
                resources.check_kv_fits(self.path.name, n_ctx, self.kv_bytes_per_token(), resources.available_memory())
            except SpecdecError:
                self.close()
                raise
        threads = n_threads or max(os.cpu_count() or 1, 1)
        cparams = lc.llama_context_default_params()
        # llama.cpp pads n_ctx to 256 but caps n_batch at the unpadded request (--ctx 8 gave a
        # 256-token context taking 8-token batches, too few to verify -k 16): ask for the padded size.
        padded = resources.padded_ctx(n_ctx)
        cparams.n_ctx = padded if padded <= 0xFFFFFFFF else n_ctx  # uint32_t
        cparams.n_batch = min(n_batch, cparams.n_ctx)
        cparams.n_ubatch = cparams.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        mark = self._log.count
        crashguard.mark(f"allocating the context of the {role} {self.path.name}")
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            self._log.raise_pending()
            raise ModelLoadError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}: {self._log.reason(mark)}")
        self.n_ctx = int(lc.llama_n_ctx(self._ctx))
        self.n_ctx_requested = n_ctx
        self.n_batch = min(int(lc.llama_n_batch(self._ctx)), int(lc.llama_n_ubatch(self._ctx)))
        self.n_threads = threads
        self._memory = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)

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

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """Format (role, content) messages with the model's own template, ending on the assistant's turn.

        The GGUF's Jinja template is rendered as Hugging Face does (so a default system
        prompt written into the template is kept); llama.cpp's built-in template matcher is
        the fallback for templates Jinja cannot render.
        """
        template = self.chat_template()
        if not template:
            raise no_chat_template(self.path)
        try:
            return render_jinja_template(template, messages, bos=self.token_text(self.vocab.bos), eos=self.token_text(self.vocab.eos))
        except BadInput as exc:  # a limit was hit: the template is at fault, no fallback
            raise BadInput(f"{self.path.name}: {exc}") from None
        except Exception as exc:  # jinja2 errors of every kind: fall back to llama.cpp's matcher
            log.debug("jinja rendering of the chat template failed (%s); using llama.cpp's matcher", exc)
        return self._apply_builtin_template(template, messages)

    def _apply_builtin_template(self, template: str, messages: Sequence[tuple[str, str]]) -> str:
        keep = [(role.encode(), content.encode()) for role, content in messages]
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
        if start + n > self.n_ctx:
            raise ContextOverflow(
                f"the context holds {self.n_ctx} tokens but {start + n} are needed; pass a larger --ctx"
            )
        batch = self._batch
        crashguard.mark(self._decoding)
        first_logit = n - n_logits
        # Chunks of at most n_batch tokens; the last one holds every row that wants logits.
        last_start = max(0, n - self.n_batch)
        bounds = list(range(0, last_start, self.n_batch)) + [last_start, n]
        for lo, hi in zip(bounds, bounds[1:]):
            for i in range(hi - lo):
                batch.token[i] = tokens[lo + i]
                batch.pos[i] = start + lo + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = lo + i >= first_logit
            batch.n_tokens = hi - lo
            rc = lc.llama_decode(self._ctx, batch)
            if rc != 0:
                self.rewind(start)
                raise SpecdecError(f"llama_decode failed with code {rc} on {self.path.name}:\n{self._log.tail(4)}")
        self.tokens.extend(int(t) for t in tokens)
        if not n_logits:
            return None
        # Output rows are indexed within the last chunk, which started at `lo`.
        return self._logits_view(first_logit - lo, n_logits)

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
        ok = lc.llama_memory_seq_rm(self._memory, 0, n_keep, -1)
        if not ok:
            raise SpecdecError(
                f"{self.path.name}: llama.cpp cannot roll back this model's memory (recurrent architecture?); "
                "speculative decoding needs a model whose KV cache can be truncated"
            )
        del self.tokens[n_keep:]

    def reset(self) -> None:
        lc.llama_memory_clear(self._memory, True)
        self.tokens.clear()


def convert_gguf(src: Path, dst: Path, file_type: str = "F32", n_threads: int = 0) -> None:
    """Rewrite a GGUF at another precision with llama.cpp's quantizer (requantizing allowed).

    Writes straight to `dst`; callers that need atomicity write to a temporary name first.
    The quantizer is one long C call that nothing interrupts: convert.py runs it in a child
    process that can be stopped. A failure is one line, llama.cpp's reason: "llama.cpp could
    not convert a.gguf to F32: failed to quantize: basic_ios::clear: iostream error".
    """
    captured = llama_log()
    params = lc.llama_model_quantize_default_params()
    params.nthread = n_threads
    params.ftype = FILE_TYPES[file_type][0]
    params.allow_requantize = True
    crashguard.mark(f"converting {src.name} to {file_type}")
    mark = captured.count
    rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    captured.raise_pending()
    if rc != 0:
        raise SpecdecError(
            f"llama.cpp could not convert {src} to {file_type}: {captured.reason(mark)} (SPECDEC_LLAMA_LOG=1 shows llama.cpp's full log)"
        )
