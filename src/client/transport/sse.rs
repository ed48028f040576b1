//! A bounded Server-Sent Events decoder: bytes in, events out.
//!
//! Only what MCP uses: `data:` lines joined by `\n` into one event, ended by
//! a blank line; comments (`:` lines, the keep-alives) are reported so that
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
    limit: usize,
}

impl SseDecoder {
    /// A decoder that refuses lines and events larger than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        SseDecoder {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            limit,
        }
    }

    /// Feeds bytes; appends complete items to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), Violation> {
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&line, out)?;
                line.clear();
                self.line = line;
            } else {
                if self.line.len() >= self.limit {
                    return Err(Violation::ResponseTooLarge { limit: self.limit });
                }
                self.line.push(b);
            }
        }
        Ok(())
    }

    /// Ends the stream: a last event without its blank line still counts.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseItem>) -> Result<(), Violation> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.line_done(b"", out)
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
        d.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn events_split_across_chunks_and_crlf() {
        let out = decode(
            &[
                b"event: message\r\nda",
                b"ta: {\"a\":",
                b"1}\r\n\r\n:\n\ndata: x\n",
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
}
