//! Streamable HTTP (2026-07-28), client side: one POST per request with the
//! SEP-2243 headers, JSON or SSE answers, bounded bodies, bearer tokens.

use std::collections::VecDeque;
use std::time::Duration;

use base64::Engine;
// The chunk type of reqwest's body stream.
use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE};

use super::sse::{SseDecoder, SseItem};
use super::{MessageStream, Outgoing, answer_of, snippet};
use crate::client::{ClientConfig, ClientError, Violation};
use crate::model::{JsonObject, JsonRpcMessage, PROTOCOL_VERSION, RequestId};

/// A Streamable HTTP endpoint.
#[derive(Debug)]
pub(crate) struct HttpTransport {
    http: reqwest::Client,
    url: reqwest::Url,
    token: Option<String>,
    max_bytes: usize,
    timeout: Duration,
    idle: Duration,
}

impl HttpTransport {
    /// A transport for the MCP endpoint at `url`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] for a malformed URL, a scheme other than
    /// `http` (this build has no TLS) or a token that is not a header value.
    pub(crate) fn new(url: &str, token: Option<String>, config: &ClientConfig) -> Result<Self, ClientError> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| ClientError::Config(format!("invalid URL {url:?}: {e}")))?;
        match parsed.scheme() {
            "http" => {}
            "https" => {
                return Err(ClientError::Config(format!(
                    "{url}: https is not supported: this build of subtask has no TLS (it is meant for \
                     servers on this machine); use an http:// URL, or a TLS-terminating proxy that \
                     listens on http://127.0.0.1"
                )));
            }
            other => {
                return Err(ClientError::Config(format!(
                    "{url}: unsupported URL scheme {other:?}; use http://HOST:PORT/mcp"
                )));
            }
        }
        if let Some(t) = &token
            && (t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(ClientError::Config(
                "the bearer token must be non-empty visible ASCII without spaces".to_owned(),
            ));
        }
        // With `oauth`, reqwest's rustls needs a provider (`crate::tls`).
        #[cfg(feature = "oauth")]
        crate::tls::install_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpTransport {
            http,
            url: parsed,
            token,
            max_bytes: config.limits.max_response_bytes,
            timeout: config.request_timeout,
            idle: config.subscription_idle_timeout,
        })
    }

    fn post(&self, out: &Outgoing) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .header("Mcp-Method", encode_header_value(&out.method))
            .body(out.body.clone());
        if let Some(name) = &out.name {
            rb = rb.header("Mcp-Name", encode_header_value(name));
        }
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    fn send_error(&self, e: &reqwest::Error) -> ClientError {
        if e.is_timeout() {
            ClientError::Timeout(format!("no answer from {} within {:?}", self.url, self.timeout))
        } else if e.is_builder() {
            ClientError::Config(format!("cannot build the request: {e}"))
        } else {
            let mut msg = format!("cannot reach {}: {e}", self.url);
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            ClientError::Connection(msg)
        }
    }

    /// Sends one request and returns its result object.
    pub(crate) async fn request(&self, out: Outgoing) -> Result<JsonObject, ClientError> {
        let resp = self
            .post(&out)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.send_error(&e))?;
        let status = resp.status().as_u16();
        if is_sse(&resp) {
            return answer_of_sse(self.sse_messages(resp, false), &out).await;
        }
        let body = self.read_body(resp).await?;
        interpret(&out.id, status, &body)
    }

    async fn read_body(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, ClientError> {
        let limit = self.max_bytes;
        if resp.content_length().is_some_and(|n| n > limit as u64) {
            return Err(Violation::ResponseTooLarge { limit }.into());
        }
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.send_error(&e))? {
            if buf.len() + chunk.len() > limit {
                return Err(Violation::ResponseTooLarge { limit }.into());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    }

    /// Opens a `subscriptions/listen` stream.
    pub(crate) async fn listen(&self, out: Outgoing) -> Result<MessageStream, ClientError> {
        let resp = tokio::time::timeout(self.timeout, self.post(&out).send())
            .await
            .map_err(|_| {
                ClientError::Timeout(format!("no answer from {} within {:?}", self.url, self.timeout))
            })?
            .map_err(|e| self.send_error(&e))?;
        let status = resp.status().as_u16();
        if !is_sse(&resp) {
            let body = tokio::time::timeout(self.timeout, self.read_body(resp))
                .await
                .map_err(|_| ClientError::Timeout("reading the answer to subscriptions/listen".into()))??;
            return Err(listen_answered_at_once(&out.id, status, &body));
        }
        Ok(self.sse_messages(resp, true))
    }

    /// The JSON-RPC messages of an SSE body. With `idle`, a stream silent
    /// for longer than the idle timeout ends with an error.
    fn sse_messages(&self, resp: reqwest::Response, idle: bool) -> MessageStream {
        let body = resp.bytes_stream().map(|r| r.map_err(|e| e.to_string())).boxed();
        sse_messages(body, self.max_bytes, idle.then_some(self.idle))
    }
}

/// The error for a `subscriptions/listen` answered with a plain body
/// instead of a stream: the server's error, or a protocol error.
pub(super) fn listen_answered_at_once(id: &RequestId, status: u16, body: &[u8]) -> ClientError {
    match interpret(id, status, body) {
        Ok(_) => ClientError::Protocol(
            "subscriptions/listen was answered at once instead of with a stream".to_owned(),
        ),
        Err(e) => e,
    }
}

/// The answer to `out` in an SSE body: request-scoped notifications are
/// skipped until the response arrives (bounded by the request timeout).
pub(super) async fn answer_of_sse(
    mut messages: MessageStream,
    out: &Outgoing,
) -> Result<JsonObject, ClientError> {
    while let Some(m) = messages.next().await {
        let m = m?;
        if matches!(m, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) {
            return answer_of(&out.id, m);
        }
    }
    Err(ClientError::Protocol(format!(
        "the SSE answer to {} ended without a response",
        out.method
    )))
}

/// The JSON-RPC messages of an SSE body (events and lines cut at
/// `max_bytes`). With `idle`, a stream silent for longer ends with an error.
pub(super) fn sse_messages(
    body: futures::stream::BoxStream<'static, Result<Bytes, String>>,
    max_bytes: usize,
    idle: Option<Duration>,
) -> MessageStream {
    struct State {
        body: futures::stream::BoxStream<'static, Result<Bytes, String>>,
        decoder: SseDecoder,
        ready: VecDeque<JsonRpcMessage>,
        done: bool,
        idle: Option<Duration>,
    }
    let state = State {
        body,
        decoder: SseDecoder::new(max_bytes),
        ready: VecDeque::new(),
        done: false,
        idle,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(m) = st.ready.pop_front() {
                return Some((Ok(m), st));
            }
            if st.done {
                return None;
            }
            let next = match st.idle {
                Some(d) => match tokio::time::timeout(d, st.body.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        st.done = true;
                        let e = ClientError::Timeout(format!("the stream was silent for {d:?}"));
                        return Some((Err(e), st));
                    }
                },
                None => st.body.next().await,
            };
            let mut items = Vec::new();
            let fed = match next {
                Some(Ok(chunk)) => st.decoder.push(&chunk, &mut items),
                Some(Err(e)) => {
                    st.done = true;
                    let e = ClientError::Connection(format!("the stream broke: {e}"));
                    return Some((Err(e), st));
                }
                None => {
                    st.done = true;
                    st.decoder.finish();
                    Ok(())
                }
            };
            if let Err(v) = fed {
                st.done = true;
                return Some((Err(v.into()), st));
            }
            for item in items {
                if let SseItem::Event(data) = item {
                    match JsonRpcMessage::parse(data.as_bytes()) {
                        Ok(m) => st.ready.push_back(m),
                        Err(e) => {
                            st.done = true;
                            let e = ClientError::Protocol(format!(
                                "an SSE event is not a JSON-RPC message: {}",
                                e.error.message
                            ));
                            return Some((Err(e), st));
                        }
                    }
                }
            }
        }
    })
    .boxed()
}

