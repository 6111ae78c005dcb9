//! An incremental, sans-IO Server-Sent Events decoder.
//!
//! It follows the WHATWG "interpreting an event stream" rules: lines end in
//! LF, CRLF or a lone CR; a line starting with `:` is a comment; a field
//! name is separated from its value by the first `:` and one leading space
//! of the value is dropped; `data` lines are joined with `\n`; a blank line
//! dispatches the event unless the data buffer is empty; `id` values that
//! contain NUL are ignored; `retry` values that are not all ASCII digits are
//! ignored; one UTF-8 byte order mark at the start of the stream is dropped;
//! an event not closed by a blank line before the end is discarded.
//!
//! Bytes may arrive in any chunking: a chunk may end inside a line, between
//! the CR and LF of a CRLF, or inside a UTF-8 sequence. Lines are collected
//! as bytes and decoded only when complete, so none of these splits change
//! the events produced. Because a peer controls the sizes, the decoder holds
//! at most [`SseLimits::max_line_len`] bytes of an unfinished line and
//! [`SseLimits::max_event_len`] bytes of an unfinished event, and fails with
//! a typed [`SseError`] past them.
//!
//! ```
//! use ratewise_streaming::sse::SseDecoder;
//!
//! let mut decoder = SseDecoder::new();
//! let mut events = decoder.push(b"event: ping\r\ndata: {\"a\"").unwrap();
//! assert!(events.is_empty());
//! events = decoder.push(b":1}\r\n\r\n").unwrap();
//! assert_eq!(events[0].event, "ping");
//! assert_eq!(events[0].data, "{\"a\":1}");
//! ```

use std::fmt;

/// Size bounds on what the decoder buffers for one line and one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Longest line (without its line end) accepted, in bytes.
    pub max_line_len: usize,
    /// Largest event accepted: the bytes of its `data` buffer (including
    /// the `\n` joining lines) plus its event type.
    pub max_event_len: usize,
}

impl SseLimits {
    /// 1 MiB lines, 4 MiB events: far above what providers send in one
    /// event (a delta is a few hundred bytes), far below what would hurt.
    pub const DEFAULT: SseLimits = SseLimits {
        max_line_len: 1 << 20,
        max_event_len: 4 << 20,
    };
}

