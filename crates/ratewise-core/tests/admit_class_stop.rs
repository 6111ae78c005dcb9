//! A quota the key's tier does not have for one model (Gemini's "limit:
//! 0"): that model's class stops, so nothing more is sent for it, while
//! the key's other models go on; a resume lifts it.

mod common;

use common::{now_at, respond};
use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, Observed, RampConfig,
};
use ratewise_core::{ActionKind, Cause, Provider, Scope};

const LIMIT_ZERO: &str = r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\nPlease retry in 25.465784708s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"25s"}]}}"#;

#[test]
fn a_model_without_quota_stops_its_class_not_the_key() {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits::per_minute().requests(1_000);
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.seed = Some(1);
        config
    });
    let pro = c.target("k", "gemini-2.5-pro");
    let flash = c.target("k", "gemini-2.5-flash");
    let t = now_at(0);
    let r = c
        .admit(&AdmitRequest::new(pro), t)
        .go()
        .expect("first goes");
    let (cl, d) = respond(Provider::Gemini, 429, &[], LIMIT_ZERO, t);
    assert_eq!((cl.cause, cl.scope), (Cause::Permission, Scope::Bucket));
    assert_eq!(d.action.kind(), ActionKind::StopQueue);
    let d = c.observe(&Observed::new(r.scope(), cl, d).of_sent(r.sent()), t);
    assert_eq!(d.action.kind(), ActionKind::StopQueue);
    c.release(r, t);
    // Nothing more for this model, at once and much later.
    for ms in [1, 60_000, 3_600_000] {
        match c.admit(&AdmitRequest::new(pro), now_at(ms)) {
            Admission::Stopped { cause, until } => {
                assert_eq!((cause, until), (Cause::Permission, None));
            }
            other => panic!("{other:?}"),
        }
    }
    // The key's other model goes on.
    assert!(c.admit(&AdmitRequest::new(flash), now_at(2)).go().is_some());
    // A resume (the operator upgraded the tier) lifts it.
    c.resume("k", now_at(5));
    assert!(c.admit(&AdmitRequest::new(pro), now_at(10)).go().is_some());
}
