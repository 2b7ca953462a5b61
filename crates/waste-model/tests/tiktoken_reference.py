#!/usr/bin/env python3
"""Reference ids for waste's tiktoken tokenizer, from OpenAI's `tiktoken` itself.

Usage: tiktoken_reference.py OUT_DIR

Writes two Kimi-style tokenizer folders (`tiktoken.model` + `tokenizer_config.json`) and prints,
as JSON on stdout, the ids `tiktoken` gives for a list of texts in each:

* OUT_DIR/trained: a small byte-level BPE trained here on tests/data/public_domain.txt plus a
  few lines of other scripts, code and emoji (so there are multi-byte merges), with Kimi's
  pattern and Kimi's special-token layout (named ids from `added_tokens_decoder`, the rest of
  the 256 reserved ids `<|reserved_token_{id}|>`).
* OUT_DIR/untrained: a hand-made table over "a"/"b" whose ranks are not in creation order and
  whose tokens have several splits: where merge order matters most.

No real Kimi `tiktoken.model` is available offline, hence the training. It is deterministic
(ties broken by the pair's bytes) and takes well under a second. Run by
crates/waste-model/tests/tiktoken.rs; needs `pip install tiktoken==0.14.0` and no network.
"""

import base64
import collections
import json
import os
import random
import re
import sys

try:
    import tiktoken
except ImportError:
    sys.stderr.write(
        "tiktoken_reference.py: the Python package tiktoken is missing; "
        "run `python3 -m pip install tiktoken==0.14.0`\n"
    )
    sys.exit(3)

# tokenization_kimi.py's pat_str (the same string as KIMI_PAT_STR in tokenizer/tiktoken.rs).
KIMI_PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
RESERVED = 256
MERGES = 900

EXTRA_TRAINING = """
今天天气很好，我们去公园散步吧。你好，世界！人工智能正在改变世界。
こんにちは、世界。東京は大きな都市です。Привет, мир! Как дела?
def main():\n    for i in range(10):\n        print(f"value: {i}")\n
fn main() {\n    let x: Vec<u32> = (0..10).collect();\n    println!("{:?}", x);\n}\n
👋🌍 🚀🔥 😀😀😀 The year 2024 had 365 days; pi is 3.14159.
"""

# Named special ids, as offsets from the first special id, like Kimi's tokenizer_config.json.
NAMED = {
    0: ("[BOS]", True),
    1: ("[EOS]", True),
    2: ("<|im_end|>", True),
    3: ("<|im_user|>", True),
    4: ("<|im_assistant|>", True),
    6: ("<|start_header_id|>", True),
    7: ("<|end_header_id|>", True),
    10: ("<|im_system|>", True),
    # Kimi's tool-call markers are added tokens with "special": false.
    11: ("<|tool_calls_section_begin|>", False),
    15: ("<|im_middle|>", True),
    # Not in Kimi: a non-ASCII special, which must decode to its UTF-8 bytes as in tiktoken.
    20: ("<|café|>", True),
    255: ("[PAD]", True),
}


