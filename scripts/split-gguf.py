#!/usr/bin/env python3
"""Splits a GGUF file into parts the way llama.cpp does, with gguf-py's own
writer (`GGUFWriter(split_max_tensors=N)`, the code behind
`convert_hf_to_gguf.py --split-max-tensors`): parts named
`{prefix}-{i:05}-of-{n:05}.gguf`, each a complete GGUF; the first holds all
the metadata, every part `split.no`, `split.count`, `split.tensors.count`.
The split GGUF tests read what this writes, as an independent check of
waste's reader against the reference writer.

Usage: split-gguf.py SRC.gguf OUT_DIR/PREFIX.gguf MAX_TENSORS_PER_PART
(pinned: gguf==0.17.1 numpy==2.4.6, see scripts/test-env.sh).
"""

import sys

from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, GGUFWriter


def main() -> None:
    src, out, per_part = sys.argv[1], sys.argv[2], int(sys.argv[3])
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch, split_max_tensors=per_part)
    for key, field in reader.fields.items():
        # The writer writes these itself (the header counts, the architecture).
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        main_type = field.types[0]
        sub_type = field.types[-1] if main_type == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), main_type, sub_type=sub_type)
    for t in reader.tensors:
        # Raw bytes, so any ggml type copies as is; shape in numpy order, the
        # last dimension of a block type in bytes (as the writer expects).
        shape = [int(d) for d in reversed(t.shape.tolist())]
        qk, size = GGML_QUANT_SIZES[t.tensor_type]
        if qk > 1:
            shape[-1] = shape[-1] // qk * size
        writer.add_tensor(t.name, t.data, raw_shape=shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
