//! `RatewiseMiddleware` with the real reqwest and reqwest-middleware
//! against the in-process mock, Anthropic and OpenAI shapes.

mod common;

use common::*;
use http_body_util::Full;
use ratewise_core::ActionKind;
use ratewise_mock::{Fault, FaultRule, MockConfig, RetryAfterFormat};
use ratewise_reqwest::{ratewise_error, Outcome, ACTION_HEADER};
use ratewise_tower::RetryLayer;
use std::sync::Arc;
use std::time::Duration;

fn body(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn action(r: &reqwest::Response) -> &str {
    r.headers()
        .get(ACTION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn anthropic_success_keeps_url_marks_the_action_and_settles_usage() {
    let server = mock(roomy()).await;
    let layer = layer();
    let wire = Wire::default();
    let client = client(&layer, &wire);
    let sent = body(&anthropic_body(64, false));
    let response = anthropic(&client, &server, "a1")
        .body(sent.clone())
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    assert_eq!(action(&response), "done");
    assert_eq!(
        response.url().as_str(),
        format!("{}/v1/messages", server.base_url())
    );
    let outcome = response
        .extensions()
        .get::<Outcome>()
        .expect("outcome")
        .clone();
    assert_eq!(outcome.action(), ActionKind::Done);
    assert_eq!(outcome.attempts().len(), 1);
    let text = response.bytes().await.expect("body");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("json");
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(sends(&server, "a1"), 1);
    assert_eq!(wire.bodies(), vec![bytes::Bytes::from(sent)]);
    let ledger = clean(&layer).await;
    assert!(
        ledger.charged.output > 0,
        "usage settled from the answer: {ledger:?}"
    );
}

#[tokio::test]
async fn openai_sse_usage_settles_when_the_stream_is_read() {
    let server = mock(roomy()).await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let mut v = openai_body(64, true);
    v["stream_options"] = serde_json::json!({"include_usage": true});
    let response = openai(&client, &server, "o1")
        .body(body(&v))
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    assert_eq!(action(&response), "done");
    let text = String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap();
    assert!(text.contains("[DONE]"), "{text}");
    let ledger = clean(&layer).await;
    assert!(ledger.charged.output > 0, "{ledger:?}");
    assert_eq!(sends(&server, "o1"), 1);
}

#[tokio::test]
async fn an_openai_stream_without_usage_still_settles() {
    // No `stream_options.include_usage`: the stream carries no usage, so
    // the reservation ends as a cut stream's does.
    let server = mock(roomy()).await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let response = openai(&client, &server, "o2")
        .body(body(&openai_body(64, true)))
        .send()
        .await
        .expect("ok");
    assert_eq!(action(&response), "done");
    let text = String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap();
    assert!(text.contains("[DONE]"), "{text}");
    clean(&layer).await;
}

#[tokio::test]
async fn retries_send_the_same_bytes_exactly_as_often_as_decided() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1, 2])],
        ..roomy()
    })
    .await;
    let layer = layer();
    let wire = Wire::default();
    let client = client(&layer, &wire);
    let sent = body(&anthropic_body(64, false));
    let response = anthropic(&client, &server, "r1")
        .body(sent.clone())
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    let outcome = response.extensions().get::<Outcome>().unwrap().clone();
    assert_eq!(outcome.attempts().len(), 3);
    drop(response);
    assert_eq!(sends(&server, "r1"), 3);
    let bodies = wire.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies.iter().all(|b| b[..] == sent[..]),
        "byte-identical replays"
    );
    clean(&layer).await;
}

#[tokio::test]
async fn the_last_error_answer_comes_back_as_the_providers_answer() {
    // Overloaded three times: the policy's three attempts are spent.
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::Overloaded)],
        ..roomy()
    })
    .await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let response = anthropic(&client, &server, "g1")
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 529);
    assert_eq!(action(&response), "give_up");
    assert_eq!(
        response.url().as_str(),
        format!("{}/v1/messages", server.base_url())
    );
    let v: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    assert_eq!(sends(&server, "g1"), 3);
    clean(&layer).await;
}

