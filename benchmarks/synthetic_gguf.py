"""Write synthetic GGUF models with the `gguf` package: a deepened copy of a model, and random models.

Two kinds of file, both for measuring speculative decoding where no real large model can be had:

- `write_deepened(src, dst, extra, eps)`: the model `src` (an F32 GGUF of the llama
  architecture, e.g. the built-in SmolLM2 F32 target) with `extra` blocks appended after its
  own. Extra block j copies every weight of block j mod n_layer, except that its attention
  output (attn_output) and FFN down projection (ffn_down) are multiplied by `eps`. With
  eps = 0 both are zero, so the block adds exactly 0 to the residual stream, while every
  weight of the block is still read and multiplied. The logits are then the base model's bit
  for bit for a one-token step, and to float rounding (about 1e-7 relative) for a batch:
  llama.cpp drops the rows whose logits nobody asked for before the last block's FFN, and the
  last block is now an extra one, so the base's own last block multiplies every row of the
  batch, with another kernel and summation order. Greedy text is the base model's (checked
  by synthetic_pair.py identity and by the tests). A small eps > 0 adds eps times a real block's contribution, so agreement with the base model
  (and with a draft of it) falls as eps grows. Example: SmolLM2-135M F32 has 30 blocks of
  14.2 MB; extra = 60 gives 90 blocks and a 1.4 GB file whose one-token step measured 2.4
  times the base model's (59 ms against 25 ms at N = 60, docs/benchmarks.md).
- `write_random(dst, shape, seed)`: a llama-architecture model of a given `Shape` (hidden
  size, layers, heads, KV heads, FFN width, vocabulary, quantization) with random weights.
  Quantized weights are written directly as random blocks (Q8_0, Q4_0), so a 7B-sized file
  takes seconds, not minutes. Its costs are real; its text is noise. It carries a tokenizer
  llama.cpp loads: the given `tokenizer` fields (e.g. the built-in model's, read with
  `tokenizer_fields`) when the vocabulary size matches, else `minimal_tokenizer(n_vocab)`,
  a SentencePiece-style vocabulary of byte tokens and letter strings, and a plain chat
  template.

Every file is written to a temporary name beside `dst` and renamed into place (os.replace),
so an interrupted write never leaves a file that looks finished. Tensors are streamed one at
a time, so memory stays at one tensor whatever the model's size.

Left out: loading and timing the models (synthetic_pair.py), GGUF architectures other than
llama, and K-quants (write F16 and convert with llama.cpp's quantizer for those).

Produces the synthetic models behind docs/benchmarks.md's "Realistic cost ratios: deepened targets" and the GPU check (a library for synthetic_pair.py and gpu_check.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import gguf
import numpy as np

ARCH = "llama"
Q = gguf.GGMLQuantizationType
# How each supported --quant is stored: (ggml type, bytes per block of 32 weights or None for floats).
QUANTS: dict[str, Q] = {"f32": Q.F32, "f16": Q.F16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}  # llama_ftype values for general.file_type
SCALED = ("attn_output", "ffn_down")  # the two projections that write into the residual stream
BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")
MINIMAL_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


@dataclass(frozen=True)
class Field:
    """One GGUF key/value, as GGUFWriter.add_key_value takes it."""

    key: str
    value: object
    vtype: gguf.GGUFValueType
    sub_type: gguf.GGUFValueType | None = None


@dataclass(frozen=True)
class Tensor:
    """One tensor to write: its numpy shape (rows last dimension first, as gguf-py reads them), its type, and its data."""

    name: str
    shape: tuple[int, ...]  # numpy order: (ne1, ne0) for a matrix
    kind: Q
    data: Callable[[], np.ndarray]  # produces the bytes (uint8, quantized) or floats, when written

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.kind]
        return int(np.prod(self.shape)) // block * size


def write_gguf(dst: Path, fields: Iterable[Field], tensors: list[Tensor], alignment: int | None = None) -> Path:
    """Stream `fields` and `tensors` into `dst` atomically (temporary name, then os.replace)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    partial = dst.with_name(f".{dst.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(partial, arch=ARCH)
    try:
        if alignment is not None:
            writer.data_alignment = alignment
        for f in fields:
            writer.add_key_value(f.key, f.value, f.vtype, sub_type=f.sub_type)
        for t in tensors:
            if t.kind in (Q.F32, Q.F16):
                dtype = np.float32 if t.kind == Q.F32 else np.float16
                writer.add_tensor_info(t.name, t.shape, np.dtype(dtype), t.nbytes)
            else:
                byte_shape = (*t.shape[:-1], t.nbytes // int(np.prod(t.shape[:-1])))
                writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), t.nbytes, raw_dtype=t.kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            data = t.data()
            assert data.nbytes == t.nbytes, f"{t.name}: {data.nbytes} bytes produced, {t.nbytes} planned"
            writer.write_tensor_data(data)
        writer.close()
        os.replace(partial, dst)  # atomic: readers see no file or the whole file
    finally:
        writer.close()
        partial.unlink(missing_ok=True)
    return dst


def copied_fields(reader: gguf.GGUFReader, replace: dict[str, object] | None = None, prefix: str = "") -> Iterator[Field]:
    """Every key of `reader` (those starting with `prefix`), with the values in `replace` swapped in."""
    replace = replace or {}
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture" or not field.name.startswith(prefix):
            continue  # GGUFWriter writes these itself
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        yield Field(field.name, replace.get(field.name, field.contents()), vtype, sub_type)


# -- the deepened target --------------------------------------------------------------------


def write_deepened(src: Path, dst: Path, extra: int, eps: float = 0.0) -> Path:
    """`src` with `extra` blocks appended whose residual writes are scaled by `eps` (see the module docstring)."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    if arch != ARCH:
        raise ValueError(f"{src} is a {arch!r} model; deepening handles the {ARCH!r} architecture only")
    n_layer = int(reader.fields[f"{ARCH}.block_count"].contents())
    by_block: dict[int, list] = {}
    other = []
    for t in reader.tensors:
        match = BLOCK_RE.match(t.name)
        if match:
            by_block.setdefault(int(match.group(1)), []).append((match.group(2), t))
        else:
            other.append(t)
    for t in reader.tensors:
        if t.tensor_type != Q.F32:
            raise ValueError(f"{src}: tensor {t.name} is {t.tensor_type.name}; deepening copies F32 models only")

    def copy(t) -> Tensor:
        return Tensor(t.name, tuple(int(d) for d in t.data.shape), Q.F32, lambda: np.asarray(t.data, dtype=np.float32))

    def extra_tensor(layer: int, suffix: str, t) -> Tensor:
        def data() -> np.ndarray:
            base = np.asarray(t.data, dtype=np.float32)
            return (base * np.float32(eps)).astype(np.float32) if suffix.split(".")[0] in SCALED else base

        return Tensor(f"blk.{layer}.{suffix}", tuple(int(d) for d in t.data.shape), Q.F32, data)

    tensors = [copy(t) for t in reader.tensors]  # the base model, in its own order
    for j in range(extra):
        source = by_block[j % n_layer]
        tensors += [extra_tensor(n_layer + j, suffix, t) for suffix, t in source]
    name = f"{reader.fields['general.name'].contents() if 'general.name' in reader.fields else src.stem} +{extra} blocks eps={eps:g}"
    fields = copied_fields(reader, {f"{ARCH}.block_count": n_layer + extra, "general.name": name})
    alignment = reader.fields.get("general.alignment")
    return write_gguf(dst, fields, tensors, int(alignment.contents()) if alignment is not None else None)


def deepened_name(src: Path, extra: int, eps: float) -> str:
    """The cache file name of a deepened model. Example: (SmolLM2.F32.gguf, 60, 0) -> SmolLM2.F32.deep60-eps0.gguf"""
    stem = src.name[: -len(".gguf")] if src.name.endswith(".gguf") else src.name
    return f"{stem}.deep{extra}-eps{eps:g}.gguf"


# -- random models ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The shape of a llama-architecture model. `quant` is one of QUANTS."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    quant: str = "q4_0"
    ctx: int = 4096

    def check(self) -> None:
        if self.quant not in QUANTS:
            raise ValueError(f"quantization {self.quant!r} is not one of {', '.join(QUANTS)}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"hidden {self.hidden} must divide into {self.heads} heads, and heads into {self.kv_heads} KV heads")
        block = gguf.GGML_QUANT_SIZES[QUANTS[self.quant]][0]
        if self.hidden % block or self.ffn % block:
            raise ValueError(f"hidden and ffn must be multiples of {block} for {self.quant}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        block = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.ffn
        return self.layers * block + self.vocab * self.hidden


# Shapes like Qwen2.5's 0.5B and 7B (llama architecture, no biases, tied output) and a tiny test shape.
SHAPES = {
    "0.5b": Shape(hidden=896, layers=24, heads=14, kv_heads=2, ffn=4864, vocab=152064),
    "7b": Shape(hidden=3584, layers=28, heads=28, kv_heads=4, ffn=18944, vocab=152064),
    "tiny-draft": Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=512, quant="q8_0", ctx=1024),
    "tiny-target": Shape(hidden=128, layers=4, heads=4, kv_heads=2, ffn=256, vocab=512, quant="q8_0", ctx=1024),
}


def random_matrix(rng: np.random.Generator, rows: int, cols: int, quant: str, std: float) -> np.ndarray:
    """A (rows, cols) weight matrix of i.i.d. entries with standard deviation about `std`, in `quant`'s storage.

    Q8_0 and Q4_0 are written as blocks of 32: an f16 scale d, then 32 int8 (Q8_0: w = d q) or
    32 packed nibbles (Q4_0: w = d (q - 8)); both quants are uniform, so d = std / sd(q).
    """
    kind = QUANTS[quant]
    if kind in (Q.F32, Q.F16):
        out = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
        return out if kind == Q.F32 else out.astype(np.float16)
    blocks = cols // 32
    if kind == Q.Q8_0:
        d, payload = std / 73.9, 32  # sd of uniform int8 in [-128, 127]
    else:
        d, payload = std / 4.61, 16  # sd of uniform q - 8 in [-8, 7]
    out = np.empty((rows, blocks, 2 + payload), dtype=np.uint8)
    out[:, :, :2] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    out[:, :, 2:] = rng.integers(0, 256, size=(rows, blocks, payload), dtype=np.uint8)
    return out.reshape(rows, blocks * (2 + payload))


def minimal_tokenizer(n_vocab: int) -> list[Field]:
    """A SentencePiece-style ('llama') vocabulary of `n_vocab` tokens that llama.cpp loads.

    Ids 0-2 are <unk>, <s>, </s>; 3-258 the 256 byte tokens <0x00>..<0xFF> (so any text
    tokenizes); then the space marker, single letters and digits, then letter strings of
    growing length, with and without a leading space marker, until the size is reached.
    Example: minimal_tokenizer(300) ends with tokens like '▁a', 'a', '▁b', 'b', ...
    """
    if n_vocab < 300:
        raise ValueError(f"a minimal tokenizer needs at least 300 tokens, got {n_vocab}")
    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256
    seen = set(tokens)
    for text in _letter_strings():
        if len(tokens) == n_vocab:
            break
        if text not in seen:
            seen.add(text)
            tokens.append(text)
            types.append(T.NORMAL)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    S, A = gguf.GGUFValueType, gguf.GGUFValueType.ARRAY
    return [
        Field("tokenizer.ggml.model", "llama", S.STRING),
        Field("tokenizer.ggml.tokens", tokens, A, S.STRING),
        Field("tokenizer.ggml.scores", scores, A, S.FLOAT32),
        Field("tokenizer.ggml.token_type", [int(t) for t in types], A, S.INT32),
        Field("tokenizer.ggml.unknown_token_id", 0, S.UINT32),
        Field("tokenizer.ggml.bos_token_id", 1, S.UINT32),
        Field("tokenizer.ggml.eos_token_id", 2, S.UINT32),
        Field("tokenizer.ggml.add_bos_token", True, S.BOOL),
        Field("tokenizer.ggml.add_eos_token", False, S.BOOL),
        Field("tokenizer.chat_template", MINIMAL_TEMPLATE, S.STRING),
    ]


def _letter_strings() -> Iterator[str]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    yield "\u2581"
    level = [""]
    while True:
        level = [p + c for p in level for c in alphabet]
        for text in level:
            yield "\u2581" + text
            yield text


def tokenizer_fields(model: Path) -> list[Field]:
    """The tokenizer.* keys of an existing GGUF (e.g. the built-in model's), to reuse in a random one."""
    return list(copied_fields(gguf.GGUFReader(model), prefix="tokenizer."))


def vocab_size(fields: list[Field]) -> int:
    return len(next(f.value for f in fields if f.key == "tokenizer.ggml.tokens"))


def write_random(dst: Path, shape: Shape, seed: int = 0, tokenizer: list[Field] | None = None) -> Path:
    """A llama-architecture GGUF of `shape` with random weights (see the module docstring)."""
    shape.check()
    if tokenizer is None or vocab_size(tokenizer) != shape.vocab:
        tokenizer = minimal_tokenizer(shape.vocab)
    if not any(f.key == "tokenizer.chat_template" for f in tokenizer):
        tokenizer = tokenizer + [Field("tokenizer.chat_template", MINIMAL_TEMPLATE, gguf.GGUFValueType.STRING)]
    S = gguf.GGUFValueType
    a = f"{ARCH}."
    fields = [
        Field("general.name", f"random {shape.hidden}x{shape.layers} {shape.quant} seed {seed}", S.STRING),
        Field("general.file_type", FILE_TYPES[shape.quant], S.UINT32),
        Field("general.quantization_version", 2, S.UINT32),
        Field(a + "context_length", shape.ctx, S.UINT32),
        Field(a + "embedding_length", shape.hidden, S.UINT32),
        Field(a + "block_count", shape.layers, S.UINT32),
        Field(a + "feed_forward_length", shape.ffn, S.UINT32),
        Field(a + "rope.dimension_count", shape.head_dim, S.UINT32),
        Field(a + "attention.head_count", shape.heads, S.UINT32),
        Field(a + "attention.head_count_kv", shape.kv_heads, S.UINT32),
        Field(a + "attention.layer_norm_rms_epsilon", 1e-5, S.FLOAT32),
        Field(a + "rope.freq_base", 10000.0, S.FLOAT32),
        Field(a + "vocab_size", shape.vocab, S.UINT32),
        *tokenizer,
    ]
    # Each tensor gets its own generator (seeded from `seed` and its index), so a file is the
    # same whichever order the tensors are produced in.
    seeds = iter(np.random.SeedSequence(seed).spawn(4 + 9 * shape.layers))
    quant = shape.quant
    kv = shape.kv_heads * shape.head_dim

    def matrix(name: str, rows: int, cols: int, std: float, kind: str = quant) -> Tensor:
        child = next(seeds)
        return Tensor(name, (rows, cols), QUANTS[kind], lambda: random_matrix(np.random.default_rng(child), rows, cols, kind, std))

    def ones(name: str) -> Tensor:
        next(seeds)
        return Tensor(name, (shape.hidden,), Q.F32, lambda: np.ones(shape.hidden, dtype=np.float32))

    h, f = shape.hidden, shape.ffn
    tensors = [matrix("token_embd.weight", shape.vocab, h, 1.0), ones("output_norm.weight")]
    for i in range(shape.layers):
        b = f"blk.{i}."
        tensors += [
            ones(b + "attn_norm.weight"),
            matrix(b + "attn_q.weight", h, h, h**-0.5),
            matrix(b + "attn_k.weight", kv, h, h**-0.5),
            matrix(b + "attn_v.weight", kv, h, h**-0.5),
            matrix(b + "attn_output.weight", h, h, h**-0.5),
            ones(b + "ffn_norm.weight"),
            matrix(b + "ffn_gate.weight", f, h, h**-0.5),
            matrix(b + "ffn_up.weight", f, h, h**-0.5),
            matrix(b + "ffn_down.weight", h, f, f**-0.5),
        ]
    return write_gguf(dst, fields, tensors)
