//! Bounded decoding of a compressed body's side copy.
//!
//! A success body sent with `Content-Encoding: gzip`, `deflate` or `br`
//! reaches the caller untouched (still compressed); the meter reads its
//! `usage` from a decoded copy made on the side. The decoders here are
//! pull-style over one fixed output buffer: each step produces at most
//! [`OUT_CHUNK`] bytes, handed straight to the meter, and the total decoded
//! is capped. Garbage, a truncated stream or a decompression bomb ends in a
//! [`Failure`] (the meter then settles at the reservation's estimate);
//! nothing here panics on any input or allocates past a bound.
//!
//! `deflate` is meant to be zlib-wrapped (RFC 9110), but raw deflate is
//! common in the wild: the first two bytes tell them apart, as browsers do.

use brotli_decompressor::{BrotliDecompressStream, BrotliResult, BrotliState, StandardAlloc};
use flate2::{Crc, Decompress, FlushDecompress, Status};
use http::header::CONTENT_ENCODING;
use http::HeaderMap;

/// Most bytes one decoding step produces before they go to the meter.
pub(crate) const OUT_CHUNK: usize = 8 << 10;

/// A body's content coding, read from its `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// No coding (absent, empty or `identity`).
    Identity,
    /// `gzip` / `x-gzip`.
    Gzip,
    /// `deflate`: zlib-wrapped or raw.
    Deflate,
    /// `br`.
    Brotli,
    /// Anything else, or more than one coding stacked: not decoded.
    Unsupported,
}

impl Coding {
    /// The coding of a response with these headers.
    pub(crate) fn of(headers: &HeaderMap) -> Coding {
        let mut found = Coding::Identity;
        for value in headers.get_all(CONTENT_ENCODING) {
            let Ok(text) = value.to_str() else {
                return Coding::Unsupported;
            };
            for token in text.split(',').map(str::trim) {
                let coding = if token.is_empty() || token.eq_ignore_ascii_case("identity") {
                    continue;
                } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip")
                {
                    Coding::Gzip
                } else if token.eq_ignore_ascii_case("deflate") {
                    Coding::Deflate
                } else if token.eq_ignore_ascii_case("br") {
                    Coding::Brotli
                } else {
                    return Coding::Unsupported;
                };
                if found != Coding::Identity {
                    // Stacked codings: rare enough not to decode.
                    return Coding::Unsupported;
                }
                found = coding;
            }
        }
        found
    }
}

/// Why decoding stopped for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Not a valid stream of its coding (or a checksum mismatch).
    Corrupt,
    /// More decoded bytes than the bound allows.
    TooLarge,
    /// The meter wanted no more (its own copy reached its bound).
    Stopped,
}

impl Failure {
    /// A short name for traces.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Failure::Corrupt => "corrupt",
            Failure::TooLarge => "over the decode bound",
            Failure::Stopped => "over the metered-body bound",
        }
    }
}

type Brotli = BrotliState<StandardAlloc, StandardAlloc, StandardAlloc>;

enum Codec {
    Gzip(Box<Gzip>),
    /// `deflate` before its first two bytes told zlib from raw deflate.
    Sniff(Option<u8>),
    Inflate {
        z: Box<Decompress>,
        done: bool,
    },
    Brotli {
        state: Box<Brotli>,
        total_out: usize,
        done: bool,
    },
}

/// A streaming decoder of one body with a bound on its decoded size.
pub(crate) struct Decoder {
    codec: Codec,
    out: Box<[u8]>,
    decoded: u64,
    limit: u64,
    failed: Option<Failure>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("decoded", &self.decoded)
            .field("limit", &self.limit)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Counts decoded bytes against the bound and hands them to the sink.
struct Emit<'a> {
    decoded: &'a mut u64,
    limit: u64,
    sink: &'a mut dyn FnMut(&[u8]) -> bool,
}

impl Emit<'_> {
    fn emit(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        if bytes.is_empty() {
            return Ok(());
        }
        *self.decoded = self.decoded.saturating_add(bytes.len() as u64);
        if *self.decoded > self.limit {
            return Err(Failure::TooLarge);
        }
        if (self.sink)(bytes) {
            Ok(())
        } else {
            Err(Failure::Stopped)
        }
    }
}

