//! The tiktoken codec: byte-level BPE over a rank table, computed exactly as OpenAI's
//! `tiktoken` computes it, for tokenizers that ship `tiktoken.model` (Kimi; see `tiktoken.rs`).
//!
//! tiktoken cuts the text at special tokens, splits each stretch between them with the
//! pre-tokenisation regex, takes a piece that is itself a token as that token, and otherwise
//! starts from single bytes and repeatedly merges the adjacent pair whose concatenation has the
//! lowest rank (the leftmost such pair on a tie). The ranks are of the merged *bytes*, not of a
//! merge list, which is why this is not `tokenizers`' BPE model: that one ranks merges by their
//! place in a list, so the splits of one token (`ab|c`, `a|bc`) get different priorities where
//! tiktoken gives them one, and a tie between them goes by list order, not leftmost. A search
//! over thousands of small tables found no text where that changes the ids, but that is no
//! proof, so waste encodes with this and keeps `tokenizers` for the vocabulary.
//!
//! Decoding is here too: a special token decodes to its UTF-8 bytes, as in tiktoken, where
//! `tokenizers`' byte-level decoder would read a special such as `<|café|>` as stand-in
//! characters. Vocabulary questions (token spellings, ids of names) go to the
//! `tokenizers::Tokenizer` built next to it, which numbers every token the same way.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;

use tokenizers::utils::SysRegex;

/// Ranks, pattern and special tokens of a tiktoken encoding (`tiktoken.Encoding` in Python).
pub(crate) struct TiktokenBpe {
    /// Token bytes → rank; the rank is the token id.
    ranks: HashMap<Vec<u8>, u32>,
    /// The bytes of every rank back to back: rank `r` is `bytes[ends[r - 1]..ends[r]]`.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// The pre-tokenisation regex (`pat_str`).
    pattern: SysRegex,
    /// The special token of id `ends.len() + i`: its text and whether `skip_special_tokens`
    /// drops it (Kimi's tool-call markers are not "special").
    specials: Vec<(String, bool)>,
    /// For each first byte, the indices into `specials` that start with it, longest first, so
    /// the scan for special tokens costs one table look-up per byte of text.
    by_first_byte: Vec<Vec<usize>>,
}

impl fmt::Debug for TiktokenBpe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The rank table has ~160k entries: show its size, not its contents.
        f.debug_struct("TiktokenBpe")
            .field("ranks", &self.ranks.len())
            .field("specials", &self.specials.len())
            .finish_non_exhaustive()
    }
}

impl TiktokenBpe {
    /// `tokens[r]` is the bytes of rank `r`; `specials[i]` the special token of id
    /// `tokens.len() + i`. Specials are matched in the text wherever they occur, as tiktoken's
    /// `allowed_special="all"` and Hugging Face's added tokens do. An error names what is wrong
    /// with the pattern; the caller adds the file.
    pub(crate) fn new(
        tokens: Vec<Vec<u8>>,
        pattern: &str,
        specials: Vec<(String, bool)>,
    ) -> Result<Self, String> {
        let pattern = SysRegex::new(pattern).map_err(|e| format!("bad pattern: {e}"))?;
        let mut bytes = Vec::with_capacity(tokens.iter().map(Vec::len).sum());
        let mut ends = Vec::with_capacity(tokens.len());
        for token in &tokens {
            bytes.extend_from_slice(token);
            ends.push(bytes.len());
        }
        let ranks = tokens.into_iter().zip(0..).collect();
        // Leftmost-longest, as `tokenizers`' added vocabulary matches (tiktoken's own order
        // among specials that prefix each other is that of a hash map, i.e. unspecified).
        let mut longest_first: Vec<usize> = (0..specials.len())
            .filter(|&i| !specials[i].0.is_empty())
            .collect();
        longest_first.sort_by_key(|&i| Reverse(specials[i].0.len()));
        let mut by_first_byte = vec![Vec::new(); 256];
        for i in longest_first {
            by_first_byte[usize::from(specials[i].0.as_bytes()[0])].push(i);
        }
        Ok(Self {
            ranks,
            bytes,
            ends,
            pattern,
            specials,
            by_first_byte,
        })
    }

