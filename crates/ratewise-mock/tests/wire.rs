//! How answers go on the wire: `framing` (chunked or `Content-Length`) and
//! `compression` (per the request's `Accept-Encoding`).

mod common;

use common::*;
use ratewise_mock::{Fault, FaultRule, Framing, MockConfig, MockServer};
use std::io::Read;

async fn start(framing: Framing, compression: bool) -> MockServer {
    MockServer::start(MockConfig {
        framing,
        compression,
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("deflate") => {
            flate2::read::ZlibDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

#[tokio::test]
async fn json_has_a_content_length_by_default_or_is_chunked() {
    assert_eq!(MockConfig::default().framing, Framing::ContentLength);
    for framing in [Framing::Chunked, Framing::ContentLength] {
        let server = start(framing, false).await;
        let r = anthropic(&server, &anthropic_body("hi", 10, false)).await;
        assert_eq!(r.status, 200);
        match framing {
            Framing::Chunked => {
                assert_eq!(r.header("transfer-encoding"), Some("chunked"));
                assert_eq!(r.header("content-length"), None);
            }
            Framing::ContentLength => {
                assert_eq!(r.header("transfer-encoding"), None);
                assert_eq!(
                    r.header("content-length"),
                    Some(r.body.len().to_string().as_str())
                );
            }
        }
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("vary"), None);
        assert!(r.json()["usage"]["output_tokens"].is_u64());
        // errors are framed the same way
        let e = post(
            &server,
            "/v1/messages",
            "",
            &anthropic_body("x", 10, false),
            &[],
        )
        .await;
        assert_eq!(e.status, 401);
        assert_eq!(
            e.header("content-length").is_some(),
            framing == Framing::ContentLength
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn compression_follows_accept_encoding() {
    for framing in [Framing::Chunked, Framing::ContentLength] {
        let server = start(framing, true).await;
        for (accept, coding) in [
            ("gzip, deflate", Some("gzip")),
            ("deflate", Some("deflate")),
            ("gzip;q=0.5, br", Some("br")),
            ("identity", None),
            ("", None),
        ] {
            let extra: &[(&str, &str)] = if accept.is_empty() {
                &[]
            } else {
                &[("accept-encoding", accept)]
            };
            let body = anthropic_body("hi", 10, false);
            let r = post(&server, "/v1/messages", "k", &body, extra).await;
            assert_eq!(r.status, 200, "{accept}");
            assert_eq!(r.header("content-encoding"), coding, "{accept}");
            assert_eq!(r.header("vary"), Some("accept-encoding"));
            if framing == Framing::ContentLength {
                assert_eq!(
                    r.header("content-length"),
                    Some(r.body.len().to_string().as_str()),
                    "the length of the compressed bytes"
                );
            }
            let plain = decode(coding, &r.body);
            let v: serde_json::Value = serde_json::from_slice(&plain).unwrap();
            assert_eq!(
                v["usage"]["output_tokens"],
                server.records().last().unwrap().output_tokens
            );
        }
        server.shutdown().await;
    }
}

#[tokio::test]
async fn compressed_streams_and_errors_decode_whole() {
    let server = start(Framing::ContentLength, true).await;
    for coding in ["gzip", "deflate", "br"] {
        let accept = [("accept-encoding", coding)];
        let r = post(
            &server,
            "/v1/messages",
            "k",
            &anthropic_body("hi", 20, true),
            &accept,
        )
        .await;
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(
            r.header("transfer-encoding"),
            Some("chunked"),
            "streams stay chunked"
        );
        let text = String::from_utf8(decode(Some(coding), &r.body)).unwrap();
        assert!(text.starts_with("event: message_start"), "{text}");
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

        let r = post(
            &server,
            "/v1/chat/completions",
            "k",
            &openai_body("hi", 20, true),
            &accept,
        )
        .await;
        let text = String::from_utf8(decode(Some(coding), &r.body)).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }
    server.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &anthropic_body("hi", 20, false),
        &[("accept-encoding", "gzip")],
    )
    .await;
    assert_eq!(r.status, 529);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let v: serde_json::Value = serde_json::from_slice(&decode(Some("gzip"), &r.body)).unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    server.shutdown().await;
}

#[test]
fn framing_and_compression_read_from_json() {
    let cfg =
        MockConfig::from_json(r#"{"framing": "content_length", "compression": true}"#).unwrap();
    assert_eq!(cfg.framing, Framing::ContentLength);
    assert!(cfg.compression);
    assert!(MockConfig::from_json(r#"{"framing": "gzip"}"#).is_err());
    assert!(MockConfig::from_json(r#"{"compresion": true}"#).is_err());
    assert!(!MockConfig::default().compression);
}