impl Decoder {
    /// A decoder for `coding` (`None` for identity and unsupported codings)
    /// that gives up past `limit` decoded bytes.
    pub(crate) fn new(coding: Coding, limit: usize) -> Option<Decoder> {
        let codec = match coding {
            Coding::Identity | Coding::Unsupported => return None,
            Coding::Gzip => Codec::Gzip(Box::new(Gzip::new())),
            Coding::Deflate => Codec::Sniff(None),
            Coding::Brotli => Codec::Brotli {
                state: Box::new(BrotliState::new(
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                )),
                total_out: 0,
                done: false,
            },
        };
        Some(Decoder {
            codec,
            out: vec![0; OUT_CHUNK].into_boxed_slice(),
            decoded: 0,
            limit: limit as u64,
            failed: None,
        })
    }

    /// Decodes `input`, handing every decoded byte to `sink` in order;
    /// `sink` returns `false` to stop. Once it failed, it stays failed.
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<(), Failure> {
        if let Some(f) = self.failed {
            return Err(f);
        }
        let mut emit = Emit {
            decoded: &mut self.decoded,
            limit: self.limit,
            sink,
        };
        let result = feed_codec(&mut self.codec, &mut self.out, input, &mut emit);
        if let Err(f) = result {
            self.failed = Some(f);
        }
        result
    }

    /// Whether the compressed stream ended whole (checksums included) with
    /// nothing failed; call once the body has no more bytes.
    pub(crate) fn finished(&self) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match &self.codec {
            Codec::Gzip(g) => g.finished(),
            Codec::Sniff(_) => false,
            Codec::Inflate { done, .. } | Codec::Brotli { done, .. } => *done,
        }
    }

    /// Decoded bytes so far.
    #[cfg(test)]
    pub(crate) fn decoded(&self) -> u64 {
        self.decoded
    }
}

/// A decoded copy of at most `limit` bytes of a compressed body (itself
/// possibly cut at a bound), to classify an error answer by; `None` for
/// identity, an unsupported coding, or when nothing decodes.
pub(crate) fn decoded_prefix(coding: Coding, body: &[u8], limit: usize) -> Option<Vec<u8>> {
    // The sink stops at `limit`: a bomb ends there.
    let mut d = Decoder::new(coding, usize::MAX)?;
    let mut out = Vec::new();
    let _ = d.feed(body, &mut |b| {
        let room = limit.saturating_sub(out.len());
        out.extend_from_slice(b.get(..room.min(b.len())).unwrap_or_default());
        out.len() < limit
    });
    (!out.is_empty()).then_some(out)
}

fn feed_codec(
    codec: &mut Codec,
    out: &mut [u8],
    input: &[u8],
    emit: &mut Emit<'_>,
) -> Result<(), Failure> {
    match codec {
        Codec::Gzip(g) => g.feed(input, out, emit),
        Codec::Sniff(first) => {
            let (b0, b1) = match (*first, input) {
                (_, []) => return Ok(()),
                (None, [b0]) => {
                    *first = Some(*b0);
                    return Ok(());
                }
                (None, [b0, b1, ..]) => (*b0, *b1),
                (Some(b0), [b1, ..]) => (b0, *b1),
            };
            let pending = *first;
            *codec = Codec::Inflate {
                z: Box::new(Decompress::new(is_zlib_header(b0, b1))),
                done: false,
            };
            if let Some(b0) = pending {
                feed_codec(codec, out, &[b0], emit)?;
            }
            feed_codec(codec, out, input, emit)
        }
        Codec::Inflate { z, done } => {
            if *done {
                return Ok(()); // trailing bytes after the end: ignored
            }
            let (_, ended) = inflate(z, input, out, &mut |b| emit.emit(b))?;
            *done = ended;
            Ok(())
        }
        Codec::Brotli {
            state,
            total_out,
            done,
        } => {
            if *done {
                return Ok(());
            }
            let mut avail_in = input.len();
            let mut in_off = 0;
            loop {
                let mut avail_out = out.len();
                let mut out_off = 0;
                let result = BrotliDecompressStream(
                    &mut avail_in,
                    &mut in_off,
                    input,
                    &mut avail_out,
                    &mut out_off,
                    out,
                    total_out,
                    state,
                );
                emit.emit(out.get(..out_off).ok_or(Failure::Corrupt)?)?;
                match result {
                    BrotliResult::NeedsMoreInput => return Ok(()),
                    BrotliResult::NeedsMoreOutput if out_off > 0 => continue,
                    // No progress with room to write: never loop on it.
                    BrotliResult::NeedsMoreOutput => return Err(Failure::Corrupt),
                    BrotliResult::ResultSuccess => {
                        *done = true;
                        return Ok(());
                    }
                    BrotliResult::ResultFailure => return Err(Failure::Corrupt),
                }
            }
        }
    }
}

