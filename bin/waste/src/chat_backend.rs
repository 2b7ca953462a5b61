//! Where `waste chat` sends its turns: a running node over gRPC, or a node
//! loaded in this process (a store, or a release run from its files). Either way one Generate request per
//! turn, with the whole conversation and a session id, so the node prefills
//! only the new turn; the answer streams back as text pieces, then stats.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use waste_node::{Config, Node};
use waste_proto::auth::BearerToken;
use waste_proto::node::v1 as pb;
use waste_proto::transport::{Channel, Endpoint};

type Client = pb::node_client::NodeClient<
    waste_proto::tonic::service::interceptor::InterceptedService<Channel, BearerToken>,
>;

pub enum Backend {
    Remote(Client),
    Local(Arc<Node>),
}

/// One piece of a streamed answer.
pub enum Piece {
    Text(String),
    Done(pb::Stats),
}

/// The answer being streamed; dropping it cancels the generation.
pub enum Answer {
    Remote(Box<waste_proto::Streaming<pb::GenerateResponse>>),
    Local(mpsc::Receiver<waste_node::Result<waste_node::generate::Event>>),
}

impl Backend {
    pub async fn remote(url: &str, token: Option<&str>) -> Result<Self> {
        let channel = Endpoint::from_shared(url.to_string())?
            .connect()
            .await
            .with_context(|| format!("connect to {url}"))?;
        let bearer = BearerToken::new(token).map_err(anyhow::Error::msg)?;
        Ok(Self::Remote(pb::node_client::NodeClient::with_interceptor(
            channel, bearer,
        )))
    }

    /// A node in this process on `model`: a store, or a release (a GGUF
    /// file or a Hugging Face folder) run straight from its files.
    pub async fn local(
        model: &std::path::Path,
        ctx_size: Option<usize>,
        cache_type: waste_model::cache::CacheType,
    ) -> Result<Self> {
        let mut cfg = Config {
            ctx_size,
            cache_type,
            max_sessions: 1,
            ..Config::default()
        };
        cfg.set_model(model);
        let node = Node::load(cfg)
            .await
            .with_context(|| format!("load {}", model.display()))?;
        Ok(Self::Local(node))
    }

    pub async fn send(&mut self, req: pb::GenerateRequest) -> Result<Answer> {
        match self {
            Self::Remote(c) => Ok(Answer::Remote(Box::new(
                c.generate(req)
                    .await
                    .map_err(|s| crate::cmd::generate::refused("the node", &s))?
                    .into_inner(),
            ))),
            Self::Local(node) => {
                let job = waste_node::request::job(node, &req)?;
                Ok(Answer::Local(node.start_generation(job, req.session_id)?))
            }
        }
    }
}

impl Answer {
    /// The next piece; None when the stream ended without statistics.
    pub async fn next(&mut self) -> Result<Option<Piece>> {
        use waste_node::generate::Event;
        Ok(match self {
            Self::Remote(s) => match s
                .message()
                .await
                .map_err(|e| crate::cmd::generate::refused("the node", &e))?
                .and_then(|m| m.event)
            {
                Some(pb::generate_response::Event::Token(t)) => Some(Piece::Text(t.text)),
                Some(pb::generate_response::Event::Stats(s)) => Some(Piece::Done(s)),
                None => None,
            },
            Self::Local(rx) => match rx.recv().await.transpose()? {
                Some(Event::Token { text, .. }) => Some(Piece::Text(text)),
                Some(Event::Done(s)) => Some(Piece::Done(waste_node::service::stats(&s))),
                None => None,
            },
        })
    }
}
