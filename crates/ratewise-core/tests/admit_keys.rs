//! Limits per key, per (key, class), and keys grouped under one
//! organisation's limits.

use ratewise_core::admit::{Config, Controller, KeyLimits, Limits};
use ratewise_core::{Cause, Instant, Now};
use std::time::SystemTime;

fn now() -> Now {
    Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH)
}

fn rpm(n: u64) -> Limits {
    Limits {
        requests: Some(n),
        ..Limits::NONE
    }
}

#[test]
fn the_most_specific_limits_win() {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = rpm(50);
        config.class_limits = vec![("claude-haiku".into(), rpm(100))];
        config.key_limits = vec![
            KeyLimits {
                key: "tier4".into(),
                class: None,
                limits: rpm(4000),
            },
            KeyLimits {
                key: "tier4".into(),
                class: Some("claude-haiku".into()),
                limits: rpm(8000),
            },
        ];
        config.seed = Some(1);
        config
    });
    let limits = |c: &mut Controller, key: &str, class: &str| {
        let s = c.scope_of(key, class);
        c.snapshot(s, now()).unwrap().limits.requests
    };
    assert_eq!(limits(&mut c, "tier1", "claude-sonnet"), Some(50));
    assert_eq!(limits(&mut c, "tier1", "claude-haiku"), Some(100));
    assert_eq!(limits(&mut c, "tier4", "claude-sonnet"), Some(4000));
    assert_eq!(limits(&mut c, "tier4", "claude-haiku"), Some(8000));
}

#[test]
fn grouped_keys_share_buckets_and_stops() {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.key_groups = vec![
            ("key-a".into(), "org".into()),
            ("key-b".into(), "org".into()),
        ];
        config.key_limits = vec![KeyLimits {
            key: "org".into(),
            class: None,
            limits: rpm(120),
        }];
        config.seed = Some(1);
        config
    });
    let a = c.target("key-a", "claude-sonnet-4-5");
    let b = c.target("key-b", "claude-sonnet-4-5");
    let other = c.target("key-c", "claude-sonnet-4-5");
    assert_eq!(a.scope, b.scope, "one organisation, one bucket set");
    assert_ne!(a.scope, other.scope);
    assert_eq!(c.key_of(a.scope), Some("org"));
    assert_eq!(
        c.snapshot(a.scope, now()).unwrap().limits.requests,
        Some(120)
    );
    // A spend cap seen through one key stops the other.
    c.stop(a.scope, Cause::SpendCap, None, now());
    assert!(c.snapshot(b.scope, now()).unwrap().stopped.is_some());
    assert!(c.snapshot(other.scope, now()).unwrap().stopped.is_none());
    // Resumed through either key's name.
    c.resume("key-b", now());
    assert!(c.snapshot(a.scope, now()).unwrap().stopped.is_none());
}
