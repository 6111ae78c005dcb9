//! The input: the providers' own batch files, read as a stream.
//!
//! One file is one shape, told by its first valid line:
//!
//! * OpenAI's [Batch API input](https://platform.openai.com/docs/guides/batch):
//!   `{"custom_id", "method": "POST", "url": "/v1/chat/completions" |
//!   "/v1/responses", "body"}`;
//! * Anthropic's [Message Batches](https://docs.anthropic.com/en/api/creating-message-batches)
//!   requests: `{"custom_id", "params"}`, sent to `/v1/messages`.
//!
//! A line is read into a buffer of at most [`MAX_LINE`] bytes; the request
//! body is kept as the raw JSON text it was given (never re-serialised),
//! and only `model`, the output cap and `stream` are read out of it.

use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::io::{self, BufRead};

/// The longest line read: 32 MiB, Anthropic's documented request size
/// limit for the Messages API ("32 MB"), which one line's request is sent
/// to; a longer line is a bad line and is skipped without being held in
/// memory.
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// The two batch formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// OpenAI's Batch API lines.
    OpenAi,
    /// Anthropic's Message Batches requests.
    Anthropic,
}

impl Shape {
    /// `builder` with this shape's authentication: OpenAI's `Authorization:
    /// Bearer`, Anthropic's `x-api-key` and the `anthropic-version` header
    /// (<https://docs.anthropic.com/en/api/versioning>: required on every
    /// request). The one place both the direct and the batch path set them.
    pub fn authenticate(
        self,
        builder: http::request::Builder,
        key: &str,
    ) -> http::request::Builder {
        let builder = self.versioned(builder);
        match self {
            Shape::Anthropic => builder.header("x-api-key", key),
            Shape::OpenAi => builder.header(http::header::AUTHORIZATION, format!("Bearer {key}")),
        }
    }

    /// `builder` with the headers this shape needs besides a key
    /// (Anthropic's `anthropic-version`): a pooled request, whose key each
    /// member's route sets.
    pub fn versioned(self, builder: http::request::Builder) -> http::request::Builder {
        match self {
            Shape::Anthropic => builder.header("anthropic-version", "2023-06-01"),
            Shape::OpenAi => builder,
        }
    }

    /// The provider whose API this shape is (`Openai`, `Anthropic`): a
    /// pool member must speak it ([`Provider::dialect`](ratewise_core::Provider::dialect)).
    pub fn provider(self) -> ratewise_core::Provider {
        match self {
            Shape::OpenAi => ratewise_core::Provider::Openai,
            Shape::Anthropic => ratewise_core::Provider::Anthropic,
        }
    }

    /// The name kept in the store and shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::OpenAi => "openai",
            Shape::Anthropic => "anthropic",
        }
    }

    /// The shape named by [`Shape::as_str`].
    pub fn parse(name: &str) -> Option<Shape> {
        match name {
            "openai" => Some(Shape::OpenAi),
            "anthropic" => Some(Shape::Anthropic),
            _ => None,
        }
    }

    /// The provider's public API, the upstream when none is given.
    pub fn default_upstream(self) -> &'static str {
        match self {
            Shape::OpenAi => "https://api.openai.com",
            Shape::Anthropic => "https://api.anthropic.com",
        }
    }

    /// The environment variable the key is read from.
    pub fn key_variable(self) -> &'static str {
        match self {
            Shape::OpenAi => "OPENAI_API_KEY",
            Shape::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

/// The OpenAI endpoints a line may name.
const OPENAI_URLS: [&str; 2] = ["/v1/chat/completions", "/v1/responses"];

/// One valid line: a request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// 1-based line number in the input.
    pub line: u64,
    /// The caller's id, unique in the file.
    pub custom_id: String,
    /// The API path (`/v1/messages`, `/v1/chat/completions`, ...).
    pub path: String,
    /// The model named in the body, if any.
    pub model: Option<String>,
    /// `max_tokens`, `max_completion_tokens` or `max_output_tokens`.
    pub max_tokens: Option<u64>,
    /// The body, byte for byte as the line gave it.
    pub body: Vec<u8>,
}

