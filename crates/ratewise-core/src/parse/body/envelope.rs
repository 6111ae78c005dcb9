//! A fast path for the error envelopes providers actually send.
//!
//! `serde_json` reading the envelope was a third of classifying a 429. The
//! bodies providers send are small objects of plain strings, `null`s and
//! nested objects, so this reader accepts exactly that subset of JSON and
//! answers `None` ("ask serde_json") at the first thing outside it: an
//! escape, a number, an array, a control character, a duplicate known key,
//! deep nesting, anything malformed. Whatever it does answer is what
//! [`super`]'s serde reading gives for the same bytes; a property
//! test compares the two on generated bodies.
//!
//! Bounded: one forward pass, nesting capped at [`MAX_DEPTH`], no allocation.

use super::{ErrorRef, Unreadable};
use std::borrow::Cow;

/// Deeper unknown objects are left to serde_json.
const MAX_DEPTH: u8 = 8;

/// Reads an envelope from `bytes` (the body prefix), or `None` when the
/// body is outside the subset and serde_json must decide.
pub(super) fn read(bytes: &[u8]) -> Option<Result<ErrorRef<'_>, Unreadable>> {
    // Valid UTF-8 as a whole means every string between quotes is too.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut cur = Cursor { text, at: 0 };
    let mut error: Option<Option<ErrorRef<'_>>> = None;
    let mut request_id: Option<Option<&str>> = None;
    // Mistral's flat envelope: `{"object":"error","type","message","code","param"}`.
    let mut flat: [Option<Option<&str>>; 5] = [None; 5];
    cur.object(|cur, key| {
        let at = FLAT_KEYS.iter().position(|k| *k == key);
        if let Some(i) = at {
            if flat[i].is_some() {
                return None; // serde: duplicate field
            }
            flat[i] = Some(cur.loose_str()?);
            return Some(());
        }
        match key {
            "error" => {
                if error.is_some() {
                    return None; // serde: duplicate field
                }
                error = Some(match cur.peek()? {
                    b'n' => cur.literal("null").map(|()| None)?,
                    b'{' => Some(error_object(cur)?),
                    // xAI: `"error": "<the message>"`.
                    b'"' => Some(ErrorRef::borrowed(None, None, Some(cur.string()?), None)),
                    _ => return None,
                });
            }
            "request_id" => {
                if request_id.is_some() {
                    return None;
                }
                request_id = Some(cur.loose_str()?);
            }
            _ => cur.skip_value(0)?,
        }
        Some(())
    })?;
    if !cur.at_end() {
        return None;
    }
    let [object, kind, message, code, param] = flat.map(Option::flatten);
    Some(match error.flatten() {
        Some(mut e) => {
            e.request_id = request_id.flatten().map(Cow::Borrowed);
            Ok(e)
        }
        None if object == Some("error") => {
            let mut e = ErrorRef::borrowed(kind, code, message, param);
            e.request_id = request_id.flatten().map(Cow::Borrowed);
            Ok(e)
        }
        None => Err(Unreadable::NoErrorObject),
    })
}

/// The top-level keys of a flat error envelope, in [`read`]'s order.
const FLAT_KEYS: [&str; 5] = ["object", "type", "message", "code", "param"];

/// `{"type","message","code","param","details":{"error_code"}}`.
fn error_object<'a>(cur: &mut Cursor<'a>) -> Option<ErrorRef<'a>> {
    let mut kind = None;
    let mut message = None;
    let mut code = None;
    let mut param = None;
    let mut details: Option<Option<Option<&str>>> = None;
    cur.object(|cur, key| {
        let slot = match key {
            "type" => &mut kind,
            "message" => &mut message,
            "code" => &mut code,
            "param" => &mut param,
            "details" => {
                if details.is_some() {
                    return None;
                }
                details = Some(match cur.peek()? {
                    b'n' => cur.literal("null").map(|()| None)?,
                    b'{' => Some(details_object(cur)?),
                    _ => return None,
                });
                return Some(());
            }
            _ => return cur.skip_value(0),
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(cur.loose_str()?);
        Some(())
    })?;
    let code = code.flatten().or(details.flatten().flatten());
    Some(ErrorRef::borrowed(
        kind.flatten(),
        code,
        message.flatten(),
        param.flatten(),
    ))
}

