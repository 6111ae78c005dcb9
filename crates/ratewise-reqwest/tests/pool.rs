//! `RatewiseMiddleware` over a pooled layer (issue #40): an OpenAI chat
//! call goes out unchanged to an OpenAI member, or to an Azure OpenAI
//! member's deployment path with `api-key` — the OpenAI ↔ Azure route out
//! of the box — and an overloaded member hands its calls to the other.

mod common;

use common::*;
use ratewise_core::ActionKind;
use ratewise_mock::{Fault, FaultRule, MockConfig};
use ratewise_reqwest::Outcome;
use ratewise_tower::pool::{HttpRoute, Pool, PoolMember};
use ratewise_tower::RetryLayer;

const OPENAI_MEMBER_KEY: &str = "sk-openai-MEMBER-SECRET";
const AZURE_MEMBER_KEY: &str = "azure-MEMBER-SECRET";

fn azure_mock() -> MockConfig {
    MockConfig {
        flavor: ratewise_mock::Flavor::Azure,
        ..roomy()
    }
}

fn pooled(openai: &str, azure: &str) -> RetryLayer {
    let pool = Pool::new()
        .member(PoolMember::new(
            HttpRoute::openai(openai, OPENAI_MEMBER_KEY).unwrap(),
        ))
        .member(
            PoolMember::new(HttpRoute::azure(azure, AZURE_MEMBER_KEY, "2024-10-21").unwrap())
                .model("gpt-4o-mini", "mini-prod"),
        );
    RetryLayer::builder()
        .policy(fast_policy())
        .seed(7)
        .pool(pool)
        .build()
        .expect("layer")
}

#[tokio::test]
async fn an_openai_call_runs_on_either_member_and_falls_back_from_an_overloaded_one() {
    let openai = mock(roomy()).await;
    let azure = mock(azure_mock()).await;
    let layer = pooled(&openai.base_url(), &azure.base_url());
    let wire = Wire::default();
    let client = client(&layer, &wire);
    // Both members free: the calls spread over both.
    for i in 0..10 {
        let r = client
            .post("http://pool.invalid/v1/chat/completions")
            .bearer_auth("sk-caller-own-key")
            .header("content-type", "application/json")
            .with_extension(ratewise_tower::JobId::new(format!("p{i}")))
            .body(serde_json::to_vec(&openai_body(16, false)).unwrap())
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 200);
        let outcome = r.extensions().get::<Outcome>().unwrap().clone();
        assert_eq!(outcome.action(), ActionKind::Done);
        assert!(outcome.attempts()[0].member.is_some());
        let _ = r.text().await;
    }
    let (o, a) = (openai.records().len(), azure.records().len());
    assert_eq!(o + a, 10);
    assert!(o > 0 && a > 0, "openai {o} azure {a}");
    // The Azure member got its deployment (the mapped model) as the model.
    assert!(azure.records().iter().all(|r| r.model == "mini-prod"));
    assert!(openai.records().iter().all(|r| r.model == "gpt-4o-mini"));

    // The OpenAI member overloaded: every call finishes on Azure.
    openai.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let before = (openai.records().len(), azure.records().len());
    for i in 10..30 {
        let r = client
            .post("http://pool.invalid/v1/chat/completions")
            .bearer_auth("sk-caller-own-key")
            .header("content-type", "application/json")
            .with_extension(ratewise_tower::JobId::new(format!("p{i}")))
            .body(serde_json::to_vec(&openai_body(16, false)).unwrap())
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 200);
        let _ = r.text().await;
    }
    let sends = openai.records().len() - before.0 + azure.records().len() - before.1;
    assert_eq!(azure.records().len() - before.1, 20);
    assert!(sends <= 22, "{sends} sends for 20 calls");
}
