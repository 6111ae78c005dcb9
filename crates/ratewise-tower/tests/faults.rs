//! Every fault the mock injects ends in the expected outcome, and the
//! sends the mock recorded equal the attempts the layer recorded.

mod common;

use common::*;
use ratewise_core::{ActionKind, Cause, GiveUpReason};
use ratewise_mock::{Fault, FaultRule, MockConfig, RetryAfterFormat, Trigger};
use ratewise_tower::Metered;
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
    fn attempt_started(&self, job_id: &str, attempt: u32, _at: std::time::SystemTime) {
        self.0
            .lock()
            .unwrap()
            .push(format!("start {job_id} {attempt}"));
    }
    fn attempt_ended(&self, r: &ratewise_core::record::AttemptRecord) {
        let job = r.job_id.as_deref().unwrap_or("");
        self.0
            .lock()
            .unwrap()
            .push(format!("end {job} {} {}", r.attempt, r.action));
    }
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
