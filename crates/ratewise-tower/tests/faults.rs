//! Every fault the mock injects ends in the expected outcome, and the
//! sends the mock recorded equal the attempts the layer recorded.

mod common;

use common::*;
use ratewise_core::{ActionKind, Cause, GiveUpReason};
use ratewise_mock::{Fault, FaultRule, MockConfig, RetryAfterFormat, Trigger};
use ratewise_tower::Metered;
use ratewise_tower::{written, Written};
use std::time::Duration;
use tower::Layer;

struct Case {
    name: &'static str,
    rules: Vec<FaultRule>,
    stream: bool,
    action: ActionKind,
    attempts: usize,
    last_cause: Option<Cause>,
}

fn nth(fault: Fault, n: &[u64]) -> Vec<FaultRule> {
    vec![FaultRule::nth(fault, n.iter().copied())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_ends_in_its_outcome_with_no_hidden_sends() {
    let cases = vec![
        Case {
            name: "clean",
            rules: vec![],
            stream: false,
            action: ActionKind::Done,
            attempts: 1,
            last_cause: None,
        },
        Case {
            name: "overloaded once",
            rules: nth(Fault::Overloaded, &[1]),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "overloaded always",
            rules: vec![FaultRule::always(Fault::Overloaded)],
            stream: false,
            action: ActionKind::GiveUp,
            attempts: 3,
            last_cause: Some(Cause::Overloaded),
        },
        Case {
            name: "502 html once",
            rules: nth(
                Fault::Status {
                    status: 502,
                    html: true,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "500 twice",
            rules: nth(
                Fault::Status {
                    status: 500,
                    html: false,
                },
                &[1, 2],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 3,
            last_cause: None,
        },
        Case {
            name: "404",
            rules: nth(
                Fault::Status {
                    status: 404,
                    html: false,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Fail,
            attempts: 1,
            last_cause: Some(Cause::NotFound),
        },
        Case {
            name: "403",
            rules: nth(
                Fault::Status {
                    status: 403,
                    html: false,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Fail,
            attempts: 1,
            last_cause: Some(Cause::Permission),
        },
        Case {
            name: "reset",
            rules: nth(Fault::Reset, &[1]),
            stream: false,
            action: ActionKind::HoldUnknown,
            attempts: 1,
            last_cause: Some(Cause::OutcomeUnknown),
        },
        Case {
            name: "retry-after seconds",
            rules: nth(
                Fault::RetryAfter {
                    format: RetryAfterFormat::Seconds,
                    secs: 1,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "retry-after http-date",
            rules: nth(
                Fault::RetryAfter {
                    format: RetryAfterFormat::HttpDate,
                    secs: 1,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "retry-after garbage",
            rules: nth(
                Fault::RetryAfter {
                    format: RetryAfterFormat::Garbage,
                    secs: 1,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "retry-after negative",
            rules: nth(
                Fault::RetryAfter {
                    format: RetryAfterFormat::Negative,
                    secs: 1,
                },
                &[1],
            ),
            stream: false,
            action: ActionKind::Done,
            attempts: 2,
            last_cause: None,
        },
        Case {
            name: "stream cut",
            rules: vec![FaultRule::always(Fault::StreamCut { after_events: 3 })],
            stream: true,
            action: ActionKind::Done,
            attempts: 1,
            last_cause: None,
        },
        Case {
            name: "stream error mid-way",
            rules: vec![FaultRule::always(Fault::StreamError { after_events: 4 })],
            stream: true,
            action: ActionKind::Done,
            attempts: 1,
            last_cause: None,
        },
        Case {
            name: "stream overloaded as the first frame (first byte commits)",
            rules: nth(Fault::StreamError { after_events: 0 }, &[1]),
            stream: true,
            action: ActionKind::Done,
            attempts: 1,
            last_cause: None,
        },
    ];
    let server = mock(roomy()).await;
    for (i, case) in cases.into_iter().enumerate() {
        server.set_faults(
            case.rules
                .into_iter()
                .map(|mut r| {
                    // Request numbers count from the server's start: shift
                    // them to this case's first request.
                    if let Trigger::Nth(ns) = &mut r.when {
                        let base = server.records().len() as u64;
                        for n in ns.iter_mut() {
                            *n += base;
                        }
                    }
                    r
                })
                .collect(),
        );
        let mut svc = layer().layer(client());
        let job = format!("case-{i}");
        let ended = run(&mut svc, request(&server, &job, case.stream)).await;
        assert_eq!(
            ended.action, case.action,
            "{}: {:?}",
            case.name, ended.error
        );
        assert_eq!(
            ended.attempts, case.attempts,
            "{}: layer attempts",
            case.name
        );
        assert_eq!(
            sends(&server, &job),
            case.attempts,
            "{}: mock sends",
            case.name
        );
        assert_delays_respected(&server, &job, &ended.records);
        if let Some(cause) = case.last_cause {
            let e = ended.error.as_ref().unwrap();
            assert_eq!(e.classification().unwrap().cause, cause, "{}", case.name);
            assert_eq!(e.attempts().last().unwrap().cause, cause, "{}", case.name);
        }
        if case.action == ActionKind::GiveUp {
            assert_eq!(
                ended.error.as_ref().unwrap().give_up_reason(),
                Some(GiveUpReason::Attempts)
            );
        }
        if case.action == ActionKind::Done && !case.stream {
            assert!(
                matches!(
                    ended.metered,
                    Some(Metered::Body {
                        usage: Some(_),
                        complete: true
                    })
                ),
                "{}",
                case.name
            );
        }
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_carries_the_final_response() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::Overloaded)],
        ..roomy()
    })
    .await;
    let mut svc = layer().layer(client());
    let ended = run(&mut svc, request(&server, "j", false)).await;
    let e = ended.error.unwrap();
    assert!(e.is_give_up());
    assert_eq!(e.status().map(|s| s.as_u16()), Some(529));
    assert!(e.headers().unwrap().contains_key("request-id"));
    assert!(std::str::from_utf8(e.body().unwrap())
        .unwrap()
        .contains("overloaded_error"));
    assert_eq!(e.attempts().len(), 3);
    assert_eq!(e.attempts()[0].action, ActionKind::Retry);
    assert!(e.to_string().contains("give_up"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_answer_behind_a_timeout_is_held_unknown() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::Stall { ms: 3_000 })],
        ..roomy()
    })
    .await;
    let inner = tower::ServiceBuilder::new()
        .timeout(Duration::from_millis(200))
        .service(client());
    let mut svc = layer().layer(inner);
    use tower::{Service, ServiceExt};
    let result = svc
        .ready()
        .await
        .unwrap()
        .call(request(&server, "stall", false))
        .await;
    let e = result.unwrap_err();
    assert!(e.is_hold_unknown(), "{e:?}");
    assert_eq!(
        e.classification().unwrap().transport.map(|t| t.as_str()),
        Some("timeout_after_send")
    );
    assert_eq!(e.attempts().len(), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_refused_is_retried_then_given_up() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut svc = layer().layer(client());
    let req = http::Request::post(format!("http://127.0.0.1:{port}/v1/messages"))
        .body(http_body_util::Full::new(anthropic_body(10, false)))
        .unwrap();
    let ended = run(&mut svc, req).await;
    let e = ended.error.unwrap();
    assert!(e.is_give_up(), "{e:?}");
    assert_eq!(e.attempts().len(), 3);
    assert!(e.attempts().iter().all(|r| r.cause == Cause::ConnectFailed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_body_fails_before_sending() {
    let server = mock(roomy()).await;
    let mut svc = layer_with({
        let mut config = ratewise_tower::Config::default();
        config.max_request_body = 16;
        config
    })
    .layer(client());
    use tower::{Service, ServiceExt};
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(request(&server, "big", false))
        .await
        .unwrap_err();
    assert!(e.is_body_too_large());
    assert!(!e.was_sent());
    assert!(server.records().is_empty());
    server.shutdown().await;
}

#[derive(Default)]
struct Log(std::sync::Mutex<Vec<String>>);

impl ratewise_tower::Journal for Log {
    fn attempt_started<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        _at: std::time::SystemTime,
    ) -> Written<'a> {
        self.0
            .lock()
            .unwrap()
            .push(format!("start {job_id} {attempt}"));
        written(Ok::<(), std::io::Error>(()))
    }
    fn attempt_ended<'a>(&'a self, r: &'a ratewise_core::record::AttemptRecord) -> Written<'a> {
        let job = r.job_id.as_deref().unwrap_or("");
        self.0
            .lock()
            .unwrap()
            .push(format!("end {job} {} {}", r.attempt, r.action));
        written(Ok::<(), std::io::Error>(()))
    }
}

/// A journal whose disk fills after `room` attempt starts: every later
/// start fails to write.
struct FullDisk {
    room: std::sync::atomic::AtomicU32,
    lines: std::sync::Mutex<Vec<String>>,
}

impl ratewise_tower::Journal for FullDisk {
    fn attempt_started<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        _at: std::time::SystemTime,
    ) -> Written<'a> {
        use std::sync::atomic::Ordering;
        let left = self.room.load(Ordering::Acquire);
        if left == 0 {
            return written(Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "no space left on device",
            )));
        }
        self.room.store(left - 1, Ordering::Release);
        self.lines
            .lock()
            .unwrap()
            .push(format!("start {job_id} {attempt}"));
        written(Ok::<(), std::io::Error>(()))
    }
    fn attempt_ended<'a>(&'a self, r: &'a ratewise_core::record::AttemptRecord) -> Written<'a> {
        let job = r.job_id.as_deref().unwrap_or("");
        self.lines
            .lock()
            .unwrap()
            .push(format!("end {job} {}", r.attempt));
        written(Ok::<(), std::io::Error>(()))
    }
}

/// Issue #26: an attempt is sent only after its record is written. A
/// journal that cannot write (a full disk) stops sending; it never loses
/// the record of a send that was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_journal_disk_stops_sends_without_losing_a_record() {
    let server = mock(roomy()).await;
    let journal = std::sync::Arc::new(FullDisk {
        room: std::sync::atomic::AtomicU32::new(2),
        lines: std::sync::Mutex::new(Vec::new()),
    });
    let mut config = ratewise_tower::Config::default();
    config.policy = fast_policy();
    config.provider = Some(ratewise_core::Provider::Anthropic);
    let mut svc = ratewise_tower::RetryLayer::builder()
        .config(config)
        .store(state())
        .journal(journal.clone())
        .build()
        .unwrap()
        .layer(client());
    for n in 0..4 {
        let ended = run(&mut svc, request(&server, &format!("j{n}"), false)).await;
        if n < 2 {
            assert_eq!(ended.action, ActionKind::Done, "room for its record: sent");
        } else {
            assert_eq!(ended.action, ActionKind::Inspect, "no room: not sent");
            let e = ended.error.expect("an error");
            assert!(!e.was_sent(), "{e:?}");
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            assert!(
                source.as_deref().is_some_and(|s| s.contains("no space")),
                "{source:?}"
            );
        }
    }
    assert_eq!(
        server.records().len(),
        2,
        "only the recorded sends were made"
    );
    let lines = journal.lines.lock().unwrap().clone();
    let starts = lines.iter().filter(|l| l.starts_with("start")).count();
    let ends = lines.iter().filter(|l| l.starts_with("end")).count();
    assert_eq!((starts, ends), (2, 2), "{lines:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_sees_every_attempt_start_before_its_end() {
    let server = mock(MockConfig {
        faults: vec![
            FaultRule::nth(Fault::Overloaded, [1]),
            FaultRule::nth(Fault::Reset, [3]),
        ],
        ..roomy()
    })
    .await;
    let log = std::sync::Arc::new(Log::default());
    let mut config = ratewise_tower::Config::default();
    config.policy = fast_policy();
    config.provider = Some(ratewise_core::Provider::Anthropic);
    let mut svc = ratewise_tower::RetryLayer::builder()
        .config(config)
        .store(state())
        .journal(log.clone())
        .build()
        .unwrap()
        .layer(client());
    let _ = run(&mut svc, request(&server, "j1", false)).await;
    let _ = run(&mut svc, request(&server, "j2", false)).await;
    let log = log.0.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "start j1 1",
            "end j1 1 retry",
            "start j1 2",
            "end j1 2 done",
            "start j2 1",
            "end j2 1 hold_unknown",
        ]
    );
    let starts = log.iter().filter(|l| l.starts_with("start")).count();
    assert_eq!(starts, server.records().len(), "one start per send");
    server.shutdown().await;
}
