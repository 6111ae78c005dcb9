//! A pool of mock upstreams behind one layer (issue #40): each attempt
//! goes to the member its own admission can take soonest, rewritten for
//! it; a capped member gets nothing after its cap; an overloaded member's
//! jobs finish on the other; one retry budget across members.

mod common;

use common::*;
use ratewise_core::{ActionKind, Cause};
use ratewise_mock::{Fault, FaultRule, MockServer};
use ratewise_tower::pool::{HttpRoute, Pool, PoolMember};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::Arc;
use tower::Layer;

const MAIN: &str = "sk-ant-MAIN-REAL-KEY";
const BACKUP: &str = "sk-ant-BACKUP-REAL-KEY";

fn pooled_layer(a: &MockServer, b: &MockServer, weights: (u32, u32)) -> RetryLayer {
    let pool = Pool::new()
        .member(
            PoolMember::new(HttpRoute::anthropic(&a.base_url(), MAIN).unwrap()).weight(weights.0),
        )
        .member(
            PoolMember::new(HttpRoute::anthropic(&b.base_url(), BACKUP).unwrap()).weight(weights.1),
        );
    let mut config = Config::default();
    config.policy = fast_policy();
    config.provider = Some(ratewise_core::Provider::Anthropic);
    RetryLayer::builder()
        .config(config)
        .store(state())
        .clock(Arc::new(TokioClock::new()))
        .pool(pool)
        .build()
        .unwrap()
}

/// A request as an application makes it: to the pool's "address" (any),
/// with the caller's own key, which never leaves.
fn call(job: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    request_to("http://pool.invalid", job, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_spread_by_weight_and_rewritten_for_their_member() {
    let a = mock(roomy()).await;
    let b = mock(roomy()).await;
    let layer = pooled_layer(&a, &b, (70, 30));
    let mut svc = layer.layer(client());
    for i in 0..50 {
        let ended = run(&mut svc, call(&format!("w{i}"))).await;
        assert_eq!(ended.action, ActionKind::Done, "{:?}", ended.error);
        let member = ended.records[0].member.clone().expect("member named");
        assert!(member.contains("#fp-"), "{member}");
        assert!(!member.contains("MAIN-REAL"), "{member}");
    }
    let (na, nb) = (a.records().len(), b.records().len());
    assert_eq!(na + nb, 50);
    // 70/30 over 50 sends, all ready at once: the shares follow weights.
    assert!((30..=40).contains(&na), "a {na} b {nb}");
    // Each mock saw its own member's key, one key each: the caller's key
    // (the same in every request) never reached either.
    let keys = |m: &MockServer| {
        let mut k: Vec<String> = m.records().into_iter().map(|r| r.key).collect();
        k.dedup();
        k
    };
    let (ka, kb) = (keys(&a), keys(&b));
    assert_eq!((ka.len(), kb.len()), (1, 1));
    assert_ne!(ka, kb);
    let status = layer.pool_status().await.unwrap();
    assert_eq!(status.members.len(), 2);
    assert_eq!(status.members[0].sends as usize, na);
    assert!(status.members.iter().all(|m| m.stopped.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_member_hands_its_jobs_to_the_other() {
    let a = mock(roomy()).await;
    let b = mock(roomy()).await;
    a.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let layer = pooled_layer(&a, &b, (1, 1));
    let mut svc = layer.layer(client());
    let jobs = 40;
    for i in 0..jobs {
        let ended = run(&mut svc, call(&format!("o{i}"))).await;
        assert_eq!(ended.action, ActionKind::Done, "{:?}", ended.error);
    }
    let sends = a.records().len() + b.records().len();
    assert_eq!(b.records().len(), jobs);
    assert!(
        sends as f64 <= jobs as f64 * 1.1,
        "{sends} sends for {jobs} jobs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_cap_stops_its_member_and_the_jobs_go_on_with_the_other() {
    let a = mock(roomy()).await;
    let b = mock(roomy()).await;
    let layer = pooled_layer(&a, &b, (1, 1));
    let mut svc = layer.layer(client());
    for i in 0..10 {
        assert_eq!(
            run(&mut svc, call(&format!("s{i}"))).await.action,
            ActionKind::Done
        );
    }
    a.set_spend_cap(Some(0.0));
    let before = a.records().len();
    for i in 10..40 {
        let ended = run(&mut svc, call(&format!("s{i}"))).await;
        assert_eq!(ended.action, ActionKind::Done, "{:?}", ended.error);
    }
    // At most the one send that met the cap went to the capped member.
    assert!(
        a.records().len() <= before + 1,
        "{} > {before} + 1",
        a.records().len()
    );
    let status = layer.pool_status().await.unwrap();
    let stop = status.members[0].stopped.clone().expect("member 0 stopped");
    assert_eq!(stop.cause, Cause::SpendCap.as_str());
    assert!(stop.status.is_some(), "the answer's evidence: {stop:?}");
    assert!(status.members[1].stopped.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_meeting_429s_everywhere_spends_one_budget() {
    let a = mock(roomy()).await;
    let b = mock(roomy()).await;
    let too_many = Fault::Status {
        status: 429,
        html: false,
    };
    a.set_faults(vec![FaultRule::always(too_many.clone())]);
    b.set_faults(vec![FaultRule::always(too_many)]);
    let layer = pooled_layer(&a, &b, (1, 1));
    let mut svc = layer.layer(client());
    let ended = run(&mut svc, call("everywhere")).await;
    assert_ne!(ended.action, ActionKind::Done);
    let sends = a.records().len() + b.records().len();
    assert_eq!(sends, ended.attempts);
    assert!(sends <= fast_policy().max_attempts as usize, "{sends}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_may_have_run_is_never_sent_to_another_member() {
    let a = mock(roomy()).await;
    let b = mock(roomy()).await;
    // Member A reads each request whole and drops the connection: the
    // request may have run there.
    a.set_faults(vec![FaultRule::always(Fault::Reset)]);
    let layer = pooled_layer(&a, &b, (1, 1));
    let mut svc = layer.layer(client());
    let mut on_a = 0;
    for i in 0..12 {
        let job = format!("u{i}");
        let ended = run(&mut svc, call(&job)).await;
        let first = ended.records[0].member.clone().unwrap();
        if sends(&a, &job) > 0 {
            on_a += 1;
            // Its request reached A with no answer: it stays there (held
            // or retried on A), never sent to B.
            assert_eq!(sends(&b, &job), 0, "{job}: {:?}", ended.records);
            assert!(ended
                .records
                .iter()
                .all(|r| r.member.as_deref() == Some(first.as_str())));
        } else {
            assert_eq!(ended.action, ActionKind::Done);
        }
    }
    assert!(on_a > 0, "some job went to A first");
}
