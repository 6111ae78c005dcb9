//! What sharing a key through Redis means for the processes that share it:
//! one limit between them, a pause or a stop seen by one holding for all,
//! and the layer taking the store as its own.

mod common;

use common::at;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::admit::{
    self, Admission, AdmitRequest, Controller, End, Limits, Observed, Shared, Store, Update,
};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::{Action, Cause, Decision, Instant, Now, Provider};
use ratewise_redis::{Clock, Config, RedisStore};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;

const MODEL: &str = "claude-sonnet-4-5";

fn admission() -> admit::Config {
    let mut c = admit::Config::default();
    c.limits = Limits {
        requests: Some(60),
        ..Limits::NONE
    };
    c.ramp.warm_start = true;
    c.pause_jitter = Duration::ZERO;
    c.seed = Some(3);
    c
}

fn config(prefix: &str) -> Config {
    let mut c = Config::default();
    c.admission = admission();
    c.prefix = prefix.to_owned();
    c.clock = Clock::Caller;
    c
}

async fn stores(url: &str, n: usize, cfg: &Config) -> Vec<RedisStore> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(RedisStore::connect(url, cfg.clone()).await.unwrap());
    }
    v
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn three_processes_admit_what_one_store_would_not_three_times_it() {
    let (url, _server) = ratewise_redis::testing::redis();
    let procs = stores(&url, 3, &config(&ratewise_redis::testing::prefix())).await;
    let one = Shared::new(Controller::new(admission()));
    let t = at(10_000);
    let mut alone = 0;
    for _ in 0..30 {
        if let Admission::Go(r) = one.admit(&AdmitRequest::new(one.target("k", MODEL)), t) {
            alone += 1;
            drop(r);
        }
    }
    // The three together, interleaved, and concurrently within each.
    let mut together = 0;
    for _ in 0..10 {
        let mut futs = Vec::new();
        for p in &procs {
            futs.push(async move {
                let target = p.target("k", MODEL).await;
                p.admit(AdmitRequest::new(target), t).await
            });
        }
        for a in futures_join(futs).await {
            if let Admission::Go(r) = a {
                together += 1;
                drop(r);
            }
        }
    }
    assert!(alone > 0);
    assert_eq!(together, alone, "one bucket between the three processes");
}