impl Request {
    /// Input tokens expected, by the core's rule
    /// ([`ratewise_core::admit::input_from_bytes`]: one token per 4 bytes
    /// of body, rounded up).
    pub fn input_estimate(&self) -> u64 {
        ratewise_core::admit::input_from_bytes(self.body.len() as u64)
    }

    /// Output tokens reserved, by the core's default estimator
    /// ([`ratewise_core::admit::MaxTokens`]): the request's cap, else the
    /// core's default.
    pub fn output_reserve(&self) -> u64 {
        use ratewise_core::admit::OutputEstimator;
        ratewise_core::admit::MaxTokens::default()
            .output_estimate(self.max_tokens, self.input_estimate())
    }
}

/// Why a line is not run. Each is reported with its line number; the
/// others still run (unless `--strict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadLine {
    /// Longer than [`MAX_LINE`].
    TooLong,
    /// Not a JSON object (the parser's message).
    NotJson(String),
    /// No string `custom_id`.
    NoCustomId,
    /// Neither `body` (OpenAI) nor `params` (Anthropic).
    NoRequest,
    /// A line of the other shape than the file's.
    OtherShape(Shape),
    /// OpenAI: a method other than `POST`.
    NotPost,
    /// OpenAI: an endpoint this runner does not send to.
    Url(String),
    /// The body or params are not a JSON object.
    BodyNotObject,
    /// `"stream": true`: a batch result is one body, not a stream.
    Stream,
    /// A `custom_id` seen on an earlier line.
    Duplicate(String),
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadLine::TooLong => write!(f, "longer than {} MiB", MAX_LINE >> 20),
            BadLine::NotJson(e) => write!(f, "not a JSON object: {e}"),
            BadLine::NoCustomId => f.write_str("no string \"custom_id\""),
            BadLine::NoRequest => {
                f.write_str("neither \"body\" (OpenAI batch) nor \"params\" (Anthropic batch)")
            }
            BadLine::OtherShape(s) => write!(
                f,
                "a line of the {} batch format in a file of the other",
                s.as_str()
            ),
            BadLine::NotPost => f.write_str("\"method\" is not \"POST\""),
            BadLine::Url(u) => write!(f, "\"url\" {u:?} is not one of {}", OPENAI_URLS.join(", ")),
            BadLine::BodyNotObject => f.write_str("the request body is not a JSON object"),
            BadLine::Stream => f.write_str("\"stream\": true (a batch result is one body)"),
            BadLine::Duplicate(id) => write!(f, "custom_id {id:?} appears on an earlier line"),
        }
    }
}

/// What one line of the file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A request to run.
    Request(Request),
    /// A line not run, and why.
    Bad {
        /// 1-based line number.
        line: u64,
        /// Why.
        why: BadLine,
    },
}

/// Reads lines of at most [`MAX_LINE`] bytes and fingerprints every byte
/// read (SHA-256), so a changed input is told apart from the one a store
/// was made from. Blank lines are skipped (but counted and hashed).
pub struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    line: u64,
    hash: Sha256,
    bytes: u64,
    shape: Option<Shape>,
}

impl<R: BufRead> Lines<R> {
    /// Reads `reader` from its start.
    pub fn new(reader: R) -> Self {
        Lines {
            reader,
            buf: Vec::new(),
            line: 0,
            hash: Sha256::new(),
            bytes: 0,
            shape: None,
        }
    }

    /// The file's shape, once a valid line told it.
    pub fn shape(&self) -> Option<Shape> {
        self.shape
    }

    /// The fingerprint of everything read so far: hex SHA-256 and length.
    pub fn fingerprint(&self) -> (String, u64) {
        let digest = self.hash.clone().finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        (hex, self.bytes)
    }

