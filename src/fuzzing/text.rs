//! The text formats of the fuzz inputs: sections split by `===` lines.
//!
//! Text keeps the corpora readable and lets seeds be written from the
//! golden fixtures and captured traffic; libFuzzer mutates it as bytes (a
//! dictionary, `fuzz/dict/*.dict`, supplies the protocol's words).

/// One section: the rest of its `===` line (trimmed) and the lines after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Section<'a> {
    /// What follows `===` on the separator line.
    pub(super) head: &'a str,
    /// The section's text, without the separator line and without the
    /// line break before the next separator.
    pub(super) body: &'a str,
}

/// Splits `text` at lines starting with `===`: the text before the first
/// separator (the preamble) and the sections.
pub(super) fn sections(text: &str) -> (&str, Vec<Section<'_>>) {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("===") {
            starts.push(at);
        }
        at += line.len();
    }
    let Some(&first) = starts.first() else {
        return (text, Vec::new());
    };
    let preamble = strip_break(&text[..first]);
    let mut out = Vec::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(text.len());
        let chunk = &text[start..end];
        let (head, body) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let head = head.trim_start_matches('=').trim();
        let body = if i + 1 < starts.len() {
            strip_break(body)
        } else {
            body
        };
        out.push(Section { head, body });
    }
    (preamble, out)
}

/// `s` without one trailing `\n` (or `\r\n`).
fn strip_break(s: &str) -> &str {
    let s = s.strip_suffix('\n').unwrap_or(s);
    s.strip_suffix('\r').unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keep_their_heads_and_bodies() {
        let (pre, s) = sections("call\n=== 200 json\n{\"a\":1}\n===\nx\ny\n");
        assert_eq!(pre, "call");
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].head, s[0].body), ("200 json", "{\"a\":1}"));
        assert_eq!((s[1].head, s[1].body), ("", "x\ny\n"));
        let (pre, s) = sections("no separator");
        assert_eq!((pre, s.len()), ("no separator", 0));
    }
}