/// Awaits every future (the tests need no `futures` dependency for it).
async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut handles = Vec::new();
    for f in futs {
        handles.push(Box::pin(f));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await);
    }
    out
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_pause_seen_by_one_process_holds_for_another() {
    let (url, _server) = ratewise_redis::testing::redis();
    let mut cfg = config(&ratewise_redis::testing::prefix());
    cfg.recheck = None;
    let procs = stores(&url, 2, &cfg).await;
    let t = at(5_000);
    let target = procs[0].target("k", MODEL).await;
    let Admission::Go(res) = procs[0].admit(AdmitRequest::new(target), t).await else {
        panic!("the first request is admitted")
    };
    let mut h = HeaderMap::new();
    h.insert(
        HeaderName::from_static("retry-after"),
        HeaderValue::from_static("20"),
    );
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    let cl = classify_response(
        Provider::Anthropic,
        &ResponseView {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: &h,
            body,
        },
        t.wall,
    );
    let observed = Observed::new(res.scope(), cl, Decision::new(Action::Done)).of_sent(res.sent());
    let answer = Update::answer(observed, Some(End::Release { reservation: res }));
    Store::update(&procs[0], answer, t).await;
    // The other process, its clock 3 s behind, waits until the same wall time.
    let late = Now::new(Instant::from_millis(2_000), t.wall);
    let target = procs[1].target("k", MODEL).await;
    match procs[1].admit(AdmitRequest::new(target), late).await {
        Admission::Wait { until, .. } => {
            assert_eq!(late.wall_at(until), t.wall + Duration::from_secs(20))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_process_waiting_on_a_key_another_stops_learns_it_within_a_second() {
    let (url, _server) = ratewise_redis::testing::redis();
    let procs = stores(&url, 2, &config(&ratewise_redis::testing::prefix())).await;
    let t = at(1_000);
    let target = procs[1].target("k", MODEL).await;
    // Empty the bucket: the next admission would wait about a second per
    // request, far longer for the 30th.
    let mut last = None;
    for _ in 0..30 {
        match procs[1].admit(AdmitRequest::new(target), t).await {
            Admission::Go(r) => drop(r),
            other => last = Some(other),
        }
    }
    let Some(Admission::Wait { until, .. }) = last else {
        panic!("the bucket runs dry: {last:?}")
    };
    assert!(
        until <= t.instant + Duration::from_secs(1),
        "a wait is cut to the recheck interval: {until:?}"
    );
    // Another process stops the key (a spend cap) meanwhile.
    procs[0].stop("k", Cause::SpendCap, None, t).await;
    // The waiter asks again when its (cut) wait ends, and learns it.
    match procs[1].admit(AdmitRequest::new(target), at(2_000)).await {
        Admission::Stopped { cause, .. } => assert_eq!(cause, Cause::SpendCap),
        other => panic!("{other:?}"),
    }
    // A resume by the waiter lifts it for the one that stopped it.
    procs[1].resume("k", at(2_000)).await;
    let t0 = procs[0].target("k", MODEL).await;
    assert!(!matches!(
        procs[0].admit(AdmitRequest::new(t0), at(70_000)).await,
        Admission::Stopped { .. }
    ));
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn the_layer_takes_it_as_its_store() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mut cfg = Config::default();
    cfg.prefix = prefix.clone();
    cfg.admission = admission();
    cfg.admission.limits.requests = Some(6_000);
    let calls = Arc::new(AtomicU32::new(0));
    let mut layers = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(&url, cfg.clone()).await.unwrap();
        layers.push((
            ratewise_tower::RetryLayer::builder()
                .provider(Provider::Anthropic)
                .store(Arc::new(store.clone()))
                .build()
                .unwrap(),
            store,
        ));
    }
    let mut jobs = Vec::new();
    for i in 0..20 {
        let (layer, _) = &layers[i % 2];
        let svc = layer.layer(common::provider(calls.clone(), Duration::ZERO));
        jobs.push(tokio::spawn(common::job(svc, Some("team-a"))));
    }
    for j in jobs {
        j.await.unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 20, "one send per job");
    // Both processes wrote the same key's record; nothing outstanding
    // once the settles queued from the jobs' ends are applied and written.
    let mut writes = 0;
    for (_, store) in &layers {
        store.flush().await;
        let h = store.health();
        assert!(!h.degraded && h.errors == 0, "{h:?}");
        writes += h.writes;
        let l = store.local().ledger();
        assert!(l.is_clean(), "{l:?}");
    }
    // Every write the processes made is one version of the key's record
    // (operations queued together share one write).
    let tag = ratewise_redis::key_tag("team-a");
    let mut conn = common::conn(&url).await;
    let (version, record): (Option<u64>, Option<String>) = redis::cmd("HMGET")
        .arg(format!("{prefix}:{{{tag}}}:record"))
        .arg("v")
        .arg("r")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(writes > 2, "{writes}");
    assert_eq!(
        version,
        Some(writes),
        "the record's version counts every write"
    );
    let record = record.expect("the key's record is in Redis");
    assert!(record.contains("claude-sonnet-4"), "{record}");
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_crashed_processs_reservation_stays_charged_at_its_estimate() {
    let (url, _server) = ratewise_redis::testing::redis();
    let mut cfg = config(&ratewise_redis::testing::prefix());
    cfg.admission.limits = Limits {
        output_tokens: Some(1_000),
        ..Limits::NONE
    };
    cfg.recheck = None;
    let t = at(1_000);
    {
        // A process admits 900 output tokens' worth and dies before its
        // answer: the provider may have run it.
        let crashed = RedisStore::connect(&url, cfg.clone()).await.unwrap();
        let target = crashed.target("k", MODEL).await;
        let mut req = AdmitRequest::new(target);
        req.max_tokens = Some(900);
        assert!(matches!(crashed.admit(req, t).await, Admission::Go(_)));
    }
    let other = RedisStore::connect(&url, cfg).await.unwrap();
    let target = other.target("k", MODEL).await;
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(900);
    // Charged: the survivor waits for the refill of those 900 tokens
    // (about 54 s at 1,000 a minute), not for nothing.
    match other.admit(req, t).await {
        Admission::Wait { until, .. } => {
            let wait = until - t.instant;
            assert!(wait > Duration::from_secs(40), "{wait:?}");
        }
        other => panic!("{other:?}"),
    }
    // And the refill gives it back: no lease needed to end it.
    assert!(matches!(
        other.admit(req, at(1_000 + 61_000)).await,
        Admission::Go(_)
    ));
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn an_admission_dropped_unread_gives_its_reservation_back() {
    let (url, _server) = ratewise_redis::testing::redis();
    let store = RedisStore::connect(&url, config(&ratewise_redis::testing::prefix()))
        .await
        .unwrap();
    let target = store.target("k", MODEL).await;
    let t = at(1_000);
    for _ in 0..20 {
        let writes = store.health().writes;
        let mut fut = Box::pin(store.admit(AdmitRequest::new(target), t));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(std::future::Future::poll(fut.as_mut(), &mut cx).is_pending());
        // The store answers (its write lands) while nobody reads: the
        // flush returns once the admission queued before it is applied.
        store.flush().await;
        assert!(store.health().writes > writes, "the take was written");
        drop(fut);
    }
    store.flush().await;
    let l = store.local().ledger();
    assert!(l.is_clean(), "{l:?}");
    assert_eq!(l.reserved.requests, 20, "{l:?}");
    assert_eq!(l.released.requests, 20, "each given back: {l:?}");
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_record_that_is_garbage_or_another_keys_is_overwritten_not_trusted() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mut conn = common::conn(&url).await;
    // Under k's tag: another key's stopped record, then plain garbage with
    // a version that is not a whole number.
    let other = RedisStore::connect(&url, config(&prefix)).await.unwrap();
    other.stop("other", Cause::SpendCap, None, at(1_000)).await;
    let theirs: String = redis::cmd("HGET")
        .arg(format!(
            "{prefix}:{{{}}}:record",
            ratewise_redis::key_tag("other")
        ))
        .arg("r")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mine = format!("{prefix}:{{{}}}:record", ratewise_redis::key_tag("k"));
    let _: () = redis::cmd("HSET")
        .arg(&mine)
        .arg("v")
        .arg(3)
        .arg("r")
        .arg(&theirs)
        .query_async(&mut conn)
        .await
        .unwrap();
    let store = RedisStore::connect(&url, config(&prefix)).await.unwrap();
    let target = store.target("k", MODEL).await;
    assert!(
        matches!(
            store.admit(AdmitRequest::new(target), at(1_000)).await,
            Admission::Go(_)
        ),
        "another key's stop does not stop this one"
    );
    let _: () = redis::cmd("HSET")
        .arg(&mine)
        .arg("v")
        .arg("2.5")
        .arg("r")
        .arg("{not json")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        store.admit(AdmitRequest::new(target), at(2_000)).await,
        Admission::Go(_)
    ));
    let h = store.health();
    assert!(!h.degraded && h.errors == 0, "{h:?}");
    // Repaired: a whole version and this key's record.
    let (v, r): (String, String) = redis::cmd("HMGET")
        .arg(&mine)
        .arg("v")
        .arg("r")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(v.parse::<u64>().is_ok(), "{v}");
    assert!(r.contains(r#""key":"k""#), "{r}");
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn redis_refusing_the_script_on_one_key_is_not_an_outage() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mut conn = common::conn(&url).await;
    // Something else keeps a plain string under k's record key.
    let mine = format!("{prefix}:{{{}}}:record", ratewise_redis::key_tag("k"));
    let _: () = redis::cmd("SET")
        .arg(&mine)
        .arg("not a hash")
        .query_async(&mut conn)
        .await
        .unwrap();
    let store = RedisStore::connect(&url, config(&prefix)).await.unwrap();
    let (tk, tj) = (
        store.target("k", MODEL).await,
        store.target("j", MODEL).await,
    );
    // k is served on this process's view, j still through Redis.
    assert!(matches!(
        store.admit(AdmitRequest::new(tk), at(1_000)).await,
        Admission::Go(_)
    ));
    assert!(matches!(
        store.admit(AdmitRequest::new(tj), at(1_000)).await,
        Admission::Go(_)
    ));
    let h = store.health();
    assert!(!h.degraded, "not an outage: {h:?}");
    assert!(h.errors >= 1 && h.writes >= 1, "{h:?}");
}

/// What one process learned of a key (its stated limits), read by a new
/// replica from the shared record, shown remembered once nobody wrote it
/// for a while, and forgotten for every process by one `forget`.
#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_new_replica_starts_from_what_the_key_learned_until_it_is_forgotten() {
    let (url, _server) = ratewise_redis::testing::redis();
    let mut cfg = config(&ratewise_redis::testing::prefix());
    cfg.admission.limits = Limits::NONE;
    cfg.recheck = None;
    let first = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let t = at(5_000);
    let target = first.target("k", MODEL).await;
    let Admission::Go(res) = first.admit(AdmitRequest::new(target), t).await else {
        panic!("the first request is admitted")
    };
    let mut h = HeaderMap::new();
    h.insert(
        HeaderName::from_static("anthropic-ratelimit-requests-limit"),
        HeaderValue::from_static("600"),
    );
    let cl = classify_response(
        Provider::Anthropic,
        &ResponseView {
            status: StatusCode::OK,
            headers: &h,
            body:
                br#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":2}}"#,
        },
        t.wall,
    );
    let observed = Observed::new(res.scope(), cl, Decision::new(Action::Done)).of_sent(res.sent());
    let end = End::Release { reservation: res };
    Store::update(&first, Update::answer(observed, Some(end)), t).await;
    first.flush().await;

    // A replica started later reads the record: the limit is known before
    // its first answer, live (written a moment ago).
    let replica = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let soon = at(6_000);
    let target = replica.target("k", MODEL).await;
    let snap = Store::snapshot(&replica, target.scope, soon).await.unwrap();
    assert_eq!(snap.limits.requests, Some(600), "{snap:?}");
    assert_eq!(
        snap.remembered, None,
        "a record written a second ago is live"
    );
    // Ten minutes later nobody has written it: remembered, with its age.
    let later = at(5_000 + 600_000);
    let third = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let target = third.target("k", MODEL).await;
    let snap = Store::snapshot(&third, target.scope, later).await.unwrap();
    assert_eq!(snap.limits.requests, Some(600), "{snap:?}");
    let age = snap.remembered.expect("shown remembered");
    assert!(age >= Duration::from_secs(590), "{age:?}");

    // Forgotten by one, for all.
    third.forget("k", later).await;
    third.flush().await;
    let snap = Store::snapshot(&replica, replica.target("k", MODEL).await.scope, later)
        .await
        .unwrap();
    assert_eq!(snap.limits.requests, None, "{snap:?}");
}