fn is_sse(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The answer to request `id` in a JSON body with HTTP `status`.
pub(super) fn interpret(id: &RequestId, status: u16, body: &[u8]) -> Result<JsonObject, ClientError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(if (200..300).contains(&status) {
            ClientError::Protocol(format!("empty answer (HTTP {status})"))
        } else {
            ClientError::Http {
                status,
                body: String::new(),
            }
        });
    }
    match JsonRpcMessage::parse(body) {
        Ok(m) => answer_of(id, m),
        Err(e) if (200..300).contains(&status) => Err(ClientError::Protocol(format!(
            "the answer is not a JSON-RPC message: {}",
            e.error.message
        ))),
        Err(_) => Err(ClientError::Http {
            status,
            body: snippet(body, 200),
        }),
    }
}

/// A header value as SEP-2243 wants it: plain when it is visible ASCII or
/// inner spaces, otherwise (or when it looks like the sentinel itself)
/// `=?base64?…?=`.
pub(crate) fn encode_header_value(value: &str) -> String {
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = !value.is_empty()
        && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !sentinel;
    if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_follow_the_spec_examples() {
        assert_eq!(encode_header_value("us-west1"), "us-west1");
        assert_eq!(
            encode_header_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode_header_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }

    #[test]
    fn https_and_other_schemes_are_refused_clearly() {
        let c = ClientConfig::default();
        let e = HttpTransport::new("https://example.com/mcp", None, &c).unwrap_err();
        assert!(e.to_string().contains("https is not supported"), "{e}");
        let e = HttpTransport::new("ftp://x/mcp", None, &c).unwrap_err();
        assert!(e.to_string().contains("unsupported URL scheme"), "{e}");
        let e = HttpTransport::new("not a url", None, &c).unwrap_err();
        assert!(e.to_string().contains("invalid URL"), "{e}");
        let e = HttpTransport::new("http://127.0.0.1:1/mcp", Some("a b".into()), &c).unwrap_err();
        assert!(e.to_string().contains("bearer token"), "{e}");
    }

    #[test]
    fn answers_are_interpreted_by_shape_and_status() {
        let id = RequestId::Number(1);
        let ok = interpret(&id, 200, br#"{"jsonrpc":"2.0","id":1,"result":{"x":1}}"#).unwrap();
        assert_eq!(ok["x"], 1);
        let e = interpret(
            &id,
            400,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
        )
        .unwrap_err();
        assert!(matches!(e, ClientError::Rpc(ref o) if o.code.0 == -32602), "{e}");
        let e = interpret(&id, 502, b"<html>bad gateway</html>").unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 502, .. }), "{e}");
        let e = interpret(&id, 200, b"[1]").unwrap_err();
        assert!(matches!(e, ClientError::Protocol(_)), "{e}");
        let e = interpret(&id, 200, br#"{"jsonrpc":"2.0","id":2,"result":{}}"#).unwrap_err();
        assert!(e.to_string().contains("answer to request 2"), "{e}");
    }
}