    /// Text of `ids` (tiktoken's `decode`, invalid UTF-8 replaced by U+FFFD). Ids outside the
    /// vocabulary are skipped, as `tokenizers` skips them.
    pub(crate) fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        let n_ranks = self.ends.len();
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let id = id as usize;
            if id < n_ranks {
                let start = id.checked_sub(1).map_or(0, |prev| self.ends[prev]);
                out.extend_from_slice(&self.bytes[start..self.ends[id]]);
            } else if let Some((content, special)) = self.specials.get(id - n_ranks)
                && !(skip_special_tokens && *special)
            {
                out.extend_from_slice(content.as_bytes());
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Token ids of `text`, special tokens included (tiktoken's `encode(text,
    /// allowed_special="all")`). An error says where pre-tokenisation or a rank look-up failed.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut start = 0;
        while start < text.len() {
            match self.next_special(text, start) {
                Some((at, len, id)) => {
                    self.encode_ordinary(&text[start..at], start, &mut ids)?;
                    ids.push(id);
                    start = at + len;
                }
                None => {
                    self.encode_ordinary(&text[start..], start, &mut ids)?;
                    break;
                }
            }
        }
        Ok(ids)
    }

    /// The first special token at or after byte `from`: `(offset, length, id)`.
    fn next_special(&self, text: &str, from: usize) -> Option<(usize, usize, u32)> {
        if self.specials.is_empty() {
            return None;
        }
        let bytes = text.as_bytes();
        // A special starts with a UTF-8 lead byte, so a match is always on a char boundary.
        (from..bytes.len()).find_map(|at| {
            self.by_first_byte[usize::from(bytes[at])]
                .iter()
                .find(|&&i| bytes[at..].starts_with(self.specials[i].0.as_bytes()))
                .map(|&i| (at, self.specials[i].0.len(), (self.ends.len() + i) as u32))
        })
    }

    /// Encodes text without special tokens. `offset` places `text` in the caller's text for
    /// error messages.
    fn encode_ordinary(&self, text: &str, offset: usize, ids: &mut Vec<u32>) -> Result<(), String> {
        let mut covered = 0;
        for (start, end) in self.pattern.find_iter(text) {
            // Kimi's pattern matches every character, so a gap means the regex engine gave up
            // (its backtracking limit) — an error, where tiktoken would drop or panic.
            if start != covered {
                break;
            }
            covered = end;
            let piece = &text.as_bytes()[start..end];
            match self.ranks.get(piece) {
                // A piece that is a token is that token, even where merging would not reach it.
                Some(&id) => ids.push(id),
                None => self.byte_pair_encode(piece, offset + start, ids)?,
            }
        }
        if covered != text.len() {
            return Err(format!(
                "pre-tokenisation stopped at byte {} of the text (the regex matched nothing \
                 there or hit its backtracking limit)",
                offset + covered
            ));
        }
        Ok(())
    }

    /// tiktoken's `byte_pair_encode` for a piece of two bytes or more that is not a token.
    /// tiktoken rescans all pairs after each merge (O(n²)); a heap of `(rank, start)` with stale
    /// entries skipped picks the same pair — lowest rank, then leftmost — in O(n log n), so a
    /// long run of spaces in a prompt stays cheap.
    fn byte_pair_encode(
        &self,
        piece: &[u8],
        offset: usize,
        ids: &mut Vec<u32>,
    ) -> Result<(), String> {
        let n = piece.len();
        let rank = |start: usize, end: usize| self.ranks.get(&piece[start..end]).copied();
        // Parts are byte ranges; `next[s]` is where the part starting at `s` ends, `prev[s]`
        // where the part before it starts (`NONE` for the first). `alive[s]`: a part starts at s.
        const NONE: usize = usize::MAX;
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|s| s.checked_sub(1).unwrap_or(NONE)).collect();
        let mut alive = vec![true; n];
        // (rank of the concatenation, start of the left part, end of the right part)
        let mut heap: BinaryHeap<Reverse<(u32, usize, usize)>> = (0..n.saturating_sub(1))
            .filter_map(|s| rank(s, s + 2).map(|r| Reverse((r, s, s + 2))))
            .collect();
        while let Some(Reverse((_, left, end))) = heap.pop() {
            let mid = next[left];
            // Stale unless the pair is still two live neighbours spanning left..end (the rank is
            // that of those bytes however they are split, so it is still right).
            if !alive[left] || mid >= n || next[mid] != end {
                continue;
            }
            alive[mid] = false;
            next[left] = end;
            if end < n {
                prev[end] = left;
                if let Some(r) = rank(left, next[end]) {
                    heap.push(Reverse((r, left, next[end])));
                }
            }
            let before = prev[left];
            if before != NONE
                && let Some(r) = rank(before, end)
            {
                heap.push(Reverse((r, before, end)));
            }
        }
        let mut start = 0;
        while start < n {
            let end = next[start];
            let id = rank(start, end).ok_or_else(|| {
                format!(
                    "no rank for the byte(s) {:02x?} at byte {} of the text (the rank table \
                     lacks a single byte)",
                    &piece[start..end],
                    offset + start
                )
            })?;
            ids.push(id);
            start = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tiktoken's `_byte_pair_merge`, transcribed: rescan every pair after each merge. The
    /// specification the heap version must equal.
    fn byte_pair_encode_ref(ranks: &HashMap<Vec<u8>, u32>, piece: &[u8]) -> Vec<u32> {
        let mut bounds: Vec<usize> = (0..=piece.len()).collect();
        loop {
            let best = (0..bounds.len().saturating_sub(2))
                .filter_map(|i| ranks.get(&piece[bounds[i]..bounds[i + 2]]).map(|&r| (r, i)))
                .min();
            match best {
                Some((_, i)) => {
                    bounds.remove(i + 1);
                }
                None => break,
            }
        }
        bounds
            .windows(2)
            .map(|w| ranks[&piece[w[0]..w[1]]])
            .collect()
    }

    /// The 256 bytes, then `extra` (ranks 256..).
    fn table(extra: &[&str]) -> Vec<Vec<u8>> {
        let bytes = (0..=255u8).map(|b| vec![b]);
        bytes
            .chain(extra.iter().map(|t| t.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn heap_merge_equals_the_rescanning_reference() {
        // Deliberately not a trained table: ranks out of creation order, several splits per token.
        let tokens = table(&[
            "ab", "ba", "aba", "bab", "aa", "abab", "baa", "bb", "aab", "abba",
        ]);
        let ranks: HashMap<Vec<u8>, u32> = tokens.iter().cloned().zip(0..).collect();
        let bpe = TiktokenBpe::new(tokens, r"\S+|\s+", Vec::new()).expect("pattern");
        let mut state = 0x2545_f491_u32;
        for len in 2..40 {
            for _ in 0..50 {
                let piece: Vec<u8> = (0..len)
                    .map(|_| {
                        // xorshift: deterministic, no dependency
                        state ^= state << 13;
                        state ^= state >> 17;
                        state ^= state << 5;
                        if state & 1 == 0 { b'a' } else { b'b' }
                    })
                    .collect();
                let mut got = Vec::new();
                bpe.byte_pair_encode(&piece, 0, &mut got)
                    .expect("all bytes ranked");
                assert_eq!(got, byte_pair_encode_ref(&ranks, &piece), "{piece:?}");
            }
        }
    }

    #[test]
    fn specials_split_the_text_leftmost_longest_and_decode_as_utf8() {
        let specials = vec![
            ("<x>".to_owned(), true),
            ("<x>>".to_owned(), true),
            ("<|café|>".to_owned(), false),
        ];
        let bpe = TiktokenBpe::new(table(&[]), r"\S+|\s+", specials).expect("pattern");
        let ids = bpe.encode("a<x>>b<x><|café|>").expect("encode");
        assert_eq!(ids, [97, 257, 98, 256, 258]);
        assert_eq!(bpe.decode(&ids, false), "a<x>>b<x><|café|>");
        assert_eq!(bpe.decode(&ids, true), "ab<|café|>");
        assert_eq!(bpe.decode(&[0xE4, 259, u32::MAX], false), "\u{FFFD}");
        assert_eq!(bpe.encode("").expect("encode"), Vec::<u32>::new());
    }

    #[test]
    fn a_missing_single_byte_or_an_unmatched_stretch_is_an_error() {
        let mut tokens = table(&[]);
        tokens[usize::from(b'z')] = b"zz".to_vec();
        let bpe = TiktokenBpe::new(tokens, r"[a-z]+", Vec::new()).expect("pattern");
        let err = bpe.encode("az").expect_err("z has no rank");
        assert!(err.contains("at byte 1"), "{err}");
        let err = bpe
            .encode("ab cd")
            .expect_err("the pattern skips the space");
        assert!(err.contains("stopped at byte 2"), "{err}");
    }
}
