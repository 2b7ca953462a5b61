//! Streaming detokenization ([`DecodeStream`]): turns generated ids into text as soon as the text
//! is final. It owns no tokenizer state of its own beyond the window of recent ids; decoding is
//! the wrapper's ([`Tokenizer::decode`]).

use super::{Result, Tokenizer, TokenizerError};

/// Incremental detokenizer: feed generated ids one at a time and get text only once it forms
/// complete characters.
///
/// Byte-level tokens split multi-byte UTF-8 characters, and decoders such as `Metaspace` change
/// a token's text depending on what precedes it, so decoding a token on its own is wrong. As in
/// `tokenizers`' own `DecodeStream` and TGI, we decode a short window twice — the context
/// already emitted (the prefix) and the context plus the new ids — and emit the difference once
/// it does not end in U+FFFD (an unfinished character). The window then restarts at the ids
/// just emitted, so each step costs a few tokens, not the whole sequence.
///
/// It holds no reference to the tokenizer so that it can live in per-request state next to an
/// `Arc<Tokenizer>`; pass the same tokenizer to every call.
#[derive(Debug, Clone, Default)]
pub struct DecodeStream {
    skip_special_tokens: bool,
    /// Window of ids: `ids[..prefix_index]` is context already emitted, the rest is pending.
    ids: Vec<u32>,
    /// Decoded text of `ids[..prefix_index]`, to cut off the next decode.
    prefix: String,
    prefix_index: usize,
}

impl DecodeStream {
    pub fn new(skip_special_tokens: bool) -> Self {
        Self {
            skip_special_tokens,
            ..Self::default()
        }
    }

    /// Adds one id; returns the text it completes, if any.
    pub fn step(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        let new_text = self.new_text(tokenizer, &text)?;
        // Restart the window at the ids just emitted: they are the context for what follows.
        let emitted = self.ids.len() - self.prefix_index;
        self.ids.drain(..self.prefix_index);
        self.prefix = tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        self.prefix_index = emitted;
        Ok(Some(new_text))
    }

    /// Ends the stream: returns pending text, unfinished characters shown as U+FFFD, so that
    /// everything emitted adds up to `tokenizer.decode(all_ids)`.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<Option<String>> {
        let text = tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        let rest = if text.len() > self.prefix.len() {
            Some(self.new_text(tokenizer, &text)?)
        } else {
            None
        };
        *self = Self::new(self.skip_special_tokens);
        Ok(rest)
    }

    /// `text` minus the prefix. A decoder that rewrites earlier text (never seen with byte-level
    /// or Metaspace decoders) is an error rather than a slice panic or garbled output.
    fn new_text(&self, tokenizer: &Tokenizer, text: &str) -> Result<String> {
        match text.strip_prefix(self.prefix.as_str()) {
            Some(rest) => Ok(rest.to_owned()),
            None => Err(TokenizerError::Decode {
                path: tokenizer.path.clone(),
                message: format!(
                    "streaming decode: {text:?} does not extend the text already emitted {:?}",
                    self.prefix
                ),
            }),
        }
    }
}
