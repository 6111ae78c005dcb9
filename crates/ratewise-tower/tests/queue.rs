//! Queue-wide behaviour across clones: a spend cap stops every clone with
//! zero further sends until `resume()`, no job is lost, and a 429's
//! `retry-after` holds back every clone.

mod common;

use common::*;
use ratewise_core::{ActionKind, Cause};
use ratewise_mock::{Fault, FaultRule, MockConfig, RetryAfterFormat};
use std::collections::BTreeMap;
use std::time::Duration;
use tower::Layer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_cap_stops_every_clone_until_resume_and_no_job_is_lost() {
    let mut cfg = roomy();
    cfg.spend.cap_usd = Some(0.002); // a few requests cross it
    let server = mock(cfg).await;
    let layer = layer();
    let base = layer.layer(client());
    let mut outcomes: BTreeMap<String, ActionKind> = BTreeMap::new();
    let mut pending: Vec<String> = (0..30).map(|i| format!("job-{i:02}")).collect();

    // Round one: clones take turns; after the cap nothing more is sent.
    let mut stopped = Vec::new();
    for (i, job) in pending.drain(..).enumerate() {
        let mut svc = base.clone();
        let ended = run(&mut svc, request(&server, &job, i % 2 == 0)).await;
        match ended.action {
            ActionKind::StopQueue => stopped.push(job),
            a => {
                assert!(outcomes.insert(job, a).is_none(), "one outcome per job");
            }
        }
    }
    let records = server.records();
    let cap_at = records
        .iter()
        .position(|r| r.cause == Cause::SpendCap)
        .expect("the cap was hit");
    assert_eq!(records.len(), cap_at + 1, "zero sends after the spend cap");
    assert!(!stopped.is_empty());
    // Stopped calls after the first were refused before any send.
    let sent_stopped = stopped.iter().filter(|j| sends(&server, j) > 0).count();
    assert_eq!(sent_stopped, 1, "only the job that met the cap was sent");

    // A human raises the cap and resumes: the kept jobs all complete.
    server.set_spend_cap(None);
    layer.resume(&key()).await;
    for job in stopped {
        let mut svc = base.clone();
        let ended = run(&mut svc, request(&server, &job, false)).await;
        assert_eq!(ended.action, ActionKind::Done, "{job}");
        assert!(outcomes.insert(job, ended.action).is_none());
    }
    assert_eq!(outcomes.len(), 30, "every job ended in exactly one outcome");
    assert!(outcomes.values().all(|a| *a == ActionKind::Done));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_holds_back_every_clone() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(
            Fault::RetryAfter {
                format: RetryAfterFormat::Seconds,
                secs: 2,
            },
            [1],
        )],
        ..roomy()
    })
    .await;
    let layer = layer();
    let base = layer.layer(client());
    let url = server.base_url();

    // The first job meets the 429 (retry-after: 2) ...
    let mut first = base.clone();
    let u = url.clone();
    let a = tokio::spawn(async move { run(&mut first, request_to(&u, "a", false)).await });
    // ... and once the layer has read it (the shared bucket is paused),
    // other clones send.
    let state = layer.state().clone();
    let scope = state.target(&key(), "claude-sonnet-4-5").await.scope;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while state
        .snapshot(scope, layer.now())
        .await
        .and_then(|s| s.paused_until)
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the 429 was never read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut others = Vec::new();
    for i in 0..4 {
        let mut svc = base.clone();
        let u = url.clone();
        others.push(tokio::spawn(async move {
            run(&mut svc, request_to(&u, &format!("b{i}"), false)).await
        }));
    }
    let a = a.await.unwrap();
    assert_eq!(a.action, ActionKind::Done);
    assert_eq!(a.attempts, 2);
    for o in others {
        assert_eq!(o.await.unwrap().action, ActionKind::Done);
    }

    let records = server.records();
    let limited = &records[0];
    assert_eq!(limited.status, Some(429));
    assert_eq!(records.len(), 6);
    for r in &records[1..] {
        assert!(
            r.at_ms >= limited.at_ms + 2_000,
            "{:?} sent {} ms after the 429 that said 2 s",
            r.job,
            r.at_ms - limited.at_ms
        );
    }
    server.shutdown().await;
}