/// A zlib header (RFC 1950): method 8, window at most 32 KiB, check bits.
fn is_zlib_header(b0: u8, b1: u8) -> bool {
    b0 & 0x0f == 8 && b0 >> 4 <= 7 && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0
}

/// Inflates `input` until it is used up or the stream ends; returns the
/// bytes of `input` consumed and whether the stream ended.
fn inflate(
    z: &mut Decompress,
    input: &[u8],
    out: &mut [u8],
    emit: &mut dyn FnMut(&[u8]) -> Result<(), Failure>,
) -> Result<(usize, bool), Failure> {
    let mut pos = 0usize;
    loop {
        let rest = input.get(pos..).unwrap_or_default();
        let (in0, out0) = (z.total_in(), z.total_out());
        let status = z
            .decompress(rest, out, FlushDecompress::None)
            .map_err(|_| Failure::Corrupt)?;
        let used = usize::try_from(z.total_in().saturating_sub(in0)).unwrap_or(usize::MAX);
        let made = usize::try_from(z.total_out().saturating_sub(out0)).unwrap_or(usize::MAX);
        pos = pos.saturating_add(used).min(input.len());
        emit(out.get(..made).ok_or(Failure::Corrupt)?)?;
        if status == Status::StreamEnd {
            return Ok((pos, true));
        }
        if made == out.len() {
            continue; // more output may be pending
        }
        if pos >= input.len() {
            return Ok((pos, false));
        }
        if used == 0 && made == 0 {
            // Input left, room to write, and no progress: never loop on it.
            return Err(Failure::Corrupt);
        }
    }
}

/// Where a gzip member (RFC 1952) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The fixed 10 bytes: magic, method, flags, mtime, xfl, os.
    Header { buf: [u8; 10], n: usize },
    /// `FEXTRA`'s two length bytes.
    ExtraLen { buf: [u8; 2], n: usize },
    /// `FEXTRA`'s bytes left to skip.
    Extra(usize),
    /// `FNAME`, up to its NUL.
    Name,
    /// `FCOMMENT`, up to its NUL.
    Comment,
    /// `FHCRC`'s bytes left to skip.
    HeaderCrc(usize),
    /// The deflate data.
    Body,
    /// CRC-32 and ISIZE.
    Trailer { buf: [u8; 8], n: usize },
    /// After a member, bytes that start no other: ignored.
    Trailing,
}

const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xe0;

struct Gzip {
    stage: Stage,
    flags: u8,
    z: Decompress,
    crc: Crc,
    members: u32,
}

impl Gzip {
    fn new() -> Self {
        Gzip {
            stage: Stage::Header { buf: [0; 10], n: 0 },
            flags: 0,
            z: Decompress::new(false),
            crc: Crc::new(),
            members: 0,
        }
    }

    fn finished(&self) -> bool {
        self.members > 0 && matches!(self.stage, Stage::Header { n: 0, .. } | Stage::Trailing)
    }

    /// The stage after the header field `done` (one of the flag bits, or 0
    /// for the fixed part), skipping the fields the flags leave out.
    fn after(&self, done: u8) -> Stage {
        const ORDER: [u8; 4] = [FEXTRA, FNAME, FCOMMENT, FHCRC];
        let start = ORDER.iter().position(|f| *f == done).map_or(0, |i| i + 1);
        match ORDER.iter().skip(start).find(|f| self.flags & **f != 0) {
            Some(&FEXTRA) => Stage::ExtraLen { buf: [0; 2], n: 0 },
            Some(&FNAME) => Stage::Name,
            Some(&FCOMMENT) => Stage::Comment,
            Some(_) => Stage::HeaderCrc(2),
            None => Stage::Body,
        }
    }