impl Default for SseLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why the decoder stopped: the peer sent more than the limits allow.
///
/// The decoder is unusable afterwards (every later `push` returns the same
/// error): resynchronising inside an overlong line would guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// A line grew past [`SseLimits::max_line_len`].
    LineTooLong {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// An event's data and type grew past [`SseLimits::max_event_len`].
    EventTooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::LineTooLong { limit } => {
                write!(f, "server-sent events line longer than {limit} bytes")
            }
            SseError::EventTooLarge { limit } => {
                write!(f, "server-sent event larger than {limit} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The event type: the last `event` field, or `"message"` when absent
    /// or empty.
    pub event: String,
    /// The `data` lines joined with `\n` (the final line end removed).
    pub data: String,
    /// The last event ID at dispatch (empty when none was set). Like the
    /// browser's `lastEventId`, it persists across events until changed.
    pub id: String,
}

/// The incremental decoder. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct SseDecoder {
    limits: SseLimits,
    /// The unfinished line carried over from earlier chunks.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF of the next is its pair.
    skip_lf: bool,
    /// No line completed yet: the first one may start with a BOM.
    at_start: bool,
    data: String,
    event_type: String,
    last_event_id: String,
    retry: Option<u64>,
    failed: Option<SseError>,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    /// A decoder with the [default limits](SseLimits::DEFAULT).
    pub fn new() -> Self {
        Self::with_limits(SseLimits::DEFAULT)
    }

    /// A decoder with the given limits.
    pub fn with_limits(limits: SseLimits) -> Self {
        SseDecoder {
            limits,
            line: Vec::new(),
            skip_lf: false,
            at_start: true,
            data: String::new(),
            event_type: String::new(),
            last_event_id: String::new(),
            retry: None,
            failed: None,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> SseLimits {
        self.limits
    }

    /// The reconnection time set by the last valid `retry` field, in
    /// milliseconds.
    pub fn reconnection_time(&self) -> Option<u64> {
        self.retry
    }

    /// The last event ID seen so far (empty when none).
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Feeds a chunk and returns the events it completed.
    ///
    /// Allocates a fresh `Vec` per call; hot paths use [`push_into`]
    /// with a reused buffer.
    ///
    /// [`push_into`]: SseDecoder::push_into
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.push_into(chunk, &mut out)?;
        Ok(out)
    }

    /// Feeds a chunk, appending the events it completed to `out`.
    ///
    /// On error, the events completed before the offending line are already
    /// in `out`, whatever the chunking.
    pub fn push_into(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(err) = self.failed {
            return Err(err);
        }
        let result = self.push_inner(chunk, out);
        if let Err(err) = result {
            self.failed = Some(err);
            self.line = Vec::new();
            self.data = String::new();
        }
        result
    }

    fn push_inner(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line = &chunk[..pos];
            let mut rest = &chunk[pos + 1..];
            if chunk[pos] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            if self.line.is_empty() {
                self.check_line(line.len())?;
                self.process_line(line, out)?;
            } else {
                self.check_line(self.line.len() + line.len())?;
                let mut buf = std::mem::take(&mut self.line);
                buf.extend_from_slice(line);
                let processed = self.process_line(&buf, out);
                buf.clear();
                self.line = buf; // keep the allocation for the next split line
                processed?;
            }
            chunk = rest;
        }
        if !chunk.is_empty() {
            self.check_line(self.line.len() + chunk.len())?;
            self.line.extend_from_slice(chunk);
        }
        Ok(())
    }

    /// Ends the stream. An event not closed by a blank line is discarded
    /// (WHATWG); returns whether anything was discarded. The decoder is
    /// ready for a new stream afterwards (the last event ID is kept).
    pub fn finish(&mut self) -> bool {
        let pending = !self.line.is_empty() || !self.data.is_empty() || !self.event_type.is_empty();
        self.line.clear();
        self.data.clear();
        self.event_type.clear();
        self.skip_lf = false;
        self.at_start = true;
        pending
    }

    fn check_line(&self, len: usize) -> Result<(), SseError> {
        if len > self.limits.max_line_len {
            Err(SseError::LineTooLong {
                limit: self.limits.max_line_len,
            })
        } else {
            Ok(())
        }
    }

    fn check_event(&self, extra: usize) -> Result<(), SseError> {
        if self.data.len() + self.event_type.len() + extra > self.limits.max_event_len {
            Err(SseError::EventTooLarge {
                limit: self.limits.max_event_len,
            })
        } else {
            Ok(())
        }
    }

    fn process_line(&mut self, mut line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                let value = String::from_utf8_lossy(value);
                self.check_event(value.len().saturating_sub(self.event_type.len()))?;
                self.event_type.clear();
                self.event_type.push_str(&value);
            }
            b"data" => {
                let value = String::from_utf8_lossy(value);
                self.check_event(value.len() + 1)?;
                self.data.push_str(&value);
                self.data.push('\n');
            }
            // An id containing NUL is ignored (WHATWG).
            b"id" if !value.contains(&0) => {
                self.last_event_id.clear();
                self.last_event_id.push_str(&String::from_utf8_lossy(value));
            }
            // Only ASCII digits; an overflowing value is ignored too.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = parse_digits(value) {
                    self.retry = Some(ms);
                }
            }
            _ => {} // unknown fields are ignored
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        self.data.pop(); // the trailing '\n' added after the last data line
        let mut event = std::mem::take(&mut self.event_type);
        if event.is_empty() {
            event.push_str("message");
        }
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id: self.last_event_id.clone(),
        });
    }
}

/// Whether a `Content-Type` value names `text/event-stream` (any case, any
/// parameters): the responses a metered body should read as a stream.
///
/// ```
/// use ratewise_streaming::sse::is_event_stream;
/// assert!(is_event_stream(b"text/event-stream; charset=utf-8"));
/// assert!(is_event_stream(b" Text/Event-Stream"));
/// assert!(!is_event_stream(b"application/json"));
/// ```
pub fn is_event_stream(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    essence.eq_ignore_ascii_case(b"text/event-stream")
}

