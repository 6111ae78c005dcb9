//! Content codings of the mock's answers, when
//! [`MockConfig::compression`](crate::MockConfig::compression) is on:
//! `Accept-Encoding` negotiation and gzip / deflate (zlib-wrapped, as RFC
//! 9110 says) / br encoders, for whole bodies and for streams (one flush
//! per SSE frame, so a client can decode each event as it arrives).
//!
//! ```
//! use ratewise_mock::encoding::{compress, Coding};
//! assert_eq!(Coding::negotiate("gzip, deflate, br;q=0.5"), Some(Coding::Gzip));
//! assert_eq!(Coding::negotiate("gzip;q=0.8, br"), Some(Coding::Brotli));
//! assert_eq!(Coding::negotiate("identity"), None);
//! assert_eq!(&compress(Coding::Gzip, b"{}")[..2], &[0x1f, 0x8b]);
//! ```

use std::io::Write;

/// A content coding the mock can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// `gzip`.
    Gzip,
    /// `deflate` (zlib-wrapped).
    Deflate,
    /// `br`.
    Brotli,
}

impl Coding {
    /// The `Content-Encoding` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Brotli => "br",
        }
    }

    /// The coding to answer a request's `Accept-Encoding` with: the
    /// supported coding with the highest q-value, the first listed on a
    /// tie; `None` (identity) when none is acceptable. `x-gzip` counts as
    /// `gzip`; `*` and unknown codings are passed over.
    pub fn negotiate(accept: &str) -> Option<Coding> {
        let mut best: Option<(Coding, u16)> = None;
        for item in accept.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let coding = if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")
            {
                Coding::Gzip
            } else if name.eq_ignore_ascii_case("deflate") {
                Coding::Deflate
            } else if name.eq_ignore_ascii_case("br") {
                Coding::Brotli
            } else {
                continue;
            };
            let mut q = Some(1000);
            for param in parts {
                let (key, value) = param.split_once('=').unwrap_or((param, ""));
                if key.trim().eq_ignore_ascii_case("q") {
                    q = parse_q(value.trim());
                }
            }
            match q {
                Some(q) if q > 0 && best.is_none_or(|(_, b)| q > b) => best = Some((coding, q)),
                _ => {}
            }
        }
        best.map(|(c, _)| c)
    }
}

/// A q-value in thousandths (`None` when malformed).
fn parse_q(v: &str) -> Option<u16> {
    let q: f64 = v.parse().ok()?;
    (0.0..=1.0)
        .contains(&q)
        .then(|| (q * 1000.0).round() as u16)
}

/// `data` compressed whole with `coding`.
pub fn compress(coding: Coding, data: &[u8]) -> Vec<u8> {
    let mut e = StreamEncoder::new(coding);
    let mut out = e.push(data);
    out.extend_from_slice(&e.finish());
    out
}

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Deflate(flate2::write::ZlibEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
}

/// Compresses a body piece by piece: the bytes each [`push`](Self::push)
/// returns decode to everything pushed so far; [`finish`](Self::finish)
/// returns the end of the compressed stream.
pub struct StreamEncoder {
    inner: Inner,
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let coding = match self.inner {
            Inner::Gzip(_) => Coding::Gzip,
            Inner::Deflate(_) => Coding::Deflate,
            Inner::Brotli(_) => Coding::Brotli,
        };
        f.debug_struct("StreamEncoder")
            .field("coding", &coding)
            .finish()
    }
}

impl StreamEncoder {
    /// An encoder for `coding`.
    pub fn new(coding: Coding) -> Self {
        let level = flate2::Compression::default();
        let inner = match coding {
            Coding::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(Vec::new(), level)),
            Coding::Deflate => Inner::Deflate(flate2::write::ZlibEncoder::new(Vec::new(), level)),
            // quality 5, 4 MiB window (lgwin 22): the usual HTTP settings.
            Coding::Brotli => Inner::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                5,
                22,
            ))),
        };
        StreamEncoder { inner }
    }

    /// Compresses `piece` and flushes: the bytes to send for it.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        // Writing into a Vec cannot fail.
        let out = match &mut self.inner {
            Inner::Gzip(e) => {
                let _ = e.write_all(piece).and_then(|()| e.flush());
                e.get_mut()
            }
            Inner::Deflate(e) => {
                let _ = e.write_all(piece).and_then(|()| e.flush());
                e.get_mut()
            }
            Inner::Brotli(e) => {
                let _ = e.write_all(piece).and_then(|()| e.flush());
                e.get_mut()
            }
        };
        std::mem::take(out)
    }

    /// The end of the compressed stream (trailer and checksum).
    pub fn finish(self) -> Vec<u8> {
        match self.inner {
            Inner::Gzip(e) => e.finish().unwrap_or_default(),
            Inner::Deflate(e) => e.finish().unwrap_or_default(),
            Inner::Brotli(e) => e.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap(),
            Coding::Deflate => flate2::read::ZlibDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap(),
            Coding::Brotli => brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap(),
        };
        out
    }

    #[test]
    fn negotiation_follows_q_values_then_order() {
        assert_eq!(Coding::negotiate(""), None);
        assert_eq!(Coding::negotiate("gzip, deflate"), Some(Coding::Gzip));
        assert_eq!(Coding::negotiate("deflate, gzip"), Some(Coding::Deflate));
        assert_eq!(Coding::negotiate("zstd, br"), Some(Coding::Brotli));
        assert_eq!(
            Coding::negotiate("gzip;q=0.5, deflate;q=0.9"),
            Some(Coding::Deflate)
        );
        assert_eq!(Coding::negotiate("gzip;q=0, identity"), None);
        assert_eq!(Coding::negotiate("X-GZIP ; Q=1.0"), Some(Coding::Gzip));
        assert_eq!(
            Coding::negotiate("br;q=bogus, gzip;q=0.1"),
            Some(Coding::Gzip)
        );
        assert_eq!(Coding::negotiate("*"), None);
    }

    #[test]
    fn every_coding_round_trips_whole_and_per_piece() {
        let pieces: [&[u8]; 3] = [b"event: a\ndata: {}\n\n", b"event: b\n", b"data: {}\n\n"];
        let whole = pieces.concat();
        for coding in [Coding::Gzip, Coding::Deflate, Coding::Brotli] {
            assert_eq!(decode(coding, &compress(coding, &whole)), whole);
            let mut e = StreamEncoder::new(coding);
            let mut sent = Vec::new();
            for p in pieces {
                let bytes = e.push(p);
                assert!(!bytes.is_empty(), "{coding:?}: every piece is flushed");
                sent.extend_from_slice(&bytes);
            }
            sent.extend_from_slice(&e.finish());
            assert_eq!(decode(coding, &sent), whole, "{coding:?}");
        }
    }
}
