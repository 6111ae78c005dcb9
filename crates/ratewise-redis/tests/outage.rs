//! Redis going away and coming back: no panic, no lost job; each process
//! paces at its share meanwhile; stops survive.

use ratewise_core::admit::{self, Admission, AdmitRequest, Limits, Store};
use ratewise_core::{Cause, Instant, Now, Provider};
mod common;

use common::at;
use ratewise_redis::testing::Server;
use ratewise_redis::{Clock, Config, RedisStore};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;

const MODEL: &str = "claude-sonnet-4-5";

fn config(prefix: &str, rpm: u64) -> Config {
    let mut c = Config::default();
    c.admission = {
        let mut a = admit::Config::default();
        a.limits = Limits {
            requests: Some(rpm),
            ..Limits::NONE
        };
        a.ramp.warm_start = true;
        a.seed = Some(9);
        a
    };
    c.prefix = prefix.to_owned();
    c.timeout = Duration::from_millis(200);
    c.reconnect_every = Duration::from_millis(200);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn redis_killed_and_restarted_mid_run_loses_no_job() {
    let mut server = Server::start();
    let port = server.port;
    let cfg = config("outage", 60_000);
    let calls = Arc::new(AtomicU32::new(0));
    let mut stores = Vec::new();
    let mut layers = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(&server.url(), cfg.clone())
            .await
            .unwrap();
        layers.push(
            ratewise_tower::RetryLayer::builder()
                .provider(Provider::Anthropic)
                .store(Arc::new(store.clone()))
                .build()
                .unwrap(),
        );
        stores.push(store);
    }
    let mut jobs = Vec::new();
    for i in 0..120u64 {
        let svc = layers[(i % 2) as usize]
            .layer(common::provider(calls.clone(), Duration::from_millis(20)));
        jobs.push(tokio::spawn(async move {
            // Spread over about 1.2 s.
            tokio::time::sleep(Duration::from_millis(i * 10)).await;
            common::job(svc, None).await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = stores[0].health();
    let restarted = Server::start_on(port);
    for j in jobs {
        j.await.expect("no job panicked or was lost");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 120, "every job sent once");
    assert!(during.degraded, "the outage was noticed: {during:?}");
    assert!(during.errors > 0);
    // Every job's reservation ended, once: the ends queued from the
    // jobs' last steps applied first.
    for s in &stores {
        s.flush().await;
        let l = s.local().ledger();
        assert!(l.is_clean(), "{l:?}");
        // Each of its 60 jobs charged once (a take disowned during the
        // outage charged by its late settle, not twice, not never).
        assert_eq!(l.charged.requests, 60, "{l:?}");
    }
    // Back on Redis: the next operations go there again.
    for s in &stores {
        let t = s.target("k", MODEL).await;
        let n = Now::new(
            Instant::from_millis(10_000_000),
            std::time::SystemTime::now(),
        );
        back_on_redis(s, t, n).await;
        let _ = s.admit(AdmitRequest::new(t), n).await;
        let h = s.health();
        assert!(!h.degraded && h.writes > 0, "back on Redis: {h:?}");
    }
    drop(restarted);
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn stops_survive_the_outage_and_one_learned_during_it_is_written_back() {
    let mut server = Server::start();
    let port = server.port;
    let mut cfg = config("stops", 600);
    cfg.clock = Clock::Caller;
    let a = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let b = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let t = |ms| Now::new(Instant::from_millis(ms), std::time::SystemTime::now());
    // Both know key k1; a stops it before the outage.
    let ta = a.target("k1", MODEL).await;
    let tb = b.target("k1", MODEL).await;
    a.stop("k1", Cause::SpendCap, None, t(1_000)).await;
    assert!(matches!(
        b.admit(AdmitRequest::new(tb), t(1_100)).await,
        Admission::Stopped { .. }
    ));
    server.kill();
    // During the outage: the stop stays in force for both.
    for (s, target) in [(&a, ta), (&b, tb)] {
        assert!(matches!(
            s.admit(AdmitRequest::new(target), t(2_000)).await,
            Admission::Stopped { .. }
        ));
        assert!(s.health().degraded);
    }
    // b learns a stop of k2 meanwhile.
    b.stop("k2", Cause::UserLimit, None, t(2_100)).await;
    // Redis comes back empty.
    let _restarted = Server::start_on(port);
    // Each finds Redis again within a reconnection interval or two.
    back_on_redis(&b, tb, t(3_000)).await;
    back_on_redis(&a, ta, t(3_000)).await;
    // b writes its view back with its next operations on each key.
    let b2 = b.target("k2", MODEL).await;
    let _ = b.admit(AdmitRequest::new(b2), t(3_000)).await;
    let _ = b.admit(AdmitRequest::new(tb), t(3_000)).await;
    // a, which never saw k2, finds it stopped; k1 is still stopped for a.
    let a2 = a.target("k2", MODEL).await;
    match a.admit(AdmitRequest::new(a2), t(3_100)).await {
        Admission::Stopped { cause, .. } => assert_eq!(cause, Cause::UserLimit),
        other => panic!("{other:?} {:?}", a.health()),
    }
    assert!(matches!(
        a.admit(AdmitRequest::new(ta), t(3_200)).await,
        Admission::Stopped { .. }
    ));
}

/// Asks (a read, which takes nothing) until the store is back on Redis.
async fn back_on_redis(s: &RedisStore, target: ratewise_core::admit::Target, now: Now) {
    for _ in 0..100 {
        let _ = s.snapshot(target.scope, now).await;
        if !s.health().degraded {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not back on Redis: {:?}", s.health());
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn cut_off_a_process_paces_at_its_share() {
    let mut server = Server::start();
    // 120 per minute: 2 per second. Two processes used the key.
    let mut cfg = config("share", 120);
    cfg.clock = Clock::Caller;
    cfg.recheck = None;
    let a = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let b = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let t = |ms| Now::new(Instant::from_millis(ms), std::time::SystemTime::now());
    let ta = a.target("k", MODEL).await;
    let tb = b.target("k", MODEL).await;
    let _ = b.admit(AdmitRequest::new(tb), t(0)).await;
    let _ = a.admit(AdmitRequest::new(ta), t(0)).await;
    assert_eq!(a.health().peers, 2);
    server.kill();
    // Over a minute of steady asking, a admits about half the limit.
    let mut admitted = 0;
    let mut ms = 1_000;
    while ms < 61_000 {
        if let Admission::Go(r) = a.admit(AdmitRequest::new(ta), t(ms)).await {
            admitted += 1;
            drop(r);
        }
        ms += 50;
    }
    let h = a.health();
    assert!(h.degraded && h.share_permille == 500, "{h:?}");
    assert!(
        (55..=70).contains(&admitted),
        "half of 120 a minute (plus the half burst): {admitted}"
    );
}

#[tokio::test]
async fn an_unreachable_redis_at_start_is_an_error_to_connect_and_local_pacing_to_new() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}/");
    let cfg = config("down", 60);
    assert!(RedisStore::connect(&url, cfg.clone()).await.is_err());
    let s = RedisStore::new(&url, cfg).unwrap();
    let target = s.target("k", MODEL).await;
    let now = Now::new(Instant::from_millis(0), std::time::SystemTime::now());
    assert!(matches!(
        s.admit(AdmitRequest::new(target), now).await,
        Admission::Go(_)
    ));
    assert!(s.health().degraded);
}

#[tokio::test]
async fn a_redis_that_never_answers_holds_up_one_operation_not_every_one() {
    // Accepts connections and never says a word (a hung server, a
    // firewall that drops packets).
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let mut cfg = config("silent", 600_000);
    cfg.timeout = Duration::from_secs(3);
    cfg.reconnect_every = Duration::from_millis(1);
    let s = RedisStore::new(&format!("redis://127.0.0.1:{port}/"), cfg).unwrap();
    let target = s.target("k", MODEL).await;
    let now = Now::new(Instant::from_millis(0), std::time::SystemTime::now());
    // The first operation waits out the connection timeout and finds
    // Redis gone.
    assert!(matches!(
        s.admit(AdmitRequest::new(target), now).await,
        Admission::Go(_)
    ));
    assert!(s.health().degraded);
    let errors = s.health().errors;
    // The next ones are paced here at once while a reconnection (which
    // will also wait out its timeout) runs in the background.
    for _ in 0..50 {
        assert!(matches!(
            s.admit(AdmitRequest::new(target), now).await,
            Admission::Go(_)
        ));
    }
    assert_eq!(
        s.health().errors,
        errors,
        "the reconnection under way has not timed out yet: no operation waited for it"
    );
}

/// Two processes, `a` behind a connection the test can cut, `b` direct;
/// `rpm` requests a minute, times injected.
async fn partitioned(
    rpm: u64,
) -> (
    Server,
    ratewise_redis::testing::Cuttable,
    RedisStore,
    RedisStore,
) {
    let server = Server::start();
    let link = ratewise_redis::testing::Cuttable::start(server.port).await;
    let mut cfg = config(&ratewise_redis::testing::prefix(), rpm);
    cfg.clock = Clock::Caller;
    cfg.recheck = None;
    cfg.reconnect_every = Duration::from_millis(20);
    let a = RedisStore::connect(&link.url(), cfg.clone()).await.unwrap();
    let b = RedisStore::connect(&server.url(), cfg).await.unwrap();
    (server, link, a, b)
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_stop_lifted_by_another_while_one_was_cut_off_stays_lifted() {
    let (_server, link, a, b) = partitioned(600).await;
    let (ta, tb) = (a.target("k", MODEL).await, b.target("k", MODEL).await);
    a.stop("k", Cause::UserLimit, None, at(1_000)).await;
    link.cut();
    // a, cut off, still holds the stop it knew.
    assert!(matches!(
        a.admit(AdmitRequest::new(ta), at(1_200)).await,
        Admission::Stopped { .. }
    ));
    assert!(a.health().degraded);
    // Meanwhile a human resumes the key through b.
    b.resume("k", at(1_300)).await;
    assert!(matches!(
        b.admit(AdmitRequest::new(tb), at(1_400)).await,
        Admission::Go(_)
    ));
    link.restore();
    back_on_redis(&a, ta, at(2_000)).await;
    // a takes the resume, and does not stop the key again for b.
    assert!(matches!(
        a.admit(AdmitRequest::new(ta), at(3_000)).await,
        Admission::Go(_)
    ));
    assert!(matches!(
        b.admit(AdmitRequest::new(tb), at(3_100)).await,
        Admission::Go(_)
    ));
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_stop_learned_while_cut_off_reaches_the_others_on_return() {
    let (_server, link, a, b) = partitioned(600).await;
    let (ta, tb) = (a.target("k", MODEL).await, b.target("k", MODEL).await);
    let _ = a.admit(AdmitRequest::new(ta), at(500)).await;
    link.cut();
    let _ = a.snapshot(ta.scope, at(900)).await;
    assert!(a.health().degraded);
    // a meets a spend cap while cut off.
    a.stop("k", Cause::SpendCap, None, at(1_000)).await;
    // b writes meanwhile: a's return reads a newer record.
    let _ = b.admit(AdmitRequest::new(tb), at(1_100)).await;
    link.restore();
    // Back through reads only: the stop must not be lost to them.
    back_on_redis(&a, ta, at(2_000)).await;
    let _ = a.snapshot(ta.scope, at(2_100)).await;
    match a.admit(AdmitRequest::new(ta), at(2_200)).await {
        Admission::Stopped { cause, .. } => assert_eq!(cause, Cause::SpendCap),
        other => panic!("a forgot its own spend cap: {other:?}"),
    }
    match b.admit(AdmitRequest::new(tb), at(2_300)).await {
        Admission::Stopped { cause, .. } => assert_eq!(cause, Cause::SpendCap),
        other => panic!("b never learned it: {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_take_made_while_cut_off_is_not_given_back_to_the_others() {
    let (_server, link, a, b) = partitioned(6_000).await;
    let (ta, tb) = (a.target("k", MODEL).await, b.target("k", MODEL).await);
    let _ = a.snapshot(ta.scope, at(1_000)).await;
    // b takes everything there is at this instant.
    let mut held = Vec::new();
    while let Admission::Go(r) = b.admit(AdmitRequest::new(tb), at(1_000)).await {
        held.push(r);
    }
    assert!(!held.is_empty());
    link.cut();
    // a, cut off, paces on its own share: it takes one.
    let mine = loop {
        match a.admit(AdmitRequest::new(ta), at(1_000)).await {
            Admission::Go(r) => break r,
            Admission::Wait { .. } => {}
            other => panic!("{other:?}"),
        }
    };
    assert!(a.health().degraded);
    link.restore();
    back_on_redis(&a, ta, at(1_000)).await;
    // Its release gives back nothing the shared buckets ever held.
    a.update(
        ratewise_core::admit::Update::ending(ratewise_core::admit::End::Release {
            reservation: mine,
        }),
        at(1_000),
    )
    .await;
    assert!(
        matches!(
            b.admit(AdmitRequest::new(tb), at(1_000)).await,
            Admission::Wait { .. }
        ),
        "the release of a take the record never held credited the others"
    );
    // The release was the take's one end (disowned, not ended twice).
    let l = a.local().ledger();
    assert!(l.is_clean(), "{l:?}");
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_redis_that_refuses_the_connection_counts_as_unavailable() {
    let server = Server::start();
    // A password the server does not have: every connection is refused
    // by Redis itself, not by the network.
    let url = format!("redis://:wrong-password@127.0.0.1:{}/", server.port);
    let s = RedisStore::new(&url, config("auth", 600)).unwrap();
    let target = s.target("k", MODEL).await;
    assert!(matches!(
        s.admit(AdmitRequest::new(target), at(1_000)).await,
        Admission::Go(_)
    ));
    let h = s.health();
    assert!(
        h.degraded,
        "paced on its share, not on the whole limit: {h:?}"
    );
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_take_from_before_redis_lost_its_data_is_not_given_to_the_new_record() {
    let mut server = Server::start();
    let port = server.port;
    let mut cfg = config(&ratewise_redis::testing::prefix(), 600);
    cfg.clock = Clock::Caller;
    cfg.recheck = None;
    let a = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let ta = a.target("k", MODEL).await;
    let mine = match a.admit(AdmitRequest::new(ta), at(1_000)).await {
        Admission::Go(r) => r,
        other => panic!("{other:?}"),
    };
    // Redis restarts without its data; a process that never saw a's take
    // writes a new record and empties the bucket.
    server.kill();
    let server = Server::start_on(port);
    let c = RedisStore::connect(&server.url(), cfg).await.unwrap();
    let tc = c.target("k", MODEL).await;
    while let Admission::Go(r) = c.admit(AdmitRequest::new(tc), at(1_000)).await {
        drop(r);
    }
    // a finds Redis again (its connection died with the old server), and
    // its release of the old take lands on a record that never held it.
    back_on_redis(&a, ta, at(1_000)).await;
    a.update(
        ratewise_core::admit::Update::ending(ratewise_core::admit::End::Release {
            reservation: mine,
        }),
        at(1_000),
    )
    .await;
    assert!(
        matches!(
            c.admit(AdmitRequest::new(tc), at(1_000)).await,
            Admission::Wait { .. }
        ),
        "a take from before the loss was credited to the new record"
    );
    // Disowned, then released by its owner: one end, not a refused second.
    let l = a.local().ledger();
    assert!(l.is_clean(), "{l:?}");
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_stale_copy_never_overwrites_a_record_made_after_a_loss() {
    let server = Server::start();
    let mut cfg = config(&ratewise_redis::testing::prefix(), 600);
    cfg.clock = Clock::Caller;
    let a = RedisStore::connect(&server.url(), cfg.clone())
        .await
        .unwrap();
    let ta = a.target("k", MODEL).await;
    assert!(matches!(
        a.admit(AdmitRequest::new(ta), at(1_000)).await,
        Admission::Go(_)
    ));
    // The record is lost while a's connection lives on (FLUSHALL, an
    // eviction); another process writes a new one at the same version
    // number, with a stop in it.
    let mut conn = common::conn(&server.url()).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let c = RedisStore::connect(&server.url(), cfg).await.unwrap();
    c.stop("k", Cause::SpendCap, None, at(1_100)).await;
    // a's next write names the version it read, which the new record has
    // too: it must not overwrite it.
    assert!(matches!(
        a.admit(AdmitRequest::new(ta), at(1_200)).await,
        Admission::Stopped { .. }
    ));
    let tc = c.target("k", MODEL).await;
    assert!(matches!(
        c.admit(AdmitRequest::new(tc), at(1_300)).await,
        Admission::Stopped { .. }
    ));
}

#[tokio::test]
async fn a_store_whose_redis_was_never_reached_is_degraded_at_half_before_any_operation() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s =
        RedisStore::unreached(&format!("redis://127.0.0.1:{port}/"), config("never", 60)).unwrap();
    let h = s.health();
    assert!(h.degraded && h.share_permille == 500, "{h:?}");
    // Paced at half of 60 a minute: about 30 in a minute (plus the half
    // burst), none of them waiting for Redis.
    let target = s.target("k", MODEL).await;
    let t = |ms| Now::new(Instant::from_millis(ms), std::time::SystemTime::now());
    let mut admitted = 0;
    let mut ms = 0;
    while ms < 60_000 {
        if let Admission::Go(r) = s.admit(AdmitRequest::new(target), t(ms)).await {
            admitted += 1;
            drop(r);
        }
        ms += 50;
    }
    assert!(
        (25..=40).contains(&admitted),
        "half of 60 a minute: {admitted}"
    );
    assert!(s.health().degraded);
}