async fn retry_after_waits(format: RetryAfterFormat, secs: u64) -> Duration {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::RetryAfter { format, secs }, [1])],
        ..roomy()
    })
    .await;
    let clock = ManualClock::new();
    let layer = RetryLayer::builder()
        .policy(fast_policy())
        .seed(7)
        .clock(clock.clone())
        .build()
        .unwrap();
    let client = client(&layer, &Wire::default());
    let response = anthropic(&client, &server, "ra")
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    drop(response.bytes().await);
    assert_eq!(sends(&server, "ra"), 2);
    clock.elapsed()
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured_on_the_layers_clock() {
    let waited = retry_after_waits(RetryAfterFormat::Seconds, 5).await;
    assert!(waited >= Duration::from_secs(5), "{waited:?}");
}

#[tokio::test]
async fn retry_after_as_a_date_is_honoured_on_the_layers_clock() {
    // An HTTP-date has whole seconds: 5 s from now reads as more than 4.
    let waited = retry_after_waits(RetryAfterFormat::HttpDate, 5).await;
    assert!(waited >= Duration::from_secs(4), "{waited:?}");
}

#[tokio::test]
async fn a_spend_cap_stops_the_key_with_no_further_send() {
    let server = mock(roomy()).await;
    server.set_spend_cap(Some(0.0));
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let response = openai(&client, &server, "s1")
        .body(body(&openai_body(64, false)))
        .send()
        .await
        .expect("the provider's answer");
    assert_eq!(response.status(), 429);
    assert_eq!(action(&response), "stop_queue");
    let v: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "insufficient_quota");
    // The key is stopped: the next call gets the answer that stopped it,
    // at once, nothing sent.
    let again = openai(&client, &server, "s2")
        .body(body(&openai_body(64, false)))
        .send()
        .await
        .expect("the kept answer");
    assert_eq!(again.status(), 429);
    assert_eq!(action(&again), "stop_queue");
    assert!(again
        .extensions()
        .get::<Outcome>()
        .unwrap()
        .attempts()
        .is_empty());
    let v: serde_json::Value = serde_json::from_slice(&again.bytes().await.unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "insufficient_quota");
    // A middleware that kept no answer (another one on the same layer):
    // the call ends before a send with the decision.
    let other = client_over(reqwest::Client::new(), &layer, &Wire::default());
    let err = openai(&other, &server, "s3")
        .body(body(&openai_body(64, false)))
        .send()
        .await
        .expect_err("stopped before a send");
    let e = ratewise_error(&err).expect("ratewise's error");
    assert!(e.is_stop_queue(), "{e}");
    assert!(!e.was_sent());
    assert_eq!(server.records().len(), 1);
    clean(&layer).await;
}

#[tokio::test]
async fn a_gemini_key_in_the_query_files_its_stop_under_its_fingerprint() {
    let server = mock(roomy()).await;
    // Gemini's rules for a mock on loopback (Google's host would name them).
    let layer = RetryLayer::builder()
        .policy(fast_policy())
        .seed(7)
        .provider(ratewise_tower::Provider::Gemini)
        .build()
        .expect("layer");
    let client = client(&layer, &Wire::default());
    let url = |key: &str| {
        format!(
            "{}/v1beta/models/gemini-2.5-flash:generateContent?key={key}",
            server.base_url()
        )
    };
    let gemini = |key: &str, job: &str| {
        client
            .post(url(key))
            .header("content-type", "application/json")
            .with_extension(ratewise_tower::JobId::new(job))
            .body(body(&serde_json::json!({
                "contents": [{"parts": [{"text": "say hello"}]}],
                "generationConfig": {"maxOutputTokens": 64}
            })))
    };
    // The layer paces the call under the query key's fingerprint.
    let probe = http::Request::post(url("AIza-A")).body(()).unwrap();
    assert_eq!(
        layer.key_of(&probe),
        ratewise_tower::KeyLabel::fingerprint("AIza-A").as_str()
    );
    // Keys A and B stopped, each by its own answer.
    server.set_billing_error(true);
    for (key, job) in [("AIza-A", "a1"), ("AIza-B", "b1")] {
        let r = gemini(key, job).send().await.expect("the answer");
        assert_eq!((r.status().as_u16(), action(&r)), (400, "stop_queue"));
    }
    // Each key's next call gets its own key's answer back (the answer's
    // URL names it), nothing sent: the evidence was filed under each
    // key's fingerprint, not under one `anonymous` that B's stop would
    // have overwritten.
    for (key, job) in [("AIza-A", "a2"), ("AIza-B", "b2")] {
        let again = gemini(key, job).send().await.expect("the kept answer");
        assert_eq!(
            (again.status().as_u16(), action(&again)),
            (400, "stop_queue")
        );
        assert!(again
            .extensions()
            .get::<Outcome>()
            .unwrap()
            .attempts()
            .is_empty());
        assert!(
            again.url().as_str().ends_with(&format!("key={key}")),
            "{}",
            again.url()
        );
        assert_eq!(sends(&server, job), 0);
    }
    clean(&layer).await;
}