/// `{"error_code"}`.
fn details_object<'a>(cur: &mut Cursor<'a>) -> Option<Option<&'a str>> {
    let mut error_code = None;
    cur.object(|cur, key| {
        if key != "error_code" {
            return cur.skip_value(0);
        }
        if error_code.is_some() {
            return None;
        }
        error_code = Some(cur.loose_str()?);
        Some(())
    })?;
    Some(error_code.flatten())
}

/// The first quote, backslash or control character in `bytes`. Keys and
/// codes are short: eight bytes at a time with word arithmetic, no set-up.
/// Past [`WORDS_FIRST`] bytes (a message) a SIMD search for the quote or
/// backslash takes over, and the span before it is checked for control
/// characters with a loop the compiler vectorises.
fn first_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    // Sets the high bit of every byte of `word` below `n` (n <= 0x80).
    // Only the lowest flagged byte is exact (a borrow may flag bytes above
    // it), which is the only one read.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let mut at = 0;
    while at < WORDS_FIRST {
        let Some(chunk) = bytes.get(at..at + 8) else {
            let tail = bytes.get(at..)?;
            return tail.iter().position(|&b| is_special(b)).map(|i| at + i);
        };
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let found = below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1)
            | below(word, 0x20);
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let span = &rest[..end];
    if span.iter().fold(false, |seen, &b| seen | (b < 0x20)) {
        return span.iter().position(|&b| b < 0x20).map(|i| at + i);
    }
    (end < rest.len()).then_some(at + end)
}

/// Bytes read word by word before [`first_special`] switches to SIMD.
const WORDS_FIRST: usize = 32;

fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after JSON whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
        bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.peek()?;
        let rest = self.bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let rest = &self.bytes()[start..];
        let len = first_special(rest)?;
        if rest[len] != b'"' {
            return None; // an escape or a control character
        }
        let end = start + len;
        self.at = end + 1;
        // Both ends sit next to an ASCII quote: character boundaries.
        self.text.get(start..end)
    }

    /// The ratewise `LooseStr` reading of a value: a string is kept; `null`,
    /// `true`, `false` are `None`. Numbers and containers go to serde_json.
    fn loose_str(&mut self) -> Option<Option<&'a str>> {
        match self.peek()? {
            b'"' => self.string().map(Some),
            b'n' => self.literal("null").map(|()| None),
            b't' => self.literal("true").map(|()| None),
            b'f' => self.literal("false").map(|()| None),
            _ => None,
        }
    }

    /// Skips an unknown field's value: a string, a literal or an object of those.
    fn skip_value(&mut self, depth: u8) -> Option<()> {
        match self.peek()? {
            b'{' if depth < MAX_DEPTH => self.object(|cur, _| cur.skip_value(depth + 1)),
            b'{' => None,
            _ => self.loose_str().map(drop),
        }
    }

    /// An object: `field` reads each value after its key.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn first_special_is_the_byte_loop(
            bytes in prop::collection::vec(
                prop::sample::select(vec![b'a', b'"', b'\\', 0, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xa0, 0xff, 0x5b, 0x5d, 0x23]),
                0..40,
            ),
            long in prop::collection::vec(
                prop_oneof![
                    30 => Just(b'a'),
                    1 => prop::sample::select(vec![b'"', b'\\', 0, 0x1f, 0x20, 0x7f, 0xff]),
                ],
                0..200,
            )
        ) {
            for bytes in [&bytes, &long] {
                let naive = bytes.iter().position(|&b| is_special(b));
                prop_assert_eq!(first_special(bytes), naive);
            }
        }
    }
}