    fn feed(
        &mut self,
        mut input: &[u8],
        out: &mut [u8],
        emit: &mut Emit<'_>,
    ) -> Result<(), Failure> {
        while !input.is_empty() {
            match &mut self.stage {
                Stage::Header { buf, n } => {
                    if *n == 0 && self.members > 0 && input.first() != Some(&0x1f) {
                        self.stage = Stage::Trailing;
                        continue;
                    }
                    fill(buf, n, &mut input);
                    if *n < buf.len() {
                        continue;
                    }
                    let buf = *buf;
                    if buf[0] != 0x1f || buf[1] != 0x8b || buf[2] != 8 || buf[3] & FRESERVED != 0 {
                        if self.members > 0 {
                            self.stage = Stage::Trailing;
                            continue;
                        }
                        return Err(Failure::Corrupt);
                    }
                    self.flags = buf[3];
                    self.stage = self.after(0);
                }
                Stage::ExtraLen { buf, n } => {
                    fill(buf, n, &mut input);
                    if *n == buf.len() {
                        let len = usize::from(u16::from_le_bytes(*buf));
                        self.stage = if len == 0 {
                            self.after(FEXTRA)
                        } else {
                            Stage::Extra(len)
                        };
                    }
                }
                Stage::Extra(left) | Stage::HeaderCrc(left) => {
                    let k = (*left).min(input.len());
                    *left -= k;
                    input = input.get(k..).unwrap_or_default();
                    if *left == 0 {
                        let done = if matches!(self.stage, Stage::Extra(_)) {
                            FEXTRA
                        } else {
                            FHCRC
                        };
                        self.stage = self.after(done);
                    }
                }
                Stage::Name | Stage::Comment => match input.iter().position(|b| *b == 0) {
                    Some(i) => {
                        input = input.get(i + 1..).unwrap_or_default();
                        let done = if self.stage == Stage::Name {
                            FNAME
                        } else {
                            FCOMMENT
                        };
                        self.stage = self.after(done);
                    }
                    None => input = &[],
                },
                Stage::Body => {
                    let crc = &mut self.crc;
                    let (used, ended) = inflate(&mut self.z, input, out, &mut |b| {
                        crc.update(b);
                        emit.emit(b)
                    })?;
                    input = input.get(used..).unwrap_or_default();
                    if ended {
                        self.stage = Stage::Trailer { buf: [0; 8], n: 0 };
                    }
                }
                Stage::Trailer { buf, n } => {
                    fill(buf, n, &mut input);
                    if *n < buf.len() {
                        continue;
                    }
                    let [c0, c1, c2, c3, s0, s1, s2, s3] = *buf;
                    if u32::from_le_bytes([c0, c1, c2, c3]) != self.crc.sum()
                        || u32::from_le_bytes([s0, s1, s2, s3]) != self.crc.amount()
                    {
                        return Err(Failure::Corrupt);
                    }
                    self.members = self.members.saturating_add(1);
                    self.stage = Stage::Header { buf: [0; 10], n: 0 };
                    self.z.reset(false);
                    self.crc.reset();
                }
                Stage::Trailing => input = &[],
            }
        }
        Ok(())
    }
}

