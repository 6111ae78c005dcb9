//! Priorities across processes: each publishes the highest level it has
//! work waiting at on a scope, and sees the others' (never its own); a
//! demand no longer refreshed stops counting by itself.

mod common;

use common::at;
use ratewise_core::admit::{self, Store};
use ratewise_redis::{Clock, Config, RedisStore};
use std::time::Duration;

const MODEL: &str = "claude-sonnet-4-5";

fn config(prefix: &str, fresh: Duration) -> Config {
    let mut c = Config::default();
    c.admission = admit::Config::default();
    c.prefix = prefix.to_owned();
    c.clock = Clock::Caller;
    c.demand_fresh = fresh;
    c
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn each_process_sees_the_others_highest_waiting_level_not_its_own() {
    let (url, _server) = ratewise_redis::testing::redis();
    let cfg = config(&ratewise_redis::testing::prefix(), Duration::from_secs(30));
    let a = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let b = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let c = RedisStore::connect(&url, cfg).await.unwrap();
    let t = at(1_000);
    let (sa, sb, sc) = (
        a.target("k", MODEL).await.scope,
        b.target("k", MODEL).await.scope,
        c.target("k", MODEL).await.scope,
    );
    // Nobody waits yet.
    assert_eq!(
        a.demand(sa, Some(2), t).await,
        None,
        "its own demand is not foreign"
    );
    // b has interactive work waiting (rank 0): a sees it; b sees a's bulk.
    assert_eq!(b.demand(sb, Some(0), t).await, Some(2));
    assert_eq!(a.demand(sa, Some(2), t).await, Some(0));
    // c, waiting at the default level, sees the highest of the others.
    assert_eq!(c.demand(sc, Some(1), t).await, Some(0));
    // b's work is admitted: nothing waits there any more.
    assert_eq!(b.demand(sb, None, t).await, Some(1));
    assert_eq!(a.demand(sa, Some(2), t).await, Some(1));
    // Another model class is another scope: no demand there.
    let other = a.target("k", "claude-haiku-4-5").await.scope;
    assert_eq!(a.demand(other, Some(2), t).await, None);
    // Another key neither.
    let k2 = a.target("k2", MODEL).await.scope;
    assert_eq!(a.demand(k2, Some(2), t).await, None);
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn a_demand_no_longer_refreshed_stops_counting() {
    let (url, _server) = ratewise_redis::testing::redis();
    let cfg = config(
        &ratewise_redis::testing::prefix(),
        Duration::from_millis(300),
    );
    let a = RedisStore::connect(&url, cfg.clone()).await.unwrap();
    let dead = RedisStore::connect(&url, cfg).await.unwrap();
    let t = at(1_000);
    let (sa, sd) = (
        a.target("k", MODEL).await.scope,
        dead.target("k", MODEL).await.scope,
    );
    assert_eq!(dead.demand(sd, Some(0), t).await, None);
    assert_eq!(a.demand(sa, Some(2), t).await, Some(0));
    // The process dies without saying so: its demand lapses on Redis's
    // clock, a little past the bound.
    drop(dead);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(a.demand(sa, Some(2), t).await, None);
}
