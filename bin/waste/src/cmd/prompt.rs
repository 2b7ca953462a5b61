//! The prompt flags of `waste run` (in this process) and `waste generate`
//! (to a node), and the Generate input they make.

use anyhow::Result;
use waste_proto::node::v1 as pb;

use crate::load;

#[derive(Debug, clap::Args)]
pub struct PromptArgs {
    /// The prompt text (tokenized with the model's tokenizer).
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    prompt: Option<String>,
    /// The prompt as comma-separated token ids, used as they are (for a
    /// model without a tokenizer).
    #[arg(long)]
    tokens: Option<String>,
    /// Render the prompt as a user turn with the model's chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
}

impl PromptArgs {
    /// The prompt as a Generate request's input: ids, text, or a user turn
    /// (after an optional system turn) for the model's chat template.
    pub fn input(&self) -> Result<pb::generate_request::Input> {
        use pb::generate_request::Input;
        Ok(match (&self.prompt, &self.tokens) {
            (_, Some(ids)) => Input::TokenIds(pb::TokenIds {
                ids: load::parse_tokens(ids)?,
            }),
            (Some(text), None) if self.chat => {
                let mut messages = Vec::new();
                if let Some(system) = &self.system {
                    messages.push(super::chat::message("system", system));
                }
                messages.push(super::chat::message("user", text));
                Input::Messages(pb::Chat {
                    messages,
                    ..Default::default()
                })
            }
            (Some(text), None) => Input::Prompt(text.clone()),
            (None, None) => anyhow::bail!("give --prompt or --tokens"),
        })
    }
}
