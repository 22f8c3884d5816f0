"""Write a copy of an F32 GGUF whose vocabulary is padded with extra tokens, for engine tests.

Real families pad their vocabularies to different sizes (Qwen2.5 0.5B has 151,936
entries, the 7B 152,064): the extra ids have embedding rows but no text of their own.
`write_padded` reproduces that from any F32 GGUF: it appends `rows` to token_embd (and to
output, if the model has an untied output matrix), appends tokens "[PAD<i>]" of type
UNUSED, and bumps <arch>.vocab_size. Every other key and tensor is copied unchanged, so
the two files differ only in padding.

    write_padded(f32_path, tmp / "padded.gguf", rows=3.0 * embd[[10, 42]])   # two extra ids

Tensors must be F32 (plain float32 arrays); a quantized token_embd would need new rows
in its block format, which this helper does not write.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

PADDED_TENSORS = ("token_embd.weight", "output.weight")


def read_f32_tensor(path: Path, name: str) -> np.ndarray:
    """One F32 tensor as a (rows, cols) float32 array (numpy order: the row is the last GGUF dimension)."""
    reader = gguf.GGUFReader(path)
    for tensor in reader.tensors:
        if tensor.name == name:
            if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
                raise ValueError(f"{name} in {path} is {tensor.tensor_type.name}, not F32")
            return np.array(tensor.data, dtype=np.float32)
    raise KeyError(f"{path} has no tensor {name}")


def write_padded(src: Path, dst: Path, rows: np.ndarray) -> int:
    """Write `src` with len(rows) extra vocabulary entries to `dst`; return the new vocabulary size."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    n_vocab = len(tokens)
    rows = np.asarray(rows, dtype=np.float32)
    n_pad = rows.shape[0]
    new_size = n_vocab + n_pad

    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # written by GGUFWriter itself
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == "tokenizer.ggml.tokens":
            value = list(value) + [f"[PAD{i}]" for i in range(n_vocab, new_size)]
        elif field.name == "tokenizer.ggml.token_type":
            value = list(value) + [int(gguf.TokenType.UNUSED)] * n_pad
        elif field.name in ("tokenizer.ggml.scores",):
            value = list(value) + [0.0] * n_pad
        elif field.name == f"{arch}.vocab_size":
            value = new_size
        elif value_type == gguf.GGUFValueType.ARRAY and len(value) == n_vocab and field.name.startswith("tokenizer."):
            raise ValueError(f"{field.name} has one entry per token and no padding rule here")
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)

    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise ValueError(f"{src}: tensor {tensor.name} is {tensor.tensor_type.name}; only F32 files can be padded here")
        data = np.asarray(tensor.data, dtype=np.float32)
        if tensor.name in PADDED_TENSORS:
            assert data.shape == (n_vocab, rows.shape[1]), f"{tensor.name} has shape {data.shape}"
            data = np.concatenate([data, rows], axis=0)
        writer.add_tensor(tensor.name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return new_size