#[tokio::test]
async fn a_billing_error_stops_the_key_with_no_further_send() {
    let server = mock(roomy()).await;
    server.set_billing_error(true);
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let response = anthropic(&client, &server, "b1")
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect("the provider's answer");
    assert_eq!(response.status(), 402);
    assert_eq!(action(&response), "stop_queue");
    for job in ["b2", "b3"] {
        let again = anthropic(&client, &server, job)
            .body(body(&anthropic_body(64, false)))
            .send()
            .await
            .expect("the kept answer");
        assert_eq!(again.status(), 402);
        assert_eq!(action(&again), "stop_queue");
    }
    assert_eq!(server.records().len(), 1);
    clean(&layer).await;
}

#[tokio::test]
async fn a_connect_failure_keeps_reqwests_kind() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let err = client
        .post(format!("http://127.0.0.1:{port}/v1/messages"))
        .header("x-api-key", ANTHROPIC_KEY)
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect_err("refused");
    assert!(err.is_connect(), "{err:?}");
    assert!(matches!(err, reqwest_middleware::Error::Reqwest(_)));
    clean(&layer).await;
}

#[tokio::test]
async fn a_timeout_keeps_reqwests_kind_and_is_not_sent_again() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::Stall { ms: 3_000 })],
        ..roomy()
    })
    .await;
    let layer = layer();
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let client = client_over(inner, &layer, &Wire::default());
    let err = anthropic(&client, &server, "t1")
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect_err("timed out");
    assert!(err.is_timeout(), "{err:?}");
    // Sent with no answer: the outcome is unknown, so never sent twice.
    assert_eq!(sends(&server, "t1"), 1);
}

#[tokio::test]
async fn a_streaming_body_is_sent_once_and_its_answer_returned() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
        ..roomy()
    })
    .await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let streaming = reqwest::Body::wrap(Full::new(bytes::Bytes::from(body(&anthropic_body(
        64, false,
    )))));
    let response = anthropic(&client, &server, "st")
        .body(streaming)
        .send()
        .await
        .expect("the answer");
    // Retryable, yet not retried: the body cannot be sent again.
    assert_eq!(response.status(), 529);
    assert_eq!(sends(&server, "st"), 1);
    drop(response);
    clean(&layer).await;
}

#[tokio::test]
async fn bad_input_gets_a_clear_outcome() {
    let server = mock(roomy()).await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    // No key header: the provider's 401, and the anonymous scope stops.
    let response = client
        .post(format!("{}/v1/messages", server.base_url()))
        .with_extension(ratewise_tower::JobId::new("nokey"))
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect("the answer");
    let no_key = (response.status().as_u16(), action(&response).to_owned());
    // A body that is not JSON: the provider's 400, not retried.
    let response = anthropic(&client, &server, "nonjson")
        .body("not json")
        .send()
        .await
        .expect("the answer");
    let non_json = (response.status().as_u16(), action(&response).to_owned());
    // No max_tokens.
    let mut v = anthropic_body(64, false);
    v.as_object_mut().unwrap().remove("max_tokens");
    let response = anthropic(&client, &server, "nomax")
        .body(body(&v))
        .send()
        .await
        .expect("the answer");
    let no_max = (response.status().as_u16(), action(&response).to_owned());
    assert_eq!(no_key, (401, "stop_queue".to_owned()));
    assert_eq!(non_json, (400, "fail".to_owned()));
    assert_eq!(no_max, (400, "fail".to_owned()));
    assert_eq!(sends(&server, "nonjson"), 1);
    assert_eq!(sends(&server, "nomax"), 1);
    clean(&layer).await;
}

