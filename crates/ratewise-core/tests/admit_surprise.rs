//! A 429 is evidence: on a dimension the model believed had room, it
//! proves the provider's level was below the request's charge there. The
//! controller lowers the credit at once, keeps a learned margin (grown per
//! surprise, decayed with calm, bounded by the bucket), and shares it in
//! the key's record. Learning off, none of that happens.

mod common;

use ratewise_core::admit::store_kit::StoreHooks;
use ratewise_core::admit::Observed;

use common::now_at;
use ratewise_core::admit::{
    Admission, AdmitRequest, Burst, Config, Controller, Limits, RampConfig, Reservation, Target,
    WaitReason,
};
use ratewise_core::classify::Classification;
use ratewise_core::{Decision, Now, Provider};
use std::time::Duration;

const OUTPUT_429: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 12,000 output tokens per minute."}}"#;
const ANY_429: &str =
    r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited."}}"#;

fn respond(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> (Classification, Decision) {
    common::respond(Provider::Anthropic, status, headers, body, now)
}

/// 600 RPM, 12 000 OTPM held in a 10 s bucket (2 000 tokens), at full rate.
fn controller(learn: bool) -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(600),
            output_tokens: Some(12_000),
            ..Limits::NONE
        };
        config.burst =
            Burst::uniform(Duration::from_secs(10)).with_known_credit(Duration::from_secs(10));
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.learn_margins = learn;
        config.seed = Some(3);
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    (c, target)
}

fn ask(max_tokens: u64, target: Target) -> AdmitRequest {
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(max_tokens);
    req.input_estimate = Some(10);
    req
}

/// The 429 `body` for `r`, observed and its reservation released, at `t`.
fn rate_limited(c: &mut Controller, r: Reservation, body: &str, t: Now) -> Decision {
    let (cl, d) = respond(429, &[("retry-after", "1")], body, t);
    let d = c.observe(
        &Observed::new(r.sent().scope(), cl.clone(), d).of_sent(r.sent()),
        t,
    );
    c.release(r, t);
    d
}

fn output(c: &mut Controller, target: Target, t: Now) -> (i64, u64, u64) {
    let s = c.snapshot(target.scope, t).unwrap();
    (s.credits[2].unwrap(), s.margins[2].unwrap(), s.surprises[2])
}

#[test]
fn a_429_where_the_model_had_room_lowers_the_credit_and_keeps_a_margin() {
    let (mut c, target) = controller(true);
    let t = now_at(0);
    let r = c
        .admit(&ask(1024, target), t)
        .go()
        .expect("a full bucket admits");
    let d = rate_limited(&mut c, r, OUTPUT_429, t);
    assert!(
        d.notes
            .iter()
            .any(|n| n.to_string().contains("margin learned")),
        "{:?}",
        d.notes
    );
    // The model held 2 000; the provider had less than 1 024: the credit
    // goes to 1 023 (the evidence). It was over by 977 tokens, but one 429
    // teaches at most an eighth of the bucket (250): it may be a one-off.
    assert_eq!(output(&mut c, target, t), (1_023, 250, 1));
    // The next 1 024 waits for the hint (1 s and the jitter); by 1.6 s the
    // credit holds 1 023 + 320 ≥ 1 024 + 250, so it goes. (Taught all 977,
    // it would wait until 4.9 s: one request at a time on this bucket.)
    assert!(matches!(
        c.admit(&ask(1024, target), t),
        Admission::Wait {
            reason: WaitReason::Paused,
            ..
        }
    ));
    assert!(c.admit(&ask(1024, target), now_at(1_600)).go().is_some());
}

#[test]
fn a_second_surprise_before_the_margin_decays_doubles_it() {
    let (mut c, target) = controller(true);
    let r = c.admit(&ask(1024, target), now_at(0)).go().unwrap();
    rate_limited(&mut c, r, OUTPUT_429, now_at(0));
    assert_eq!(output(&mut c, target, now_at(0)).1, 250);
    // Refilled well past request and margin: the model has room again,
    // and the provider still says no.
    let t = now_at(6_000);
    let r = c.admit(&ask(1024, target), t).go().expect("room again");
    rate_limited(&mut c, r, OUTPUT_429, t);
    let (_, margin, surprises) = output(&mut c, target, t);
    assert_eq!(surprises, 2);
    // 250 decayed a little over 6 s of calm, then doubled.
    assert!((490..=500).contains(&margin), "{margin}");
}

#[test]
fn learning_off_takes_only_the_hint() {
    let (mut c, target) = controller(false);
    let t = now_at(0);
    let r = c.admit(&ask(1024, target), t).go().unwrap();
    let d = rate_limited(&mut c, r, OUTPUT_429, t);
    assert!(!d.notes.iter().any(|n| n.to_string().contains("margin")));
    let (_, margin, surprises) = output(&mut c, target, t);
    assert_eq!((margin, surprises), (0, 0));
}

