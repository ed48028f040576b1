//! A bounded Server-Sent Events decoder: bytes in, events out.
//!
//! Only what MCP uses: `data:` lines joined by `\n` into one event, ended by
//! a blank line (an event the stream ends before is discarded); lines end
//! at CRLF, LF or a lone CR; comments (`:` lines, the keep-alives) are reported so that
//! an idle timer can be reset; `event:`, `id:` and `retry:` are ignored. A
//! line or an event longer than the limit is an error, so a server cannot
//! make the client buffer without end.

use crate::client::Violation;

/// One decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseItem {
    /// The data of one event.
    Event(String),
    /// A comment line: the server is alive.
    KeepAlive,
}

/// Incremental decoder.
#[derive(Debug)]
pub(crate) struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    /// The last chunk ended with a CR: an LF first in the next one is part
    /// of the same line end.
    after_cr: bool,
    limit: usize,
}

impl SseDecoder {
    /// A decoder that refuses lines and events larger than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        SseDecoder {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            limit,
        }
    }

    /// Feeds bytes; appends complete items to `out`. A line ends at CRLF,
    /// LF or a lone CR, also when a CRLF is split between two chunks.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), Violation> {
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            // The CR that ended the last chunk's line and this LF are one line end.
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&rest[..i])?;
            let mut line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            line.clear();
            self.line = line;
            rest = match (rest[i], rest.get(i + 1)) {
                (b'\r', Some(b'\n')) => &rest[i + 2..],
                (b'\r', None) => {
                    self.after_cr = true;
                    &[]
                }
                _ => &rest[i + 1..],
            };
        }
        self.extend_line(rest)
    }

    /// Ends the stream. What is pending is discarded: an event is
    /// dispatched only at its blank line, so one the stream ended before
    /// is incomplete and is not reported (the HTML standard's event stream
    /// interpretation).
    pub(crate) fn finish(&mut self) {
        self.line.clear();
        self.data.clear();
        self.has_data = false;
        self.after_cr = false;
    }

    fn extend_line(&mut self, part: &[u8]) -> Result<(), Violation> {
        if self.line.len() + part.len() > self.limit {
            return Err(Violation::ResponseTooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseItem>) -> Result<(), Violation> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseItem::Event(std::mem::take(&mut self.data)));
                self.has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            out.push(SseItem::KeepAlive);
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(&String::from_utf8_lossy(value));
            self.has_data = true;
            if self.data.len() > self.limit {
                return Err(Violation::ResponseTooLarge { limit: self.limit });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]], limit: usize) -> Result<Vec<SseItem>, Violation> {
        let mut d = SseDecoder::new(limit);
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out)?;
        }
        d.finish();
        Ok(out)
    }

    #[test]
    fn events_split_across_chunks_and_crlf() {
        let out = decode(
            &[
                b"event: message\r\nda",
                b"ta: {\"a\":",
                b"1}\r\n\r\n:\n\ndata: x\n\n",
            ],
            1024,
        )
        .unwrap();
        assert_eq!(
            out,
            [
                SseItem::Event("{\"a\":1}".into()),
                SseItem::KeepAlive,
                SseItem::Event("x".into())
            ]
        );
    }

    #[test]
    fn multi_line_data_is_joined() {
        let out = decode(&[b"data: a\ndata:b\n\n"], 1024).unwrap();
        assert_eq!(out, [SseItem::Event("a\nb".into())]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let big = vec![b'x'; 100];
        assert_eq!(
            decode(&[b"data: ", &big], 64),
            Err(Violation::ResponseTooLarge { limit: 64 })
        );
        let many: Vec<u8> = b"data: 0123456789\n".repeat(10);
        assert!(decode(&[&many], 64).is_err());
    }

    #[test]
    fn an_event_without_its_blank_line_is_discarded_at_the_end() {
        // The spec: "If the file ends in the middle of an event, before the
        // final empty line, the incomplete event is not dispatched."
        assert_eq!(
            decode(&[b"data: a\n\ndata: b\n"], 1024).unwrap(),
            [SseItem::Event("a".into())]
        );
        assert_eq!(
            decode(&[b"data: a\n\ndata: b"], 1024).unwrap(),
            [SseItem::Event("a".into())]
        );
        assert_eq!(decode(&[b"data: a\r\n"], 1024).unwrap(), []);
    }

    #[test]
    fn a_lone_cr_ends_a_line() {
        let out = decode(&[b"data: a\rdata: b\r\r:\rdata: c\r\n\r\n"], 1024).unwrap();
        assert_eq!(
            out,
            [
                SseItem::Event("a\nb".into()),
                SseItem::KeepAlive,
                SseItem::Event("c".into())
            ]
        );
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end() {
        // The CR ends the line; the LF at the start of the next chunk is
        // the same line end, not a blank line that would dispatch `a` alone.
        let out = decode(
            &[
                b"data: a\r",
                b"\ndata: b\r",
                b"\r",
                b"\n",
                b"data: c\r",
                b"",
                b"\n\r",
                b"\n",
            ],
            1024,
        )
        .unwrap();
        assert_eq!(out, [SseItem::Event("a\nb".into()), SseItem::Event("c".into())]);
        // A CR at the end of a chunk followed by anything else.
        let out = decode(&[b"data: a\r", b"\r", b"data: b\r", b"data: c\r", b"\r"], 1024).unwrap();
        assert_eq!(out, [SseItem::Event("a".into()), SseItem::Event("b\nc".into())]);
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_taken() {
        let mut line = b"data: ".to_vec();
        line.resize(64, b'x');
        let out = decode(&[&line[..40], &line[40..], b"\n\n"], 64).unwrap();
        assert_eq!(out, [SseItem::Event("x".repeat(58))]);
        line.push(b'x');
        assert_eq!(
            decode(&[&line[..40], &line[40..], b"\n\n"], 64),
            Err(Violation::ResponseTooLarge { limit: 64 })
        );
    }
}