#[tokio::test]
async fn calls_dropped_in_flight_or_mid_body_leave_nothing_outstanding() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Stall { ms: 2_000 }, [1])],
        ..roomy()
    })
    .await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    // In flight: the caller's timeout drops the call.
    let call = anthropic(&client, &server, "d1")
        .body(body(&anthropic_body(64, false)))
        .send();
    assert!(tokio::time::timeout(Duration::from_millis(100), call)
        .await
        .is_err());
    clean(&layer).await;
    // Mid-body: a stream answered, read in part, dropped.
    let mut response = anthropic(&client, &server, "d2")
        .body(body(&anthropic_body(64, true)))
        .send()
        .await
        .expect("ok");
    let _first = response.chunk().await.expect("a chunk");
    drop(response);
    let ledger = clean(&layer).await;
    assert_eq!(ledger.refused_ends, 0);
}

#[tokio::test]
async fn a_call_dropped_while_it_waits_to_retry_leaves_nothing_outstanding() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(
            Fault::RetryAfter {
                format: RetryAfterFormat::Seconds,
                secs: 5,
            },
            [1],
        )],
        ..roomy()
    })
    .await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let call = anthropic(&client, &server, "w1")
        .body(body(&anthropic_body(64, false)))
        .send();
    // Answered 429 at once, then waiting out `retry-after: 5` when the
    // caller gives up.
    assert!(tokio::time::timeout(Duration::from_millis(300), call)
        .await
        .is_err());
    assert_eq!(sends(&server, "w1"), 1);
    clean(&layer).await;
}

/// Answers the first request that reaches it with OpenAI's 429 and
/// `retry-after-ms` (the mock writes only `retry-after`), then passes
/// every other through to the mock.
#[derive(Clone, Default)]
struct RetryAfterMs(Arc<std::sync::atomic::AtomicBool>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for RetryAfterMs {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return next.run(req, extensions).await;
        }
        let answer = http::Response::builder()
            .status(429)
            .header("content-type", "application/json")
            .header("retry-after-ms", "3000")
            .header("x-request-id", "req_injected")
            .body(
                r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            )
            .unwrap();
        Ok(reqwest::Response::from(answer))
    }
}

#[tokio::test]
async fn retry_after_ms_is_honoured_on_the_layers_clock() {
    let server = mock(roomy()).await;
    let clock = ManualClock::new();
    let layer = RetryLayer::builder()
        .policy(fast_policy())
        .seed(7)
        .clock(clock.clone())
        .build()
        .unwrap();
    let wire = Wire::default();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ratewise_reqwest::RatewiseMiddleware::from_layer(
            layer.clone(),
        ))
        .with(wire.clone())
        .with(RetryAfterMs::default())
        .build();
    let response = openai(&client, &server, "ms")
        .body(body(&openai_body(64, false)))
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    drop(response.bytes().await);
    assert_eq!(wire.bodies().len(), 2);
    assert_eq!(sends(&server, "ms"), 1);
    let waited = clock.elapsed();
    assert!(waited >= Duration::from_millis(3000), "{waited:?}");
}

#[tokio::test]
async fn a_call_past_its_deadline_before_a_send_is_an_error_with_the_decision() {
    let server = mock(roomy()).await;
    let layer = layer();
    let client = client(&layer, &Wire::default());
    let err = anthropic(&client, &server, "late")
        .with_extension(ratewise_tower::Deadline(Duration::ZERO))
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect_err("no answer");
    let e = ratewise_error(&err).expect("ratewise's error");
    assert!(e.is_give_up(), "{e}");
    assert!(!e.was_sent());
    assert_eq!(sends(&server, "late"), 0);
    clean(&layer).await;
}