fn parse_digits(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<SseEvent> {
        SseDecoder::new().push(input).unwrap()
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: String::new(),
        }
    }

    #[test]
    fn lf_crlf_and_cr_line_ends_are_equal() {
        let lf = all(b"event: a\ndata: x\n\ndata: y\n\n");
        assert_eq!(lf, vec![ev("a", "x"), ev("message", "y")]);
        assert_eq!(all(b"event: a\r\ndata: x\r\n\r\ndata: y\r\n\r\n"), lf);
        assert_eq!(all(b"event: a\rdata: x\r\rdata: y\r\r"), lf);
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_end() {
        let mut d = SseDecoder::new();
        assert!(d.push(b"data: x\r").unwrap().is_empty());
        // The LF pairs with the CR: no extra blank line, so no dispatch yet.
        assert!(d.push(b"\n").unwrap().is_empty());
        assert_eq!(d.push(b"\r").unwrap(), vec![ev("message", "x")]);
        // An empty chunk between CR and LF changes nothing.
        let mut d = SseDecoder::new();
        d.push(b"data: y\r").unwrap();
        d.push(b"").unwrap();
        assert!(d.push(b"\n").unwrap().is_empty());
        assert_eq!(d.push(b"\n").unwrap(), vec![ev("message", "y")]);
    }

    #[test]
    fn cr_only_blank_line_dispatches() {
        let mut d = SseDecoder::new();
        d.push(b"data: x\r").unwrap();
        // CR followed by CR: the second is a blank line.
        assert_eq!(d.push(b"\rdata").unwrap(), vec![ev("message", "x")]);
    }

    #[test]
    fn utf8_split_inside_a_sequence() {
        let bytes = "data: ✓é\n\n".as_bytes();
        for split in 0..=bytes.len() {
            let mut d = SseDecoder::new();
            let mut out = d.push(&bytes[..split]).unwrap();
            out.extend(d.push(&bytes[split..]).unwrap());
            assert_eq!(out, vec![ev("message", "✓é")], "split at {split}");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(all(b"data: a\xFFb\n\n"), vec![ev("message", "a\u{FFFD}b")]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        assert_eq!(
            all(b": hello\nfoo: bar\ndata: x\n:another\n\n"),
            vec![ev("message", "x")]
        );
        // A comment alone never dispatches.
        assert!(all(b": keep-alive\n\n").is_empty());
    }

    #[test]
    fn data_lines_join_with_newline_and_one_space_is_stripped() {
        assert_eq!(
            all(b"data:a\ndata:  b\ndata\ndata: c\n\n"),
            vec![ev("message", "a\n b\n\nc")]
        );
        // `data` with an empty value still dispatches an empty event.
        assert_eq!(all(b"data\n\n"), vec![ev("message", "")]);
    }

    #[test]
    fn empty_data_buffer_is_not_dispatched_and_type_resets() {
        assert_eq!(all(b"event: a\n\ndata: x\n\n"), vec![ev("message", "x")]);
        assert_eq!(all(b"event:\ndata: x\n\n"), vec![ev("message", "x")]);
    }

    #[test]
    fn id_persists_and_nul_is_ignored() {
        let out = all(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n");
        let ids: Vec<_> = out.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["1", "1", "1", ""]);
    }

    #[test]
    fn retry_digits_only() {
        let mut d = SseDecoder::new();
        d.push(b"retry: 1500\n").unwrap();
        assert_eq!(d.reconnection_time(), Some(1500));
        d.push(b"retry: 15s\nretry: \nretry: -1\nretry: 99999999999999999999999\n")
            .unwrap();
        assert_eq!(d.reconnection_time(), Some(1500));
    }

    #[test]
    fn bom_at_stream_start_only() {
        assert_eq!(all(b"\xEF\xBB\xBFdata: x\n\n"), vec![ev("message", "x")]);
        // Split inside the BOM.
        let mut d = SseDecoder::new();
        d.push(b"\xEF").unwrap();
        d.push(b"\xBB\xBFdata: x\n").unwrap();
        assert_eq!(d.push(b"\n").unwrap(), vec![ev("message", "x")]);
        // A BOM later is part of a field name: the line is ignored.
        assert!(all(b"data: x\n\n\xEF\xBB\xBFdata: y\n\n").len() == 1);
    }

    #[test]
    fn no_trailing_blank_line_means_no_dispatch() {
        let mut d = SseDecoder::new();
        assert!(d.push(b"data: x\n").unwrap().is_empty());
        assert!(d.finish());
        let mut d = SseDecoder::new();
        d.push(b"data: x\n\n").unwrap();
        assert!(!d.finish());
    }

    #[test]
    fn overlong_line_fails_with_typed_error_whatever_the_chunking() {
        let limits = SseLimits {
            max_line_len: 8,
            max_event_len: 64,
        };
        // Exactly at the limit is fine.
        let mut d = SseDecoder::with_limits(limits);
        assert_eq!(d.push(b"data:123\n\n").unwrap().len(), 1);
        let input = b"data: a\n\ndata: 0123456789\n\n";
        for split in 0..=input.len() {
            let mut d = SseDecoder::with_limits(limits);
            let mut out = Vec::new();
            let r1 = d.push_into(&input[..split], &mut out);
            let r2 = d.push_into(&input[split..], &mut out);
            assert_eq!(
                r1.and(r2),
                Err(SseError::LineTooLong { limit: 8 }),
                "split {split}"
            );
            assert_eq!(out, vec![ev("message", "a")]);
            // Sticky.
            assert!(d.push(b"data: b\n\n").is_err());
        }
    }

    #[test]
    fn oversized_event_fails() {
        let limits = SseLimits {
            max_line_len: 64,
            max_event_len: 10,
        };
        let mut d = SseDecoder::with_limits(limits);
        let err = d.push(b"data: 12345\ndata: 67890\n\n").unwrap_err();
        assert_eq!(err, SseError::EventTooLarge { limit: 10 });
        assert!(err.to_string().contains("10 bytes"));
    }
}
