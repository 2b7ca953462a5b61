#!/usr/bin/env python3
"""Writes the ggml block fixtures of crates/waste-kernels/tests/ggml_blocks.rs.

For every tensor type waste decodes, random blocks (and, where gguf-py can
quantize the type, blocks it quantized from a Gaussian matrix) together with
the float32 values an independent decoder gives for them: gguf-py's
`gguf.quants.dequantize` (pinned gguf==0.17.1, numpy==2.4.6). gguf-py 0.17.1
has no MXFP4; its reference here is a numpy transcription of ggml's C
`dequantize_row_mxfp4` (`mxfp4_reference` below).

Random blocks are random bytes with every f16 scale field overwritten by
`sign * 2^u`, u uniform in [-20, 2) (so some are f16 subnormals), which keeps
all outputs finite; MXFP4's exponent byte is drawn from [0, 250]. The grid
indices of the i-quants are not left to chance: across a type's blocks they
run through a random permutation of every grid entry (`ENUMERATE`), so each
entry of each table is decoded at least once. F16 and BF16 cover every
class of value; the F16 fixture leaves out signalling NaNs, which ggml's C
(like F16C and the `half` crate) quiets and numpy keeps.

File format, one file `<TYPE>.bin` per type, all integers little-endian:
    magic      8 bytes  b"WGGMLFX1"
    type id    u32      ggml type id (ggml.h `enum ggml_type`)
    n_blocks   u32      number of blocks
    block      u32      bytes per block
    qk         u32      weights per block
    blocks     n_blocks * block bytes
    values     n_blocks * qk float32, the reference decode of the blocks

With `--ggml LIB` (the libggml-base.so of a llama-cpp-python install, e.g.
`.../site-packages/llama_cpp/lib/libggml-base.so`) every type ggml
quantizes also gets blocks made by llama.cpp's own quantizer
(`ggml_quantize_chunk`) from a Gaussian matrix, with a uniform importance
matrix for the types that refuse to quantize without one
(`ggml_quantize_requires_imatrix`: IQ1_*, IQ2_XXS, IQ2_XS); they are decoded
by gguf-py like the rest, so the tests check waste's decoders on the blocks
real files hold. The checked-in fixtures were written this way.

Usage (from the repository root):
    python3 -m venv target/pyenv
    target/pyenv/bin/pip install gguf==0.17.1 numpy==2.4.6
    target/pyenv/bin/python scripts/gen-ggml-fixtures.py [--ggml LIB]
"""

import ctypes
import pathlib
import struct
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

# gguf-py 0.17.1 predates MXFP4: its id and geometry from ggml.h
MXFP4 = "MXFP4"
MXFP4_ID, MXFP4_SIZES = 39, (32, 17)

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/waste-kernels/tests/data/ggml"
MAGIC = b"WGGMLFX1"
rng = np.random.default_rng(20250617)

# f16 scale fields (byte offsets) of each block type
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
    T.IQ1_M: [], MXFP4: [],
}

# random blocks per type (32-weight types, 256-weight types)
N_SMALL, N_LARGE = 128, 32
# quantized blocks per type, for the types gguf-py quantizes
N_QUANTIZED = {T.Q4_0: 64, T.Q4_1: 64, T.Q5_0: 64, T.Q5_1: 64, T.Q8_0: 64, T.TQ1_0: 8, T.TQ2_0: 8}


def random_scales(n: int) -> np.ndarray:
    """n f16 scales sign * 2^u, u in [-20, 2), as raw uint16."""
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    v = (sign * np.exp2(rng.uniform(-20, 2, n))).astype(np.float16)
    return v.view(np.uint16)


def set_u16(blocks: np.ndarray, off: int, v) -> None:
    blocks[:, off] = np.asarray(v, dtype=np.uint16) & 0xFF
    blocks[:, off + 1] = np.asarray(v, dtype=np.uint16) >> 8


def get_u16(blocks: np.ndarray, off: int) -> np.ndarray:
    return blocks[:, off].astype(np.uint16) | (blocks[:, off + 1].astype(np.uint16) << 8)


