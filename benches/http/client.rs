//! The load generator's HTTP client: one keep-alive connection of the
//! tests' HTTP client (`tests/support/http.rs`, hyper) per client loop.

#[allow(unused_imports)]
use super::*;

/// One keep-alive HTTP/1.1 connection to a server's `/mcp` (hyper's client
/// connection, driven in the client loop's own task). Requests are built
/// with static header values where they can be, and task answers read with
/// byte scans, so the load generator spends little of the CPU the server
/// under test shares with it.
pub(crate) struct Conn {
    pub(crate) conn: http::Connection,
    pub(crate) host: HeaderValue,
    pub(crate) body: Bytes,
    pub(crate) next_id: u64,
    pub(crate) requests: u64,
}

/// Every this many task answers a connection also reads in full with
/// serde_json and checks that the scan read the same fields.
pub(crate) const FULL_READ_EVERY: u64 = 32;

const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> Conn {
        Conn {
            conn: http::Connection::open(addr).await.expect("connect to the server"),
            host: HeaderValue::from_str(&addr.to_string()).expect("an address is a header value"),
            body: Bytes::new(),
            next_id: 1,
            requests: 0,
        }
    }

    /// POSTs one JSON-RPC request (`params` without the `_meta`, which is
    /// added) with the 2026-07-28 headers and returns the answer's body.
    ///
    /// # Panics
    ///
    /// On any HTTP status but 200, an SSE answer or a broken connection:
    /// the bench measures correct answers only.
    pub(crate) async fn call(&mut self, method: &'static str, name: &str, params: &str) -> &[u8] {
        let id = self.next_id;
        self.next_id += 1;
        self.requests += 1;
        let mut digits = [0u8; 20];
        let id = decimal(id, &mut digits);
        let parts = [
            br#"{"jsonrpc":"2.0","id":"#.as_slice(),
            id,
            br#","method":""#,
            method.as_bytes(),
            br#"","params":{"#,
            params.as_bytes(),
            b",",
            META.as_bytes(),
            b"}}",
        ];
        let mut body = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            body.extend_from_slice(part);
        }
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = Uri::from_static("/mcp");
        let headers = request.headers_mut();
        headers.reserve(8);
        headers.insert(HOST, self.host.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(MCP_PROTOCOL_VERSION, HeaderValue::from_static(PROTOCOL));
        headers.insert(MCP_METHOD, HeaderValue::from_static(method));
        headers.insert(
            MCP_NAME,
            HeaderValue::from_str(name).expect("a name is a header value"),
        );
        let answer = self
            .conn
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        self.body = answer.body;
        let status = answer.head.status;
        assert!(
            status == StatusCode::OK,
            "{method} answered HTTP {status}: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert!(
            !answer
                .head
                .headers
                .get(CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream")),
            "the server answered with an SSE stream, not one JSON message"
        );
        &self.body
    }

    /// [`Conn::call`] for an answer that is a task (`CreateTaskResult` or
    /// `GetTaskResult`): its id and status.
    pub(crate) async fn task(&mut self, method: &'static str, name: &str, params: &str) -> TaskFields<'_> {
        let full_read = self.requests.is_multiple_of(FULL_READ_EVERY);
        let body = self.call(method, name, params).await;
        let task = task_of(body);
        if full_read {
            let full = task_read_in_full(body);
            assert!(
                full.task_id == task.task_id && full.status == task.status,
                "the scan and serde_json read different fields from {}",
                String::from_utf8_lossy(body)
            );
        }
        task
    }
}

/// `n` in decimal, written into `buf`.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&c| c == first) {
        let at = from + i;
        if hay[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The fields of a task answer (`CreateTaskResult` or `GetTaskResult`,
/// both flat on the 2026-07-28 wire) the load generator checks.
#[derive(Deserialize)]
pub(crate) struct Answer<'a> {
    #[serde(borrow)]
    pub(crate) result: Option<TaskFields<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct TaskFields<'a> {
    #[serde(rename = "taskId", borrow)]
    pub(crate) task_id: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) status: Cow<'a, str>,
}

/// The id and status of the task in a result answer, by a scan for the
/// first `"taskId":"…"` and `"status":"…"` after `"result":{` (both servers
/// write the task's own fields before its payload); every
/// [`FULL_READ_EVERY`]th answer is also read in full and compared.
///
/// # Panics
///
/// When the answer is not a result with a task (an error answer, say).
pub(crate) fn task_of(body: &[u8]) -> TaskFields<'_> {
    let fail = || -> ! { panic!("not a task result: {}", String::from_utf8_lossy(body)) };
    let result = find(body, br#""result":{"#).unwrap_or_else(|| fail());
    let string_after = |key: &[u8]| -> Cow<'_, str> {
        let at = result + find(&body[result..], key).unwrap_or_else(|| fail()) + key.len();
        let len = body[at..]
            .iter()
            .position(|&c| c == b'"')
            .unwrap_or_else(|| fail());
        let text = &body[at..at + len];
        assert!(
            !text.contains(&b'\\'),
            "an escaped string in {}",
            String::from_utf8_lossy(body)
        );
        Cow::Borrowed(std::str::from_utf8(text).unwrap_or_else(|_| fail()))
    };
    TaskFields {
        task_id: string_after(br#""taskId":""#),
        status: string_after(br#""status":""#),
    }
}

/// The same fields read with serde_json.
pub(crate) fn task_read_in_full(body: &[u8]) -> TaskFields<'_> {
    let answer: Answer<'_> = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("an unreadable answer ({e}): {}", String::from_utf8_lossy(body)));
    answer
        .result
        .unwrap_or_else(|| panic!("an error answer: {}", String::from_utf8_lossy(body)))
}

pub(crate) fn call_params(tool: &str) -> String {
    format!(r#""name":"{tool}","arguments":{{}}"#)
}

pub(crate) fn get_params(task_id: &str) -> String {
    format!(r#""taskId":"{task_id}""#)
}