/// Moves bytes from `input` into `buf[*n..]`.
fn fill(buf: &mut [u8], n: &mut usize, input: &mut &[u8]) {
    let room = buf.len().saturating_sub(*n);
    let k = room.min(input.len());
    if let (Some(dst), Some(src)) = (buf.get_mut(*n..*n + k), input.get(..k)) {
        dst.copy_from_slice(src);
    }
    *n += k;
    *input = input.get(k..).unwrap_or_default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn decode(
        coding: Coding,
        body: &[u8],
        limit: usize,
        step: usize,
    ) -> (Vec<u8>, Result<(), Failure>, bool) {
        let mut d = Decoder::new(coding, limit).unwrap();
        let mut got = Vec::new();
        let mut result = Ok(());
        for chunk in body.chunks(step.max(1)) {
            result = d.feed(chunk, &mut |b| {
                got.extend_from_slice(b);
                true
            });
            if result.is_err() {
                break;
            }
        }
        let finished = d.finished();
        (got, result, finished)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn raw(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    const TEXT: &[u8] = br#"{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":34}} and some more text to make it compress"#;

    #[test]
    fn codings_from_headers() {
        let of = |v: &[&str]| {
            let mut h = HeaderMap::new();
            for v in v {
                h.append(CONTENT_ENCODING, v.parse().unwrap());
            }
            Coding::of(&h)
        };
        assert_eq!(of(&[]), Coding::Identity);
        assert_eq!(of(&["identity"]), Coding::Identity);
        assert_eq!(of(&["GZIP"]), Coding::Gzip);
        assert_eq!(of(&["x-gzip"]), Coding::Gzip);
        assert_eq!(of(&[" deflate "]), Coding::Deflate);
        assert_eq!(of(&["br"]), Coding::Brotli);
        assert_eq!(of(&["zstd"]), Coding::Unsupported);
        assert_eq!(of(&["gzip, br"]), Coding::Unsupported);
        assert_eq!(of(&["gzip", "br"]), Coding::Unsupported);
        assert_eq!(of(&["identity, gzip"]), Coding::Gzip);
    }

    #[test]
    fn every_coding_round_trips_at_every_split() {
        let bodies = [
            (Coding::Gzip, gzip(TEXT)),
            (Coding::Deflate, zlib(TEXT)),
            (Coding::Deflate, raw(TEXT)),
        ];
        for (coding, body) in bodies {
            for step in [1, 2, 3, 7, 64, body.len()] {
                let (got, result, finished) = decode(coding, &body, 1 << 20, step);
                assert_eq!(result, Ok(()), "{coding:?} step {step}");
                assert!(finished, "{coding:?} step {step}");
                assert_eq!(got, TEXT, "{coding:?} step {step}");
            }
        }
    }

    #[test]
    fn gzip_with_every_header_field_and_two_members() {
        let mut body = vec![
            0x1f,
            0x8b,
            8,
            FEXTRA | FNAME | FCOMMENT | FHCRC,
            0,
            0,
            0,
            0,
            0,
            255,
        ];
        body.extend_from_slice(&3u16.to_le_bytes());
        body.extend_from_slice(b"abc");
        body.extend_from_slice(b"name.json\0");
        body.extend_from_slice(b"a comment\0");
        body.extend_from_slice(&[0, 0]); // header CRC: not checked
        let deflated = raw(b"first ");
        body.extend_from_slice(&deflated);
        let mut crc = Crc::new();
        crc.update(b"first ");
        body.extend_from_slice(&crc.sum().to_le_bytes());
        body.extend_from_slice(&crc.amount().to_le_bytes());
        body.extend_from_slice(&gzip(b"second"));
        for step in [1, 5, body.len()] {
            let (got, result, finished) = decode(Coding::Gzip, &body, 1 << 20, step);
            assert_eq!(result, Ok(()));
            assert!(finished);
            assert_eq!(got, b"first second");
        }
    }

    #[test]
    fn trailing_garbage_after_a_member_is_ignored() {
        let mut body = gzip(TEXT);
        body.extend_from_slice(b"\0\0junk");
        let (got, result, finished) = decode(Coding::Gzip, &body, 1 << 20, 4);
        assert_eq!(result, Ok(()));
        assert!(finished);
        assert_eq!(got, TEXT);
    }

    #[test]
    fn truncated_streams_are_not_finished() {
        for (coding, body) in [
            (Coding::Gzip, gzip(TEXT)),
            (Coding::Deflate, zlib(TEXT)),
            (Coding::Deflate, raw(TEXT)),
        ] {
            for cut in [1, 2, 5, body.len() / 2, body.len() - 1] {
                let (_, result, finished) = decode(coding, &body[..cut], 1 << 20, 3);
                assert_eq!(result, Ok(()), "{coding:?} cut {cut}: not an error yet");
                assert!(!finished, "{coding:?} cut {cut}");
            }
        }
    }

    #[test]
    fn a_bad_checksum_fails() {
        let mut body = gzip(TEXT);
        let n = body.len();
        body[n - 8] ^= 0xff;
        let (_, result, finished) = decode(Coding::Gzip, &body, 1 << 20, 16);
        assert_eq!(result, Err(Failure::Corrupt));
        assert!(!finished);
    }

    #[test]
    fn bombs_stop_at_the_bound() {
        let zeros = vec![0u8; 8 << 20];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 64 << 10, "a real bomb: {} bytes", bomb.len());
        let mut d = Decoder::new(Coding::Gzip, 1 << 20).unwrap();
        let mut seen = 0usize;
        let r = d.feed(&bomb, &mut |b| {
            seen += b.len();
            true
        });
        assert_eq!(r, Err(Failure::TooLarge));
        assert!(seen <= 1 << 20, "never past the bound: {seen}");
        assert!(d.decoded() <= (1 << 20) + OUT_CHUNK as u64);
        assert!(!d.finished());
        // Failed for good: more input is refused at once.
        assert_eq!(d.feed(&bomb, &mut |_| true), Err(Failure::TooLarge));
    }

    #[test]
    fn error_bodies_decode_to_a_bounded_prefix() {
        assert_eq!(decoded_prefix(Coding::Identity, TEXT, 10), None);
        assert_eq!(decoded_prefix(Coding::Unsupported, TEXT, 10), None);
        assert_eq!(decoded_prefix(Coding::Gzip, TEXT, 10), None, "not gzip");
        assert_eq!(
            decoded_prefix(Coding::Gzip, &gzip(TEXT), 1 << 10).unwrap(),
            TEXT
        );
        let bomb = gzip(&vec![b'x'; 8 << 20]);
        assert_eq!(decoded_prefix(Coding::Gzip, &bomb, 100).unwrap().len(), 100);
        // A body cut at the read bound still gives what it holds.
        let z = zlib(TEXT);
        let part = decoded_prefix(Coding::Deflate, &z[..z.len() / 2], 1 << 10).unwrap_or_default();
        assert!(TEXT.starts_with(&part));
    }

    #[test]
    fn a_sink_can_stop_decoding() {
        let mut d = Decoder::new(Coding::Deflate, 1 << 20).unwrap();
        assert_eq!(d.feed(&zlib(TEXT), &mut |_| false), Err(Failure::Stopped));
        assert!(!d.finished());
    }

    fn br(data: &[u8]) -> Vec<u8> {
        ratewise_mock::encoding::compress(ratewise_mock::encoding::Coding::Brotli, data)
    }

    #[test]
    fn brotli_round_trips_and_stops_at_the_bound() {
        let body = br(TEXT);
        for step in [1, 3, body.len()] {
            let (got, result, finished) = decode(Coding::Brotli, &body, 1 << 20, step);
            assert_eq!(result, Ok(()));
            assert!(finished);
            assert_eq!(got, TEXT);
        }
        let (_, result, finished) = decode(Coding::Brotli, &body[..body.len() - 1], 1 << 20, 5);
        assert_eq!(result, Ok(()));
        assert!(!finished, "truncated");
        let bomb = br(&vec![b'0'; 8 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let (got, result, finished) = decode(Coding::Brotli, &bomb, 1 << 20, bomb.len());
        assert_eq!(result, Err(Failure::TooLarge));
        assert!(!finished);
        assert!(got.len() <= 1 << 20);
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = fastrand::Rng::with_seed(7);
        let valid = [gzip(TEXT), zlib(TEXT), br(TEXT)];
        for i in 0..3000 {
            let coding = [Coding::Gzip, Coding::Deflate, Coding::Brotli][i % 3];
            let mut body: Vec<u8> = if i % 2 == 0 {
                (0..rng.usize(0..300)).map(|_| rng.u8(..)).collect()
            } else {
                valid[i % 3].clone()
            };
            // flip a few bytes
            for _ in 0..rng.usize(0..4) {
                if !body.is_empty() {
                    let k = rng.usize(..body.len());
                    body[k] = rng.u8(..);
                }
            }
            let (got, _, _) = decode(coding, &body, 64 << 10, rng.usize(1..40));
            assert!(got.len() <= 64 << 10);
        }
    }
}