# Grid index setters: (entries per block, grid size, setter(blocks, entry, index array)).
def _iq2xxs(b, e, idx):
    b[:, 2 + 8 * (e // 4) + e % 4] = idx


def _iq2xs(b, e, idx):
    q = get_u16(b, 2 + 2 * e)
    set_u16(b, 2 + 2 * e, (q & ~np.uint16(511)) | idx)


def _iq2s(b, e, idx):
    b[:, 2 + e] = idx & 0xFF
    qh = 2 + 64 + e // 4
    shift = 2 * (e % 4)
    b[:, qh] = (b[:, qh] & ~np.uint8(3 << shift)) | ((idx >> 8) << shift).astype(np.uint8)


def _iq3xxs(b, e, idx):
    b[:, 2 + e] = idx


def _iq3s(b, e, idx):
    b[:, 2 + e] = idx & 0xFF
    qh = 2 + 64 + e // 8
    bit = e % 8
    b[:, qh] = (b[:, qh] & ~np.uint8(1 << bit)) | ((idx >> 8) << bit).astype(np.uint8)


def _iq1s(b, e, idx):
    b[:, 2 + e] = idx & 0xFF
    off = 2 + 32 + 2 * (e // 4)
    shift = 3 * (e % 4)
    q = get_u16(b, off)
    set_u16(b, off, (q & ~np.uint16(7 << shift)) | ((idx >> 8).astype(np.uint16) << shift))


def _iq1m(b, e, idx):
    b[:, e] = idx & 0xFF
    off = 32 + e // 2
    shift = 4 * (e % 2)
    b[:, off] = (b[:, off] & ~np.uint8(7 << shift)) | ((idx >> 8) << shift).astype(np.uint8)


ENUMERATE = {
    T.IQ2_XXS: (32, 256, _iq2xxs),
    T.IQ2_XS: (32, 512, _iq2xs),
    T.IQ2_S: (32, 1024, _iq2s),
    T.IQ3_XXS: (64, 256, _iq3xxs),
    T.IQ3_S: (64, 512, _iq3s),
    T.IQ1_S: (32, 2048, _iq1s),
    T.IQ1_M: (32, 2048, _iq1m),
}


def sizes(ty) -> tuple[int, int]:
    """(weights, bytes) per block."""
    return MXFP4_SIZES if ty == MXFP4 else GGML_QUANT_SIZES[ty]


def random_blocks(ty, n: int) -> np.ndarray:
    qk, size = sizes(ty)
    if ty in ENUMERATE:
        per_block, grid, _ = ENUMERATE[ty]
        n = max(n, -(-grid // per_block))
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in F16_FIELDS[ty]:
        set_u16(b, off, random_scales(n))
    if ty == T.IQ1_M:
        # the f16 d lives in the top nibbles of the four u16 scales
        d = random_scales(n)
        for i in range(4):
            off = 48 + 2 * i
            q = get_u16(b, off) & np.uint16(0x0FFF)
            set_u16(b, off, q | (((d >> (4 * i)) & 0xF) << 12))
    if ty == MXFP4:
        b[:, 0] = rng.integers(0, 251, size=n)
        b[:4, 0] = [0, 1, 2, 250]
    if ty in ENUMERATE:
        per_block, grid, setter = ENUMERATE[ty]
        perm = rng.permutation(n * per_block) % grid
        idx = perm.reshape(n, per_block)
        for e in range(per_block):
            setter(b, e, idx[:, e].astype(np.uint16 if grid > 256 else np.uint8))
    return b


def quantized_blocks(ty: T, n: int) -> np.ndarray:
    qk, size = GGML_QUANT_SIZES[ty]
    x = rng.standard_normal((n, qk)).astype(np.float32) * np.float32(0.05)
    return quants.quantize(x.reshape(1, -1), ty).reshape(n, size)


# blocks per type made by ggml's own quantizer (--ggml), 2 rows of 256
LLAMA_ROWS, LLAMA_ROW = 2, 256


def ggml_blocks(lib: ctypes.CDLL, ty, n_rows: int) -> np.ndarray:
    """Blocks of `ty` quantized by ggml from a Gaussian matrix (its own
    rng, so the other fixtures do not move)."""
    qk, size = sizes(ty)
    type_id = MXFP4_ID if ty == MXFP4 else int(ty)
    x = np.random.default_rng(type_id).standard_normal((n_rows, LLAMA_ROW)).astype(np.float32) * np.float32(0.05)
    out = np.zeros(n_rows * LLAMA_ROW // qk * size, dtype=np.uint8)
    imatrix = None
    if lib.ggml_quantize_requires_imatrix(type_id):
        imatrix = np.ones(LLAMA_ROW, dtype=np.float32).ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    written = lib.ggml_quantize_chunk(
        type_id, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.ctypes.data_as(ctypes.c_void_p),
        0, n_rows, LLAMA_ROW, imatrix)
    assert written == out.size, (ty, written, out.size)
    return out.reshape(-1, size)


def load_ggml(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.POINTER(ctypes.c_float)]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    return lib


def mxfp4_reference(blocks: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_mxfp4: kvalues_mxfp4[q] * E8M0_TO_FP32_HALF(e)."""
    kv = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
    e = blocks[:, 0].astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    d = bits.view(np.float32).reshape(-1, 1)
    qs = blocks[:, 1:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    return kv[q] * d


def reference(ty, blocks: np.ndarray) -> np.ndarray:
    if ty == MXFP4:
        return mxfp4_reference(blocks)
    return quants.dequantize(blocks, ty).astype(np.float32, copy=False)


def float_values(ty: T) -> np.ndarray:
    """Raw element bytes (as a (n, bytes) array) for F32/F16/BF16."""
    if ty == T.F32:
        v = np.concatenate([
            rng.standard_normal(1000).astype(np.float32),
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38], dtype=np.float32),
        ])
        return v.view(np.uint8).reshape(-1, 4)
    bits = rng.integers(0, 1 << 16, size=2048, dtype=np.uint16)
    specials = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0xFE01]
    if ty == T.BF16:
        specials = [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0xFF81]
    bits = np.concatenate([bits, np.array(specials, dtype=np.uint16)])
    if ty == T.BF16:
        # and values gguf-py rounded to bf16 from a Gaussian
        x = np.random.default_rng(16).standard_normal(256).astype(np.float32)
        bits = np.concatenate([bits, quants.quantize(x, T.BF16).view(np.uint16)])
    if ty == T.F16:
        # drop signalling NaNs (see the module doc)
        snan = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0) & ((bits & 0x0200) == 0)
        bits = bits[~snan]
    return bits.view(np.uint8).reshape(-1, 2)


def write(ty, blocks: np.ndarray, values: np.ndarray) -> int:
    qk, size = sizes(ty)
    n = blocks.shape[0]
    assert blocks.shape == (n, size) and blocks.dtype == np.uint8, ty
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(n * qk)
    data = MAGIC + struct.pack("<4I", MXFP4_ID if ty == MXFP4 else int(ty), n, size, qk) + blocks.tobytes() + values.astype("<f4").tobytes()
    name = MXFP4 if ty == MXFP4 else ty.name
    (OUT / f"{name}.bin").write_bytes(data)
    return len(data)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lib = load_ggml(sys.argv[sys.argv.index("--ggml") + 1]) if "--ggml" in sys.argv else None
    total = 0
    for ty in (T.F32, T.F16, T.BF16):
        b = float_values(ty)
        total += write(ty, b, quants.dequantize(b.reshape(-1), ty))
    for ty in F16_FIELDS:
        qk, _ = sizes(ty)
        b = random_blocks(ty, N_SMALL if qk == 32 else N_LARGE)
        if ty in N_QUANTIZED:
            b = np.concatenate([b, quantized_blocks(ty, N_QUANTIZED[ty])])
        if lib is not None:
            b = np.concatenate([b, ggml_blocks(lib, ty, LLAMA_ROWS)])
        v = reference(ty, b)
        assert np.isfinite(v).all(), ty
        total += write(ty, b, v)
    print(f"wrote {len(F16_FIELDS) + 3} fixtures, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
