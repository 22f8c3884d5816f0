"""A GGUF file checked and its header read without loading the model, by llama.cpp's own gguf reader.

The key/value pairs and tensor infos are read, no tensor data, for what must be known before a
long load:

    header = read_gguf_header(Path("gemma-3-270m-q4_k_m.gguf"))
    header.chat_template                 # None: `run` without --raw is refused before loading
    header.converted_size("F32")         # 1078917824 bytes once rewritten at F32
    header.kv_bytes_per_token            # 18 layers x 1 KV head x (256 + 256) x 2 bytes = 18432

The reader is reached over a ctypes handle of its own (`_gguf`), so that its declarations never
touch llama-cpp-python's.

Left out: loading the model (model.py), rewriting it (convert.py).
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc

from ..errors import BadInput, ModelLoadError
from ..inputs import read_head
from .log import llama_log
from .resources import kv_bytes_per_token

FILE_TYPES = {  # name -> (llama.cpp's file type, the ggml type its weights get)
    "F32": (lc.LLAMA_FTYPE_ALL_F32, lc.GGML_TYPE_F32),
    "F16": (lc.LLAMA_FTYPE_MOSTLY_F16, lc.GGML_TYPE_F16),
    "Q8_0": (lc.LLAMA_FTYPE_MOSTLY_Q8_0, lc.GGML_TYPE_Q8_0),
    "Q4_0": (lc.LLAMA_FTYPE_MOSTLY_Q4_0, lc.GGML_TYPE_Q4_0),
    "Q4_1": (lc.LLAMA_FTYPE_MOSTLY_Q4_1, lc.GGML_TYPE_Q4_1),
}
GGUF_MAGIC = b"GGUF"
GGUF_TYPE_UINT32 = 4  # gguf.h's enum gguf_type
GGUF_TYPE_STRING = 8
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"  # what llama_model_chat_template(model, NULL) reads


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
    kv_bytes_per_token: int | None = None  # f16 K and V over all layers (resources.kv_bytes_per_token); None where the header does not say

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
        ("gguf_get_val_u32", ctypes.c_uint32, [ctx, i64]),
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
        return GgufHeader(template, lib.gguf_get_data_offset(ctx), lib.gguf_get_alignment(ctx), tuple(elements), _kv_bytes_per_token(lib, ctx))
    finally:
        lib.gguf_free(ctx)


def _kv_bytes_per_token(lib: ctypes.CDLL, ctx) -> int | None:
    """f16 K and V bytes per token from the architecture's keys (head sizes default to
    embedding_length / head_count, as llama.cpp's do); None where one is missing or not a plain
    number (per-layer head counts)."""

    def number(key: str) -> int | None:
        found = lib.gguf_find_key(ctx, key.encode())
        if found < 0 or lib.gguf_get_kv_type(ctx, found) != GGUF_TYPE_UINT32:  # gguf_get_val_u32 aborts on other types
            return None
        return int(lib.gguf_get_val_u32(ctx, found))

    found = lib.gguf_find_key(ctx, b"general.architecture")
    if found < 0 or lib.gguf_get_kv_type(ctx, found) != GGUF_TYPE_STRING:
        return None
    arch = lib.gguf_get_val_str(ctx, found).decode("utf-8", errors="replace")
    n_layer, n_head, n_embd = number(f"{arch}.block_count"), number(f"{arch}.attention.head_count"), number(f"{arch}.embedding_length")
    n_head_kv = number(f"{arch}.attention.head_count_kv") or n_head
    if not (n_layer and n_head and n_embd and n_head_kv):
        return None
    head = n_embd // n_head
    return kv_bytes_per_token(n_layer, n_head_kv, number(f"{arch}.attention.key_length") or head, number(f"{arch}.attention.value_length") or head)


def no_chat_template(path: Path) -> BadInput:
    """The error for a prompt to be wrapped in the chat template of a model that has none."""
    return BadInput(f"{path.name} has no chat template; pass --raw to send the prompt as it is")


def require_chat_template(path: Path) -> None:
    """BadInput before anything loads when the GGUF at `path` has no chat template (the prompt cannot be wrapped)."""
    header = read_gguf_header(path)
    if header is not None and not header.chat_template:
        raise no_chat_template(path)
