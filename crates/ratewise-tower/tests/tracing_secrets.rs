//! The trace carries the evidence and never a secret: no `authorization`,
//! `x-api-key`, cookie or request body appears in the captured output.

mod common;

use common::*;
use ratewise_mock::{Fault, FaultRule, MockConfig};
use std::io::Write;
use std::sync::{Arc, Mutex};
use tower::Layer;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn trace_has_evidence_and_no_secrets() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = mock(MockConfig {
        faults: vec![
            FaultRule::nth(Fault::Overloaded, [1]),
            FaultRule::nth(
                Fault::Status {
                    status: 400,
                    html: false,
                },
                [3],
            ),
            FaultRule::nth(Fault::StreamError { after_events: 3 }, [4]),
            FaultRule::nth(Fault::Reset, [5]),
        ],
        ..roomy()
    })
    .await;
    let mut svc = layer().layer(client());
    for (job, stream) in [("t1", false), ("t2", false), ("t3", true), ("t4", false)] {
        let _ = run(&mut svc, request(&server, job, stream)).await;
    }
    server.shutdown().await;

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    for evidence in [
        "job_id",
        "attempt",
        "status=529",
        "cause=\"overloaded\"",
        "action=\"retry\"",
        "delay_ms",
        "request_id",
        "mid_stream",
        "hold_unknown",
    ] {
        assert!(text.contains(evidence), "missing {evidence} in:\n{text}");
    }
    for secret in [
        "SECRET",
        "sk-ant",
        "x-api-key",
        "authorization",
        "cookie",
        "messages",
        "say hello",
    ] {
        assert!(
            !text
                .to_ascii_lowercase()
                .contains(&secret.to_ascii_lowercase()),
            "{secret} leaked:\n{text}"
        );
    }
}
