//! A stream cut mid-way, through the proxy: `/metrics` counts its answer as
//! `mid_stream`, not `success`, and the key is charged what was delivered.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, OutputRange};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::Running;

const KEY: &str = "sk-ant-api03-test-KEY1";
const MAX_TOKENS: u64 = 1024;

fn body(stream: bool) -> String {
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":{MAX_TOKENS},"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

fn mock_config() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg.output_tokens = OutputRange { min: 400, max: 400 };
    cfg
}

async fn proxy(upstream: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, "", |_| None).expect("config");
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

async fn call(p: &Running, body: String) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn metrics(p: &Running) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}/metrics", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The value of one series, 0 when absent.
fn series(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

const SUCCESS: &str = r#"ratewise_answers_total{status="200",cause="success"}"#;
const MID_STREAM: &str = r#"ratewise_answers_total{status="200",cause="mid_stream"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_counts_as_mid_stream_and_is_charged_what_was_delivered() {
    let mut cfg = mock_config();
    // Anthropic: message_start, content_block_start, ping, then 25 deltas
    // of 4 tokens each; the body then ends without message_stop.
    cfg.faults = vec![FaultRule::nth(Fault::StreamCut { after_events: 28 }, [2])];
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url()).await;

    // A whole stream first: a success, charged its usage.
    let (status, text) = call(&p, body(true)).await;
    assert_eq!(status, 200);
    assert!(text.contains("message_stop"));
    let m = metrics(&p).await;
    assert_eq!((series(&m, SUCCESS), series(&m, MID_STREAM)), (1, 0), "{m}");
    let whole = p.app.store.ledger().charged.output;
    assert_eq!(whole, 400);

    // Then a cut one.
    let (status, text) = call(&p, body(true)).await;
    assert_eq!(status, 200, "the head was a success");
    assert!(!text.contains("message_stop"), "cut");
    let m = metrics(&p).await;
    assert_eq!(
        (series(&m, SUCCESS), series(&m, MID_STREAM)),
        (1, 1),
        "the cut stream is mid_stream, not success: {m}"
    );
    assert_eq!(series(&m, r#"ratewise_actions_total{action="done"}"#), 2);

    let l = p.app.store.ledger();
    assert!(l.is_clean(), "every reservation ended, none twice: {l:?}");
    let charged = l.charged.output - whole;
    let billed = mock.with_model(|m| m.settled()).output_tokens - whole;
    eprintln!("proxy cut: charged {charged} output tokens, the mock billed {billed}");
    assert_eq!(billed, 100);
    assert!(
        charged.abs_diff(billed) * 10 <= billed,
        "charged {charged}, the mock billed {billed}"
    );

    // A JSON answer still counts at once, as before.
    let (status, _) = call(&p, body(false)).await;
    assert_eq!(status, 200);
    let m = metrics(&p).await;
    assert_eq!((series(&m, SUCCESS), series(&m, MID_STREAM)), (2, 1), "{m}");
    p.shutdown().await;
}
