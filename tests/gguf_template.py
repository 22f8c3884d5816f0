"""Write a copy of a GGUF with another chat template (tokenizer.chat_template), for template tests.

Every other key and every tensor (quantized ones as raw bytes) is copied unchanged:

    write_with_template(draft_path, tmp / "loops.gguf", "{% for i in range(99999) %}...")
"""

from __future__ import annotations

from pathlib import Path

import gguf

TEMPLATE_KEY = "tokenizer.chat_template"


def write_with_template(src: Path, dst: Path, template: str) -> None:
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, arch=reader.fields["general.architecture"].contents(), endianess=reader.endianess)
    alignment = reader.fields.get("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", TEMPLATE_KEY):
            continue  # written by GGUFWriter itself, or replaced below
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    writer.add_key_value(TEMPLATE_KEY, template, gguf.GGUFValueType.STRING)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