#[tokio::test]
async fn a_call_dropped_while_it_waits_for_admission_leaves_nothing_outstanding() {
    let server = mock(roomy()).await;
    // One request a minute for the key: the second call waits for room
    // (its deadline leaves time for that wait, so it is not turned away).
    let layer = RetryLayer::builder()
        .policy(fast_policy())
        .deadline(Duration::from_secs(600))
        .seed(7)
        .limits(ratewise_tower::Limits::per_minute().requests(1))
        .build()
        .expect("layer");
    let client = client(&layer, &Wire::default());
    let first = anthropic(&client, &server, "a1")
        .body(body(&anthropic_body(64, false)))
        .send()
        .await
        .expect("the first call is answered");
    assert_eq!(first.status(), 200);
    drop(first.bytes().await);
    let queued = anthropic(&client, &server, "a2")
        .body(body(&anthropic_body(64, false)))
        .send();
    // The caller gives up while the call waits for admission.
    assert!(tokio::time::timeout(Duration::from_millis(300), queued)
        .await
        .is_err());
    assert_eq!(
        sends(&server, "a2"),
        0,
        "a call dropped in the queue is never sent"
    );
    clean(&layer).await;
}

/// "Is this key stopped?" is the store's word: the middleware's evidence
/// is the store's stop (its typed cause) with the answer it received
/// beside it, never a flag of its own — a resume in the store ends it,
/// and a later stop for another cause is not answered with the earlier
/// stop's answer.
#[tokio::test]
async fn the_stop_evidence_is_the_stores_stop_with_the_answer_beside_it() {
    let server = mock(roomy()).await;
    server.set_billing_error(true);
    let layer = layer();
    let mw = ratewise_reqwest::RatewiseMiddleware::from_layer(layer.clone());
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(mw.clone())
        .build();
    let call = |job: &'static str| {
        anthropic(&client, &server, job)
            .body(body(&anthropic_body(64, false)))
            .send()
    };
    let response = call("s1").await.expect("the provider's answer");
    assert_eq!(
        (response.status().as_u16(), action(&response)),
        (402, "stop_queue")
    );
    let fp = layer.key_of(
        &http::Request::post("/v1/messages")
            .header("x-api-key", ANTHROPIC_KEY)
            .body(())
            .unwrap(),
    );
    let store = layer.in_memory_store().expect("in memory");
    let owner = |store: &ratewise_core::admit::Shared| {
        let mut c = store.lock();
        let now = layer.now();
        c.scopes_of(&fp)
            .into_iter()
            .filter_map(|id| c.snapshot(id, now))
            .find_map(|s| s.stopped)
            .map(|s| s.cause)
    };
    assert_eq!(owner(store), Some(ratewise_core::Cause::Billing));
    let ev = mw.stop_evidence(&fp).await.expect("stopped");
    assert_eq!(Some(ev.cause), owner(store));
    assert_eq!(ev.status, Some(http::StatusCode::PAYMENT_REQUIRED));

    // Stopped again for the same cause, lifting in 90 s (another
    // process's stop through a shared store): the kept answer is given,
    // saying when the store's stop lifts.
    layer.resume(&fp).await;
    {
        let mut c = store.lock();
        let scope = c.scopes_of(&fp)[0];
        let now = layer.now();
        let until = now.wall + std::time::Duration::from_secs(90);
        c.stop(scope, ratewise_core::Cause::Billing, Some(until), now);
    }
    let replayed = call("s1b").await.expect("the kept answer");
    assert_eq!(replayed.status().as_u16(), 402);
    let secs: u64 = replayed
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("retry-after from the store's stop");
    assert!((1..=90).contains(&secs), "{secs}");

    // Resumed in the store: no stop, whatever was kept.
    layer.resume(&fp).await;
    assert!(mw.stop_evidence(&fp).await.is_none());
    // Stopped again in the store, for another cause (another process's
    // answer through a shared store): the store's cause, and the billing
    // answer kept from before is not given for it.
    {
        let mut c = store.lock();
        let scope = c.scopes_of(&fp)[0];
        c.stop(
            scope,
            ratewise_core::Cause::Authentication,
            None,
            layer.now(),
        );
    }
    let ev = mw.stop_evidence(&fp).await.expect("stopped");
    assert_eq!(ev.cause, ratewise_core::Cause::Authentication);
    assert_eq!(ev.status, None);
    let sends = server.records().len();
    let e = call("s2")
        .await
        .expect_err("stopped, no answer of its own to give");
    assert!(ratewise_error(&e).is_some_and(|e| e.is_stop_queue()), "{e}");
    assert_eq!(server.records().len(), sends, "nothing sent");
    clean(&layer).await;
}