/// A worker over a mixed run: faults that end jobs in every way, a 429
/// whose wait defers, and a spend cap that stops the queue. Deferred and
/// stopped jobs are kept and sent again; every job ends in exactly one
/// final outcome, the mock saw exactly the attempts the layer recorded,
/// and nothing was sent between the cap and `resume()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_is_lost_across_every_outcome() {
    use ratewise_tower::Config;
    use std::collections::VecDeque;

    let mut cfg = roomy();
    cfg.faults = vec![
        FaultRule::nth(
            Fault::Status {
                status: 404,
                html: false,
            },
            [2],
        ),
        FaultRule::nth(Fault::Reset, [4]),
        FaultRule::nth(Fault::Overloaded, [6, 7, 8]),
        FaultRule::nth(
            Fault::RetryAfter {
                format: RetryAfterFormat::Seconds,
                secs: 1,
            },
            [10],
        ),
    ];
    cfg.spend.cap_usd = Some(0.0015);
    let server = mock(cfg).await;
    let mut policy = fast_policy();
    policy.max_inline_wait = Duration::from_millis(300);
    // A worker with no deadline per job: long waits hand the job back
    // (defer) instead of waiting inline.
    policy.default_deadline = None;
    let layer = layer_with({
        let mut config = Config::default();
        config.policy = policy;
        config.provider = Some(ratewise_core::Provider::Anthropic);
        config
    });
    let mut svc = layer.layer(client());

    let mut queue: VecDeque<(String, std::time::Instant)> = (0..24)
        .map(|i| (format!("w{i:02}"), std::time::Instant::now()))
        .collect();
    let mut parked = Vec::new();
    let mut finals: BTreeMap<String, ActionKind> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut layer_attempts = 0usize;
    let mut resumed = false;
    while let Some((job, not_before)) = queue.pop_front() {
        tokio::time::sleep_until(not_before.into()).await;
        let ended = run(&mut svc, request(&server, &job, false)).await;
        layer_attempts += ended.attempts;
        seen.insert(ended.action);
        match ended.action {
            ActionKind::Defer => {
                let e = ended.error.unwrap();
                let wait = e
                    .until()
                    .and_then(|u| u.duration_since(std::time::SystemTime::now()).ok())
                    .unwrap_or_default();
                queue.push_back((job, std::time::Instant::now() + wait));
            }
            ActionKind::StopQueue => parked.push(job),
            a => assert!(finals.insert(job, a).is_none(), "one final outcome per job"),
        }
        if queue.is_empty() && !parked.is_empty() {
            assert!(!resumed, "stopped once");
            // Nothing was sent after the cap answer.
            let records = server.records();
            let cap = records
                .iter()
                .position(|r| r.cause == Cause::SpendCap)
                .unwrap();
            assert_eq!(records.len(), cap + 1, "zero sends after the spend cap");
            server.set_spend_cap(None);
            layer.resume(&key()).await;
            resumed = true;
            queue.extend(parked.drain(..).map(|j| (j, std::time::Instant::now())));
        }
    }
    assert!(resumed, "the cap was hit");
    assert_eq!(finals.len(), 24, "every job ended");
    for kind in [
        ActionKind::Done,
        ActionKind::Fail,
        ActionKind::HoldUnknown,
        ActionKind::GiveUp,
        ActionKind::Defer,
        ActionKind::StopQueue,
    ] {
        assert!(seen.contains(&kind), "{kind} never happened: {seen:?}");
    }
    assert_eq!(server.records().len(), layer_attempts, "no hidden sends");
    server.shutdown().await;
}
