#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/.

Seeds are small, valid or nearly valid inputs cut from the shared fixtures
(safetensors shards, GGUF files) and from stores converted from them (index
and manifest JSON, layer-file headers, expert records), plus hand-written
protobuf requests. libFuzzer mutates from there. Deterministic: running it
twice writes the same files.

    python3 fuzz/make_seeds.py [STORE_DIR ...]

STORE_DIR: folders written by `waste convert` (manifest.json, experts/);
see fuzz/README.md for the commands that made the checked-in ones.
"""

import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "..", "shared", "fixtures")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- safetensors -----------------------------------------------------------


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors_seeds():
    fixtures = ["qwen3_moe_tiny", "deepseek_v3_tiny", "deepseek_v3_tiny_fp8",
                "deepseek_v3_tiny_int4", "mixtral_tiny", "kimi_linear_tiny"]
    for fx in fixtures:
        header, data = read_safetensors(os.path.join(FIXTURES, fx, "model.safetensors"))
        meta = header.pop("__metadata__", None)
        # One expert's matrices with every quantization part, a router and a norm of layer 1.
        keep = sorted(k for k in header if ".layers.1." in k and (
            ".experts.0." in k or "layernorm" in k or k.endswith("mlp.gate.weight")
            or "e_score_correction_bias" in k))
        tensors = []
        for k in keep:
            a, b = header[k]["data_offsets"]
            if b - a <= 8192:  # small seeds keep libFuzzer's input length (and time per run) low
                tensors.append((k, header[k]["dtype"], header[k]["shape"], data[a:b]))
        whole = write_safetensors(tensors, meta)
        put("safetensors", f"{fx}.safetensors", whole)
        put("safetensors", f"{fx}_truncated.safetensors", whole[: len(whole) * 2 // 3])
        if tensors:
            name, dtype, shape, raw = tensors[0]
            put("safetensors", f"{fx}_one.safetensors", write_safetensors([(name, dtype, shape, raw)]))
            bad = [(name, dtype, [s + 1 for s in shape], raw)]
            put("safetensors", f"{fx}_bad_shape.safetensors", write_safetensors(bad))
    put("safetensors", "empty.safetensors", write_safetensors([]))
    put("safetensors", "dtypes.safetensors", write_safetensors([
        ("a.weight", "F32", [2, 2], bytes(16)),
        ("b.weight", "F16", [4], bytes(8)),
        ("c.weight", "BF16", [2, 3], bytes(12)),
        ("d.weight", "F8_E4M3", [4, 4], bytes(16)),
        ("d.weight_scale_inv", "F32", [1, 1], struct.pack("<f", 1.0)),
        ("e.weight", "I8", [8], bytes(8)),
        ("f.weight", "U8", [8], bytes(8)),
        ("g.weight", "I64", [1], bytes(8)),
    ], {"format": "pt"}))
    put("safetensors", "huge_len.safetensors", struct.pack("<Q", 1 << 62) + b"{}")
    put("safetensors", "short.safetensors", b"\x02\x00\x00")


# --- GGUF ------------------------------------------------------------------

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.p:self.p + n]
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def gguf_metadata(path):
    r = Reader(open(path, "rb").read())
    assert r.b[:4] == b"GGUF"
    r.p = 8
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kv = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        kv.append((k, t, r.value(t)))
    return kv


def enc_value(t, v):
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(enc_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def write_gguf(kv, tensors, version=3, alignment=32):
    """tensors: list of (name, dims, ggml type, raw bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for k, t, v in kv:
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + enc_value(t, v)
    off, data = 0, b""
    for name, dims, ty, raw in tensors:
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ty, off)
        pad = -len(raw) % alignment
        data += raw + bytes(pad)
        off += len(raw) + pad
    out += bytes(-len(out) % alignment)
    return out + data