    /// The next line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        loop {
            let Some(too_long) = self.read_raw()? else {
                return Ok(None);
            };
            if too_long {
                return Ok(Some(Line::Bad {
                    line: self.line,
                    why: BadLine::TooLong,
                }));
            }
            let text = trim_line(&self.buf);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(match parse_line(self.line, text, self.shape) {
                Ok((request, shape)) => {
                    self.shape.get_or_insert(shape);
                    Line::Request(request)
                }
                Err(why) => Line::Bad {
                    line: self.line,
                    why,
                },
            }));
        }
    }

    /// Reads one raw line into `buf`: `Some(false)` a line, `Some(true)` a
    /// line over the bound (discarded), `None` the end.
    fn read_raw(&mut self) -> io::Result<Option<bool>> {
        self.buf.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            any = true;
            let (piece, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..=i], true),
                None => (available, false),
            };
            self.hash.update(piece);
            self.bytes += piece.len() as u64;
            if !too_long {
                if self.buf.len() + piece.len() > MAX_LINE + 2 {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(piece);
                }
            }
            let used = piece.len();
            self.reader.consume(used);
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line += 1;
        Ok(Some(too_long || trim_line(&self.buf).len() > MAX_LINE))
    }
}

fn trim_line(buf: &[u8]) -> &[u8] {
    let mut end = buf.len();
    while end > 0 && matches!(buf[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &buf[..end]
}

/// The fields of a line, the request body left as raw text.
#[derive(Deserialize)]
struct RawLine<'a> {
    custom_id: Option<serde_json::Value>,
    method: Option<String>,
    url: Option<String>,
    #[serde(borrow)]
    body: Option<&'a RawValue>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

/// What is read out of a request body: everything else is skipped
/// without being built.
#[derive(Deserialize)]
struct Peek {
    model: Option<serde_json::Value>,
    max_tokens: Option<serde_json::Value>,
    max_completion_tokens: Option<serde_json::Value>,
    max_output_tokens: Option<serde_json::Value>,
    stream: Option<serde_json::Value>,
}

/// One line against the file's shape so far.
pub fn parse_line(
    line: u64,
    text: &[u8],
    file_shape: Option<Shape>,
) -> Result<(Request, Shape), BadLine> {
    let raw: RawLine<'_> = serde_json::from_slice(text).map_err(|e| {
        let mut m = e.to_string();
        m.truncate(200);
        BadLine::NotJson(m)
    })?;
    let Some(serde_json::Value::String(custom_id)) = raw.custom_id else {
        return Err(BadLine::NoCustomId);
    };
    let (shape, path, body) = match (raw.params, raw.body) {
        (Some(params), _) => (Shape::Anthropic, "/v1/messages".to_owned(), params),
        (None, Some(body)) => (Shape::OpenAi, raw.url.clone().unwrap_or_default(), body),
        (None, None) => return Err(BadLine::NoRequest),
    };
    if let Some(expected) = file_shape {
        if expected != shape {
            return Err(BadLine::OtherShape(shape));
        }
    }
    if shape == Shape::OpenAi {
        if !raw
            .method
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("POST"))
        {
            return Err(BadLine::NotPost);
        }
        if !OPENAI_URLS.contains(&path.as_str()) {
            return Err(BadLine::Url(path));
        }
    }
    let text = body.get();
    if !text.trim_start().starts_with('{') {
        return Err(BadLine::BodyNotObject);
    }
    let peek: Peek = serde_json::from_str(text).map_err(|_| BadLine::BodyNotObject)?;
    if peek.stream.as_ref().and_then(|v| v.as_bool()) == Some(true) {
        return Err(BadLine::Stream);
    }
    let model = match peek.model {
        Some(serde_json::Value::String(m)) => Some(m),
        _ => None,
    };
    let max_tokens = [
        peek.max_tokens,
        peek.max_completion_tokens,
        peek.max_output_tokens,
    ]
    .into_iter()
    .flatten()
    .find_map(|v| v.as_u64());
    Ok((
        Request {
            line,
            custom_id,
            path,
            model,
            max_tokens,
            body: text.as_bytes().to_vec(),
        },
        shape,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<Line> {
        let mut l = Lines::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(line) = l.next_line().unwrap() {
            out.push(line);
        }
        out
    }

    fn why(line: &Line) -> Option<&BadLine> {
        match line {
            Line::Bad { why, .. } => Some(why),
            Line::Request(_) => None,
        }
    }

    #[test]
    fn an_openai_line_keeps_its_body_byte_for_byte() {
        let text = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o", "max_completion_tokens":7,"messages":[]}}"#;
        let got = lines(text);
        let Line::Request(r) = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(
            r.body,
            br#"{"model":"gpt-4o", "max_completion_tokens":7,"messages":[]}"#
        );
        assert_eq!(
            (r.model.as_deref(), r.max_tokens),
            (Some("gpt-4o"), Some(7))
        );
        assert_eq!(r.path, "/v1/chat/completions");
    }

    #[test]
    fn the_first_valid_line_sets_the_shape_and_the_other_is_bad() {
        let text = "not json\n{\"custom_id\":\"a\",\"params\":{\"model\":\"m\",\"max_tokens\":5}}\n\n{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/responses\",\"body\":{}}\n";
        let got = lines(text);
        assert!(matches!(why(&got[0]), Some(BadLine::NotJson(_))));
        assert!(matches!(&got[1], Line::Request(r) if r.path == "/v1/messages" && r.line == 2));
        assert_eq!(why(&got[2]), Some(&BadLine::OtherShape(Shape::OpenAi)));
        assert!(matches!(&got[2], Line::Bad { line: 4, .. }));
    }

    #[test]
    fn each_bad_kind_is_told() {
        let cases = [
            (r#"{"params":{}}"#, BadLine::NoCustomId),
            (r#"{"custom_id":5,"params":{}}"#, BadLine::NoCustomId),
            (r#"{"custom_id":"a"}"#, BadLine::NoRequest),
            (
                r#"{"custom_id":"a","params":{"stream":true}}"#,
                BadLine::Stream,
            ),
            (r#"{"custom_id":"a","params":[1]}"#, BadLine::BodyNotObject),
            (
                r#"{"custom_id":"a","method":"GET","url":"/v1/responses","body":{}}"#,
                BadLine::NotPost,
            ),
            (
                r#"{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}"#,
                BadLine::Url("/v1/embeddings".into()),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(why(&lines(text)[0]), Some(&want), "{text}");
        }
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_without_being_kept() {
        let mut text = vec![b'x'; MAX_LINE + 10];
        text.push(b'\n');
        text.extend_from_slice(br#"{"custom_id":"a","params":{"max_tokens":1}}"#);
        let mut l = Lines::new(std::io::BufReader::new(text.as_slice()));
        assert_eq!(
            l.next_line().unwrap(),
            Some(Line::Bad {
                line: 1,
                why: BadLine::TooLong
            })
        );
        assert!(l.buf.capacity() <= MAX_LINE + 2 + 64 * 1024);
        assert!(matches!(l.next_line().unwrap(), Some(Line::Request(r)) if r.line == 2));
        assert_eq!(l.next_line().unwrap(), None);
        assert_eq!(l.fingerprint().1, text.len() as u64);
    }

    #[test]
    fn the_fingerprint_covers_every_byte() {
        let mut a = Lines::new(&b"{\"custom_id\":\"a\",\"params\":{}}\n\n"[..]);
        while a.next_line().unwrap().is_some() {}
        let mut b = Lines::new(&b"{\"custom_id\":\"a\",\"params\":{}}\n"[..]);
        while b.next_line().unwrap().is_some() {}
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
