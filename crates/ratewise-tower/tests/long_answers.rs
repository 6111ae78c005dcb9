//! A long answer's usage comes after its text: the layer settles a 1 MiB
//! completion at the usage it reports, not at its estimate (issue #38).

mod common;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_tower::JobId;
use std::convert::Infallible;
use tower::{Layer, Service, ServiceExt};

#[tokio::test]
async fn a_one_mib_completion_settles_at_its_reported_usage() {
    let text = "word ".repeat(210_000);
    let body = format!(
        r#"{{"id":"msg_1","type":"message","content":[{{"type":"text","text":"{text}"}}],"usage":{{"input_tokens":12,"output_tokens":262500}}}}"#
    );
    assert!(body.len() > 1 << 20);
    let body = Bytes::from(body);
    let upstream = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        let body = body.clone();
        async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Full::new(body))
                    .unwrap(),
            )
        }
    });
    let mut svc = layer().layer(upstream);
    let mut req = Request::post("http://127.0.0.1:9/v1/messages")
        .header("x-api-key", "sk-long")
        .header("content-type", "application/json")
        .body(Full::new(anthropic_body(300_000, false)))
        .unwrap();
    req.extensions_mut().insert(JobId::new("long"));
    let resp = svc.ready().await.unwrap().call(req).await.unwrap();
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        n += frame.unwrap().data_ref().map_or(0, |d| d.len());
    }
    assert!(n > 1 << 20);
    let usage = body.metered().and_then(|m| m.usage()).expect("usage read");
    assert_eq!((usage.input_tokens, usage.output_tokens), (12, 262_500));
}