def gguf_seeds():
    tiny = [
        (b"token_embd.weight", [8, 4], 0, struct.pack("<32f", *[i / 8 for i in range(32)])),
        (b"output_norm.weight", [8], 1, bytes(16)),  # f16
        (b"blk.0.ffn_gate_exps.weight", [32, 2], 8, bytes(68)),  # q8_0: 34 bytes per 32
        (b"blk.0.attn_q.weight", [32], 2, bytes(18)),  # q4_0
    ]
    for name in ["qwen3_moe_tiny.f32.gguf", "mixtral_tiny.f32.gguf", "qwen3_moe_tiny.q8_0.gguf"]:
        kv = gguf_metadata(os.path.join(FIXTURES, "gguf", name))
        stem = name.replace(".gguf", "")
        put("gguf", f"{stem}_meta.gguf", write_gguf(kv, []))
        full = write_gguf(kv, tiny)
        put("gguf", f"{stem}_tiny_tensors.gguf", full)
        put("gguf", f"{stem}_v2.gguf", write_gguf(kv, tiny, version=2))
        put("gguf", f"{stem}_truncated.gguf", full[: len(full) // 2])
        no_tok = [x for x in kv if not x[0].startswith(b"tokenizer.")]
        put("gguf", f"{stem}_no_tokenizer.gguf", write_gguf(no_tok, tiny))
        put("gguf", f"{stem}_dup_key.gguf", write_gguf(no_tok + no_tok[:1], []))
        align = [(k, t, v) for k, t, v in no_tok if k != b"general.alignment"]
        align.append((b"general.alignment", 4, 64))
        put("gguf", f"{stem}_align64.gguf", write_gguf(align, tiny, alignment=64))
    put("gguf", "empty_v3.gguf", write_gguf([], []))
    put("gguf", "big_endian.gguf", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    put("gguf", "huge_counts.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))
    kinds = [(b"u8", 0, 1), (b"i8", 1, -1), (b"u16", 2, 2), (b"i16", 3, -2), (b"u32", 4, 3),
             (b"i32", 5, -3), (b"f32", 6, 0.5), (b"bool", 7, True), (b"str", 8, b"x"),
             (b"u64", 10, 4), (b"i64", 11, -4), (b"f64", 12, 0.25),
             (b"arr", 9, (4, [1, 2, 3])), (b"nested", 9, (9, [(8, [b"a"])]))]
    put("gguf", "all_types.gguf", write_gguf(kinds, []))


# --- store files and records -----------------------------------------------


def store_seeds(stores):
    for i, store in enumerate(stores):
        manifest = open(os.path.join(store, "manifest.json"), "rb").read()
        put("store_index", f"manifest_{i}.json", manifest)
        index = open(os.path.join(store, "experts", "index.json"), "rb").read()
        put("store_index", f"index_{i}.json", index)
        idx = json.loads(index)
        variant = dict(idx, format_version={"major": 9, "minor": 0}) if "format_version" in idx else idx
        put("store_index", f"index_{i}_major9.json", json.dumps(variant).encode())
        if idx["layers"]:
            lay = dict(idx["layers"][0], checksums=[])
            put("store_index", f"index_{i}_no_checksums.json",
                json.dumps(dict(idx, layers=[lay])).encode())
        put("store_index", f"index_{i}_truncated.json", index[: len(index) // 2])
        for layer in idx["layers"][:2]:
            raw = open(os.path.join(store, "experts", layer["file"]), "rb").read()
            put("store_index", f"layer_header_{i}_{layer['layer']}.bin", raw[: layer["data_offset"]][:4096])
            for e in range(min(2, layer["n_experts"])):
                a = layer["data_offset"] + e * layer["stride"]
                rec = raw[a:a + layer["record_len"]]
                if len(rec) > 32768:  # f32 records: the header and bounds are the target, not FFN time
                    continue
                tag = f"{i}_{idx['expert_format']}_{layer['layer']}_{e}"
                put("expert_record", f"record_{tag}.bin", rec)
            rec = raw[layer["data_offset"]:layer["data_offset"] + layer["record_len"]]
            put("expert_record", f"record_{i}_truncated.bin", rec[: len(rec) // 2])
            put("expert_record", f"record_{i}_header.bin", rec[:64])
    put("store_index", "empty.json", b"{}")
    put("store_index", "not_json.json", b"\x00\xff{")


# --- protobuf requests -----------------------------------------------------


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    if wire == 5:
        return key + payload
    raise ValueError(wire)


def msg(*fields):
    return b"".join(fields)


def request_seeds():
    def expert(layer, e):
        return field(1, 2, msg(field(1, 0, layer), field(2, 0, e)))

    fetch = {
        "fetch_one": msg(expert(0, 1), field(2, 0, 1)),
        "fetch_prefetch": msg(expert(0, 1), expert(2, 7), field(2, 0, 2)),
        "fetch_duplicate": msg(expert(0, 1), expert(0, 1)),
        "fetch_unknown_layer": msg(expert(1, 0)),
        "fetch_out_of_range": msg(expert(2, 8)),
        "fetch_empty": b"",
        "fetch_bad_priority": msg(expert(0, 0), field(2, 0, 99)),
    }
    for name, m in fetch.items():
        put("store_request", name + ".bin", b"\x00" + m)

    def route(tok, e, w):
        return field(5, 2, msg(field(1, 0, tok), field(2, 0, e), field(3, 5, struct.pack("<f", w))))

    acts = struct.pack("<64f", *[0.01 * i for i in range(64)])
    compute = {
        "compute_one": msg(field(1, 0, 0), field(2, 0, 1), field(3, 0, 64), field(4, 2, acts),
                           route(0, 1, 0.5), route(0, 3, 0.5)),
        "compute_two_tokens": msg(field(1, 0, 2), field(2, 0, 2), field(3, 0, 64), field(4, 2, acts + acts),
                                  route(0, 1, 1.0), route(1, 1, 1.0), field(6, 0, 9)),
        "compute_short_acts": msg(field(1, 0, 0), field(2, 0, 1), field(3, 0, 64), field(4, 2, acts[:8])),
        "compute_bad_token": msg(field(1, 0, 0), field(2, 0, 1), field(3, 0, 64), field(4, 2, acts),
                                 route(5, 1, 0.5)),
        "compute_nan_weight": msg(field(1, 0, 0), field(2, 0, 1), field(3, 0, 64), field(4, 2, acts),
                                  route(0, 1, float("nan"))),
        "compute_huge_tokens": msg(field(1, 0, 0), field(2, 0, 0xFFFFFFFF), field(3, 0, 0xFFFFFFFF)),
    }
    for name, m in compute.items():
        put("store_request", name + ".bin", b"\x01" + m)

    def chat(*turns, kwargs=None):
        m = b"".join(field(1, 2, msg(field(1, 2, r.encode()), field(2, 2, c.encode()))) for r, c in turns)
        if kwargs is not None:
            m += field(3, 2, kwargs.encode())
        return m

    def sampling(**o):
        m = b""
        if "max_tokens" in o:
            m += field(1, 0, o["max_tokens"])
        if "temperature" in o:
            m += field(2, 5, struct.pack("<f", o["temperature"]))
        if "top_k" in o:
            m += field(3, 0, o["top_k"])
        if "top_p" in o:
            m += field(4, 5, struct.pack("<f", o["top_p"]))
        for s in o.get("stop", []):
            m += field(10, 2, s.encode())
        for t in o.get("stop_token_ids", []):
            m += field(11, 0, t)
        if o.get("ignore_eos"):
            m += field(12, 0, 1)
        return m

    ids = msg(*(field(1, 0, i) for i in [1, 2, 3, 500]))
    generate = {
        "gen_prompt": field(1, 2, b"Hello there"),
        "gen_prompt_sampling": msg(field(1, 2, b"Once upon a time"),
                                   field(4, 2, sampling(max_tokens=8, temperature=0.7, top_k=5, top_p=0.9,
                                                        stop=["\n\n", "</s>"], stop_token_ids=[2]))),
        "gen_chat": field(2, 2, chat(("system", "Be brief."), ("user", "Hi!"))),
        "gen_chat_kwargs": field(2, 2, chat(("user", "Hi"), ("assistant", "Hel"),
                                            kwargs='{"enable_thinking": false}')),
        "gen_chat_bad_kwargs": field(2, 2, chat(("user", "Hi"), kwargs="[1,")),
        "gen_chat_bad_role": field(2, 2, chat(("robot", "Hi"))),
        "gen_ids": field(3, 2, ids),
        "gen_ids_out_of_vocab": field(3, 2, msg(field(1, 0, 1 << 31))),
        "gen_empty_prompt": field(1, 2, b""),
        "gen_nothing": b"",
        "gen_nan_temperature": msg(field(1, 2, b"x"), field(4, 2, sampling(temperature=float("nan")))),
        "gen_negative_top_p": msg(field(1, 2, b"x"), field(4, 2, sampling(top_p=-1.0))),
        "gen_long_stops": msg(field(1, 2, b"x"), field(4, 2, sampling(stop=["a" * 300] * 20))),
        "gen_session_logprobs": msg(field(1, 2, "é日🦀".encode()), field(5, 2, b"s1"), field(6, 0, 1)),
    }
    for name, m in generate.items():
        put("node_request", name + ".bin", b"\x00" + m)
    tokenize = {
        "tok_text": msg(field(1, 2, b"Hello world"), field(3, 0, 1)),
        "tok_chat": field(2, 2, chat(("user", "Hi"))),
        "tok_empty": b"",
        "tok_invalid_utf8": field(1, 2, b"\xff\xfe"),
    }
    for name, m in tokenize.items():
        put("node_request", name + ".bin", b"\x01" + m)


def http_seeds():
    chat = {
        "chat_min": {"messages": [{"role": "user", "content": "Hi"}]},
        "chat_full": {"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                                     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                      "temperature": 0.7, "top_p": 0.9, "top_k": 5, "max_tokens": 8, "stop": ["\n", "</s>"],
                      "seed": 3, "stream": True, "stream_options": {"include_usage": True},
                      "logprobs": True, "top_logprobs": 2, "session_id": "s1", "ignore_eos": True,
                      "response_format": {"type": "json_object"}, "stop_token_ids": [2],
                      "chat_template_kwargs": {"enable_thinking": False}},
        "chat_tools": {"messages": [{"role": "user", "content": "weather?"},
                                    {"role": "assistant", "tool_calls": [{"type": "function", "function":
                                        {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
                                    {"role": "tool", "content": "sunny"}],
                       "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
                       "tool_choice": "auto"},
        "chat_bad_role": {"messages": [{"role": "robot", "content": "Hi"}]},
        "chat_bad_top_logprobs": {"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 99},
        "chat_negative_temperature": {"messages": [{"role": "user", "content": "Hi"}], "temperature": -1},
    }
    for name, body in chat.items():
        put("http_request", name + ".json", b"\x00" + json.dumps(body).encode())
    put("http_request", "chat_not_json.json", b"\x00{\"messages\": [")
    text = {
        "text_min": {"prompt": "Once upon a time"},
        "text_ids": {"prompt": [1, 2, 3, 500], "max_tokens": 4, "echo": True, "logprobs": 2},
        "text_list": {"prompt": ["a", "b"], "n": 2},
        "text_suffix": {"prompt": "x", "suffix": "y"},
        "text_out_of_vocab": {"prompt": [1 << 31]},
    }
    for name, body in text.items():
        put("http_request", name + ".json", b"\x01" + json.dumps(body).encode())


def fetch_seeds():
    """FetchExperts response streams: gRPC frames of ExpertChunk messages."""

    def chunk(layer, expert, offset, total, checksum, data):
        m = b""
        if layer:
            m += field(1, 0, layer)
        if expert:
            m += field(2, 0, expert)
        if offset:
            m += field(3, 0, offset)
        if total:
            m += field(4, 0, total)
        if checksum:
            m += varint((5 << 3) | 1) + struct.pack("<Q", checksum)  # fixed64
        if data:
            m += field(6, 2, data)
        return b"\x00" + struct.pack(">I", len(m)) + m

    record = bytes(range(256)) * 32
    whole = chunk(1, 2, 0, 8192, 0x1234, record)
    halves = chunk(1, 3, 0, 8192, 0x99, record[:4096]) + chunk(1, 3, 4096, 8192, 0x99, record[4096:])
    streams = {
        "one_record": whole,
        "two_halves": halves,
        "both": whole + halves,
        "unknown_expert": chunk(1, 9, 0, 8192, 1, record),
        "wrong_total": chunk(1, 0, 0, 100, 1, record[:100]),
        "overlap": chunk(1, 1, 0, 8192, 5, record[:4096]) + chunk(1, 1, 2048, 8192, 5, record[:4096]),
        "huge_prefix": b"\x00\xff\xff\xff\xff",
        "compressed_flag": b"\x01" + whole[1:],
        "truncated": whole[:100],
    }
    for cut in (1, 7, 255):
        for name, data in streams.items():
            put("fetch_chunks", f"{name}_cut{cut}.bin", bytes([cut]) + data)


def main():
    safetensors_seeds()
    gguf_seeds()
    store_seeds(sys.argv[1:])
    request_seeds()
    http_seeds()
    fetch_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