#[test]
fn the_margin_grows_per_surprise_is_bounded_and_decays_with_calm() {
    let (mut c, target) = controller(true);
    let mut t = 0;
    let mut margins = Vec::new();
    for _ in 0..8 {
        // Wait until the bucket admits, then be told it was wrong again.
        let r = loop {
            match c.admit(&ask(200, target), now_at(t)) {
                Admission::Go(r) => break r,
                Admission::Wait { until, .. } => t = until.since_origin().as_millis() as u64 + 1,
                other => panic!("{other:?}"),
            }
        };
        rate_limited(&mut c, r, OUTPUT_429, now_at(t));
        margins.push(output(&mut c, target, now_at(t)).1);
    }
    assert!(margins.windows(2).all(|w| w[1] >= w[0]), "{margins:?}");
    // Bounded by half the bucket's capacity.
    assert_eq!(*margins.last().unwrap(), 1_000, "{margins:?}");
    // A half-life of calm (20 refills of a 10 s bucket, 200 s) halves it.
    let calm = now_at(t + 200_000);
    assert_eq!(output(&mut c, target, calm).1, 500);
    let gone = now_at(t + 200_000 * 12);
    assert_eq!(output(&mut c, target, gone).1, 0);
}

#[test]
fn a_429_that_names_no_dimension_teaches_the_most_loaded_bucket() {
    let (mut c, target) = controller(true);
    let t = now_at(0);
    // 1 request of 600 a minute (a bucket of 100) vs 1 800 of 2 000
    // output tokens: the output bucket was the loaded one.
    let r = c.admit(&ask(1_800, target), t).go().unwrap();
    rate_limited(&mut c, r, ANY_429, t);
    let s = c.snapshot(target.scope, t).unwrap();
    assert_eq!(s.surprises, [0, 0, 1, 0]);
    assert_eq!(s.margins[0], Some(0));
}

#[test]
fn a_429_the_model_expected_is_no_surprise() {
    let (mut c, target) = controller(true);
    let t = now_at(0);
    // The model's credit already held less than this request: one larger
    // than the whole bucket goes when the bucket is full, and a 429 then
    // says nothing the model did not know.
    let r = c.admit(&ask(5_000, target), t).go().unwrap();
    rate_limited(&mut c, r, OUTPUT_429, t);
    assert_eq!(output(&mut c, target, t).2, 0);
}

#[test]
fn the_margin_travels_in_the_key_record_and_old_records_still_read() {
    let (mut c, target) = controller(true);
    let t = now_at(0);
    let r = c.admit(&ask(1024, target), t).go().unwrap();
    rate_limited(&mut c, r, OUTPUT_429, t);
    let rec = c.export_key("k", t).unwrap();
    assert_eq!(rec.format(), ratewise_core::admit::store_kit::RECORD_FORMAT);
    let json = serde_json::to_value(&rec).unwrap();
    // Another process (another replica) reads the record: same margin.
    let (mut other, other_target) = controller(true);
    other.import_key(&serde_json::from_value(json.clone()).unwrap(), t);
    assert_eq!(output(&mut other, other_target, t).1, 250);
    // A record written before margins existed (no format, no margin
    // fields) still reads, with no margin.
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("format");
    for scope in old["scopes"].as_array_mut().unwrap() {
        for b in scope["buckets"].as_array_mut().unwrap() {
            if let Some(b) = b.as_object_mut() {
                b.remove("margin");
                b.remove("margin_at");
            }
        }
    }
    let old: ratewise_core::admit::store_kit::KeyRecord = serde_json::from_value(old).unwrap();
    assert_eq!(old.format(), 1);
    let (mut reader, reader_target) = controller(true);
    reader.import_key(&old, t);
    assert_eq!(output(&mut reader, reader_target, t).1, 0);
    // A record from a newer version, with fields this one does not know,
    // reads too: they are ignored.
    let mut newer = json;
    newer["format"] = 9.into();
    newer["from_the_future"] = "x".into();
    let newer: ratewise_core::admit::store_kit::KeyRecord = serde_json::from_value(newer).unwrap();
    let (mut reader, reader_target) = controller(true);
    reader.import_key(&newer, t);
    assert_eq!(output(&mut reader, reader_target, t).1, 250);
}

#[test]
fn a_remaining_of_u64_max_is_read_without_a_panic() {
    // A header may say anything; the largest number it can say is still
    // a range to read, for every provider's rounding.
    for provider in [Provider::Anthropic, Provider::Openai, Provider::Generic] {
        let (mut c, target) = controller(true);
        let t = now_at(0);
        let r = c.admit(&ask(100, target), t).go().unwrap();
        let max = u64::MAX.to_string();
        let (cl, d) = (
            common::classify(
                provider,
                200,
                &[
                    ("anthropic-ratelimit-output-tokens-remaining", max.as_str()),
                    ("x-ratelimit-remaining-tokens", max.as_str()),
                    ("x-ratelimit-remaining-requests", max.as_str()),
                ],
                r#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":5}}"#,
                t,
            ),
            Decision::new(ratewise_core::Action::Done),
        );
        c.observe(
            &Observed::new(r.sent().scope(), cl.clone(), d).of_sent(r.sent()),
            t,
        );
        c.release(r, t);
        assert!(c.ledger().is_clean());
    }
}
