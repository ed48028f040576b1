//! The load generator's HTTP client: requests written in one piece over a
//! `TcpStream`, answers parsed by `httparse` (the parser under hyper).
//!
//! The tests' client (`tests/support/http.rs`) is hyper's whole client
//! connection; the load generator does not use it because it shares the
//! machine's two cores with the server under test, and hyper's request
//! building and dispatch cost it 40% more CPU per request (13.3 against
//! 9.3 ms per 1,000 call-complete requests, `SUBTASK_HTTP_ONLY=1k`), which
//! took about 13% off subtask's measured throughput and none off rmcp's.

#[allow(unused_imports)]
use super::*;

/// One keep-alive HTTP/1.1 connection to a server's `/mcp`. Requests are
/// written in one piece and answers read by `Content-Length` (or chunks),
/// so the load generator spends little of the CPU the server under test
/// shares with it.
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) host: String,
    pub(crate) out: Vec<u8>,
    pub(crate) buf: Vec<u8>,
    pub(crate) body: Vec<u8>,
    pub(crate) next_id: u64,
    pub(crate) requests: u64,
    /// An `Authorization` header value sent with every request (`jwt.rs`).
    pub(crate) auth: Option<String>,
    /// The `Mcp-Session-Id` header of the last answer, if it had one
    /// (`turul.rs`).
    pub(crate) session_header: Option<String>,
}

/// Every this many task answers a connection also reads in full with
/// serde_json and checks that the scan read the same fields.
pub(crate) const FULL_READ_EVERY: u64 = 32;

/// How an answer's body is framed.
enum Framing {
    /// `Content-Length` bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect to the server");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Conn {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(1024),
            buf: Vec::with_capacity(8192),
            body: Vec::with_capacity(4096),
            next_id: 1,
            requests: 0,
            auth: None,
            session_header: None,
        }
    }

    /// POSTs one JSON-RPC request (`params` without the `_meta`, which is
    /// added) with the 2026-07-28 headers and returns the answer's body.
    ///
    /// # Panics
    ///
    /// On any HTTP status but 200, an SSE answer or a broken connection:
    /// the bench measures correct answers only.
    pub(crate) async fn call(&mut self, method: &str, name: &str, params: &str) -> &[u8] {
        let id = self.next_id;
        self.next_id += 1;
        self.requests += 1;
        let mut digits = [0u8; 20];
        let id = decimal(id, &mut digits);
        let body = [
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
        let length: usize = body.iter().map(|p| p.len()).sum();
        let mut length_digits = [0u8; 20];
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"POST /mcp HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(
            b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
              MCP-Protocol-Version: ",
        );
        out.extend_from_slice(PROTOCOL.as_bytes());
        out.extend_from_slice(b"\r\nMcp-Method: ");
        out.extend_from_slice(method.as_bytes());
        out.extend_from_slice(b"\r\nMcp-Name: ");
        out.extend_from_slice(name.as_bytes());
        if let Some(auth) = &self.auth {
            out.extend_from_slice(b"\r\nAuthorization: ");
            out.extend_from_slice(auth.as_bytes());
        }
        out.extend_from_slice(b"\r\nContent-Length: ");
        out.extend_from_slice(decimal(length as u64, &mut length_digits));
        out.extend_from_slice(b"\r\n\r\n");
        for part in body {
            out.extend_from_slice(part);
        }
        self.stream.write_all(&self.out).await.expect("send a request");
        let status = self.read_answer().await;
        assert!(
            status == 200,
            "{method} answered HTTP {status}: {}",
            String::from_utf8_lossy(&self.body)
        );
        &self.body
    }

    /// [`Conn::call`] for an answer that is a task (`CreateTaskResult` or
    /// `GetTaskResult`): its id and status.
    pub(crate) async fn task(&mut self, method: &str, name: &str, params: &str) -> TaskFields<'_> {
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

    /// Reads one answer into `self.body`; returns its HTTP status. The head
    /// is parsed by `httparse` (hyper's parser) and the body framed by its
    /// `Content-Length` or chunks (`httparse::parse_chunk_size`); only the
    /// buffer handling is this file's.
    pub(crate) async fn read_answer(&mut self) -> u16 {
        let (status, sse) = self.read_answer_framed().await;
        assert!(
            !sse,
            "the server answered with an SSE stream, not one JSON message"
        );
        status
    }

    /// [`Conn::read_answer`] that also takes an SSE stream (its whole body,
    /// up to its end, lands in `self.body`); returns the status and whether
    /// the answer was one.
    pub(crate) async fn read_answer_framed(&mut self) -> (u16, bool) {
        let mut sse = false;
        self.session_header = None;
        let (head_end, status, framing) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut answer = httparse::Response::new(&mut headers);
            match answer.parse(&self.buf).expect("an HTTP/1.1 answer") {
                httparse::Status::Complete(end) => {
                    let status = answer.code.expect("a status");
                    let mut framing = None;
                    for h in answer.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let text = std::str::from_utf8(h.value).expect("a length");
                            framing = Some(Framing::Length(text.trim().parse().expect("a length")));
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            if h.value.eq_ignore_ascii_case(b"chunked") {
                                framing = Some(Framing::Chunked);
                            }
                        } else if h.name.eq_ignore_ascii_case("content-type") {
                            sse = h.value.starts_with(b"text/event-stream");
                        } else if h.name.eq_ignore_ascii_case("mcp-session-id") {
                            self.session_header = Some(String::from_utf8_lossy(h.value).into_owned());
                        }
                    }
                    // A 202 or 204 may come without either: no body.
                    let framing = framing
                        .or_else(|| matches!(status, 202 | 204).then_some(Framing::Length(0)))
                        .expect("an answer without Content-Length that is not chunked");
                    break (end, status, framing);
                }
                httparse::Status::Partial => self.fill().await,
            }
        };
        self.body.clear();
        match framing {
            Framing::Length(len) => {
                while self.buf.len() < head_end + len {
                    self.fill().await;
                }
                self.body.extend_from_slice(&self.buf[head_end..head_end + len]);
                self.buf.drain(..head_end + len);
            }
            Framing::Chunked => {
                let mut at = head_end;
                loop {
                    let (data, size) = loop {
                        match httparse::parse_chunk_size(&self.buf[at..]).expect("a chunk size") {
                            httparse::Status::Complete((n, size)) => break (at + n, size as usize),
                            httparse::Status::Partial => self.fill().await,
                        }
                    };
                    while self.buf.len() < data + size + 2 {
                        self.fill().await;
                    }
                    self.body.extend_from_slice(&self.buf[data..data + size]);
                    at = data + size + 2;
                    if size == 0 {
                        break;
                    }
                }
                self.buf.drain(..at);
            }
        }
        (status, sse)
    }

    pub(crate) async fn fill(&mut self) {
        self.buf.reserve(4096);
        let n = self.stream.read_buf(&mut self.buf).await.expect("read an answer");
        assert!(n > 0, "the server closed the connection");
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
