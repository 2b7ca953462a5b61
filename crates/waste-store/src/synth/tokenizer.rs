//! A byte-level tokenizer for synthetic stores: one token per byte (GPT-2's
//! byte-to-character table, no merges) plus three specials, so any text
//! encodes and any id decodes, with a vocabulary of 259 that keeps the
//! random embedding and head small. Written as a Hugging Face
//! `tokenizer.json` and `tokenizer_config.json` (with a plain chat template).

use serde_json::{Map, Value, json};

/// Ids of the special tokens (after the 256 byte tokens).
pub const BOS: usize = 256;
pub const EOS: usize = 257;
pub const PAD: usize = 258;
pub const VOCAB: usize = 259;

/// GPT-2's printable stand-in for each byte (`bytes_to_unicode`).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| {
        (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("below 0x200")
}

/// `tokenizer.json`.
pub fn tokenizer_json() -> Value {
    let vocab: Map<String, Value> = (0..=255u8)
        .map(|b| (byte_char(b).to_string(), json!(b)))
        .collect();
    let special = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(BOS, "<|bos|>"), special(EOS, "<|eos|>"), special(PAD, "<|pad|>")],
        "normalizer": null, "pre_tokenizer": byte_level.clone(), "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": []},
    })
}

/// `tokenizer_config.json`: specials and a minimal chat template.
pub fn tokenizer_config_json() -> Value {
    json!({
        "bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
        "add_bos_token": false,
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_has_a_distinct_character() {
        let chars: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(chars.len(), 256);
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(b' '), '\u{120}');
        let t = tokenizer_json();
        assert_eq!(t["model"]["vocab"].as_object().unwrap().len(), 256);
    }
}
