//! A minimal HTTP/1.1 client over a TCP stream, enough for status codes,
//! headers and small JSON bodies, with no HTTP client crate in the tree for
//! a few tests. One request per connection (`Connection: close`).

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response: status, header lines (`name: value`, names lower-cased) and body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.body).with_context(|| format!("not JSON: {:?}", self.body))
    }
}

/// Sends `method path` to `addr` with an optional JSON `body` and
/// `Authorization` value; reads the whole response.
pub async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    authorization: Option<&str>,
) -> Result<Reply> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let (head, body) = buf.split_once("\r\n\r\n").context("no end of headers")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .context("status line")?
        .parse()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)?
    } else {
        body.to_string()
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// A chunked body's data.
fn unchunk(mut rest: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("chunk size")?;
        let size = usize::from_str_radix(size.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(after.get(..size).context("short chunk")?);
        rest = after.get(size + 2..).context("chunk end")?;
    }
}

/// `POST path` with a JSON body.
pub async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    body: &serde_json::Value,
) -> Result<Reply> {
    request(addr, "POST", path, Some(&body.to_string()), None).await
}

/// `GET path`.
pub async fn get(addr: std::net::SocketAddr, path: &str) -> Result<Reply> {
    request(addr, "GET", path, None, None).await
}