def train(text):
    """Byte-level BPE: merge the most frequent adjacent pair, MERGES times."""
    # Training pieces need not follow Kimi's pattern exactly (any rank table is a valid input);
    # Python's `re` has no \\p{...}, so this is a close stand-in.
    pieces = re.findall(
        r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+[\r\n]*|\s+(?!\S)|\s+""", text
    )
    words = collections.Counter(tuple(bytes([b]) for b in p.encode()) for p in pieces)
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(MERGES):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best, count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 2:
            break
        token = best[0] + best[1]
        ranks.setdefault(token, len(ranks))
        merged = collections.Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(token)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return ranks


def write_folder(path, ranks, named):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tiktoken.model"), "w", encoding="ascii") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    n = len(ranks)
    config = {
        "added_tokens_decoder": {
            str(n + off): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for off, (content, special) in sorted(named.items())
        },
        "tokenizer_class": "TikTokenTokenizer",
        "model_max_length": 1048576,
    }
    if named:
        config.update(bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]")
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    names = {n + off: content for off, (content, _) in named.items()}
    # tokenization_kimi.py: every reserved id is special, named or not.
    return {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + RESERVED)}


def trained_texts(n):
    return [
        "",
        "a",
        "Alice was beginning to get very tired of sitting by her sister on the bank,",
        "It is a truth universally acknowledged, that a single man in possession of a good fortune",
        "Zebras quixotically jumped over twelve vexed wizards in Kyrgyzstan.",
        "I'm sure you'll see they've gone; she'd WE'RE DON'T it's",
        "HTTPServerError parseJSONString getHTTPResponseCode XMLHttpRequest",
        "今天天气很好，我们去公园散步吧。",
        "机器学习和深度学习是人工智能的分支",
        "Kimi是一个大模型with 1234567 parameters和2048个专家",
        "こんにちは、世界。カタカナとひらがな",
        "Привет, мир! Ελληνικά και العربية و한국어",
        "café naïve Ünïcödé façade e\u0301 n\u0303",
        "fn main() {\n    let x: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", x);\n}\n",
        "def f(a, b):\n\treturn a ** 2 + b // 3  # comment\n",
        '{"key": [1, 2, 3], "nested": {"x": null, "y": true}}',
        "https://example.com/path/to/page?q=1&r=two#frag",
        "👋🌍 🚀🔥 😀😀😀",
        "👨\u200d👩\u200d👧\u200d👦 🇫🇷🇯🇵 👍🏽",
        "a  b   c    d     e",
        "\n\n\n",
        "   leading spaces and trailing   ",
        "\t\t mixed \r\n\r\n whitespace \u00a0\u3000 end",
        "1234567890 3.14159 -42 1e10 0x1F 1,000,000",
        "!!!???...---***///",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa the the the the",
        "[BOS]Hello[EOS]",
        "<|im_user|>user<|im_middle|>What is 2+2?<|im_end|><|im_assistant|>assistant<|im_middle|>",
        f"<|im_system|>system<|im_middle|>x<|reserved_token_{n + 5}|>y<|reserved_token_{n + 200}|>",
        "<|tool_calls_section_begin|>call[PAD][PAD]<|im_end|",
        "<|café|>想一想<|café|>",
        "[BOS [EOS] <|im_end| |> <|reserved_token_1|>",
    ]


def untrained():
    ranks = {bytes([b]): b for b in range(256)}
    for token in ["ab", "ba", "aba", "bab", "aa", "abab", "baa", "bb", "aab", "abba"]:
        ranks[token.encode()] = len(ranks)
    rng = random.Random(7)
    texts = ["".join(rng.choice("ab") for _ in range(rng.randint(2, 40))) for _ in range(40)]
    return ranks, texts + ["ab ba abab baba aabb bbaa", "abababababababababababab"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tiktoken_reference.py OUT_DIR")
    out = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "../../../tests/data/public_domain.txt"), encoding="utf-8") as f:
        corpus = f.read() + EXTRA_TRAINING

    result = {"tiktoken_version": tiktoken.__version__, "folders": {}}
    un_ranks, un_texts = untrained()
    for name, ranks, named, texts in [
        ("trained", train(corpus), NAMED, None),
        ("untrained", un_ranks, {}, un_texts),
    ]:
        special = write_folder(os.path.join(out, name), ranks, named)
        encoding = tiktoken.Encoding(
            name=f"waste-{name}",
            pat_str=KIMI_PAT_STR,
            mergeable_ranks=ranks,
            special_tokens=special,
        )
        texts = texts if texts is not None else trained_texts(len(ranks))
        cases = [{"text": t, "ids": encoding.encode(t, allowed_special="all")} for t in texts]
        result["folders"][name] = {"n_ranks": len(ranks), "cases": cases}
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
