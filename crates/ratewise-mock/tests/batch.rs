//! The batch APIs over loopback: OpenAI's Files + Batches and Anthropic's
//! Message Batches, processed on the mock's (fast) clock.

mod common;
use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{BatchConfig, Limits, MockConfig, MockServer, ModelPrice, SpendConfig};
use serde_json::{json, Value};
use std::time::Duration;

const OPENAI_KEY: &str = "sk-openai-test";
const ANTHROPIC_KEY: &str = "sk-ant-test";

/// A provider minute lasts 0.6 s (100× real time); 100 items per
/// provider second is 10 000 per real second.
fn fast() -> MockConfig {
    MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 100.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    }
}

async fn call(
    server: &MockServer,
    method: &str,
    path: &str,
    key: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut b = Request::builder()
        .method(method)
        .uri(format!("{}{path}", server.base_url()));
    if !content_type.is_empty() {
        b = b.header("content-type", content_type);
    }
    if !key.is_empty() {
        b = if path.starts_with("/v1/messages") {
            b.header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
        } else {
            b.header("authorization", format!("Bearer {key}"))
        };
    }
    let resp = client
        .request(b.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

async fn get(server: &MockServer, path: &str, key: &str) -> Reply {
    call(server, "GET", path, key, "", Vec::new()).await
}

async fn post_json(server: &MockServer, path: &str, key: &str, v: &Value) -> Reply {
    call(
        server,
        "POST",
        path,
        key,
        "application/json",
        serde_json::to_vec(v).unwrap(),
    )
    .await
}

fn jsonl(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(&serde_json::to_vec(l).unwrap());
        out.push(b'\n');
    }
    out
}

fn parse_jsonl(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn chat_line(custom_id: &str, body: Value) -> Value {
    json!({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body})
}

async fn upload(server: &MockServer, content: &[u8]) -> Reply {
    let boundary = "ratewiseBoundary7MA4YWxk";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    call(
        server,
        "POST",
        "/v1/files",
        OPENAI_KEY,
        &format!("multipart/form-data; boundary={boundary}"),
        body,
    )
    .await
}

/// Uploads `lines` and creates a chat-completions batch of them.
async fn openai_batch(server: &MockServer, lines: &[Value], metadata: Value) -> Reply {
    let file = upload(server, &jsonl(lines)).await;
    assert_eq!(file.status, 200, "{}", file.text());
    let f = file.json();
    assert_eq!(f["object"], "file");
    assert_eq!(f["purpose"], "batch");
    assert!(f["id"].as_str().unwrap().starts_with("file-"));
    let mut req = json!({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"});
    if !metadata.is_null() {
        req["metadata"] = metadata;
    }
    post_json(server, "/v1/batches", OPENAI_KEY, &req).await
}

/// Polls until the batch's status is one of `done` (10 s at most).
async fn wait_openai(server: &MockServer, id: &str, done: &[&str]) -> Value {
    for _ in 0..2000 {
        let r = get(server, &format!("/v1/batches/{id}"), OPENAI_KEY).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if done.contains(&v["status"].as_str().unwrap_or("")) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("batch {id} never reached {done:?}");
}

async fn wait_anthropic(server: &MockServer, id: &str) -> Value {
    for _ in 0..2000 {
        let r = get(server, &format!("/v1/messages/batches/{id}"), ANTHROPIC_KEY).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if v["processing_status"] == "ended" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("batch {id} never ended");
}

async fn file_lines(server: &MockServer, id: &Value) -> Vec<Value> {
    let id = id.as_str().expect("a file id");
    let r = get(server, &format!("/v1/files/{id}/content"), OPENAI_KEY).await;
    assert_eq!(r.status, 200);
    parse_jsonl(&r.body)
}

fn claude_params(text: &str) -> Value {
    anthropic_body(text, 64, false)
}

fn gpt_body(text: &str) -> Value {
    openai_body(text, 64, false)
}

fn anthropic_requests(n: usize) -> Value {
    let reqs: Vec<Value> = (0..n)
        .map(|i| json!({"custom_id": format!("req-{i}"), "params": claude_params(&format!("question {i}"))}))
        .collect();
    json!({ "requests": reqs })
}

// ----- OpenAI ---------------------------------------------------------------

#[tokio::test]
async fn openai_batch_runs_to_the_end_with_outputs_by_custom_id() {
    let server = MockServer::start(fast()).await.unwrap();
    let lines: Vec<Value> = (0..5)
        .map(|i| chat_line(&format!("job-{i}"), gpt_body(&format!("hello {i}"))))
        .collect();
    let r = openai_batch(&server, &lines, json!({"run": "r1"})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    assert!(b["id"].as_str().unwrap().starts_with("batch_"));
    assert_eq!(b["object"], "batch");
    assert_eq!(b["status"], "validating");
    assert_eq!(b["endpoint"], "/v1/chat/completions");
    assert_eq!(b["completion_window"], "24h");
    assert_eq!(b["request_counts"]["total"], 5);
    let created = b["created_at"].as_u64().unwrap();
    // 24 provider hours at 100×: 864 real seconds
    let expires = b["expires_at"].as_u64().unwrap();
    assert!((863..=865).contains(&(expires - created)), "{b}");

    let done = wait_openai(&server, b["id"].as_str().unwrap(), &["completed"]).await;
    assert_eq!(
        done["request_counts"],
        json!({"total": 5, "completed": 5, "failed": 0})
    );
    for field in ["in_progress_at", "finalizing_at", "completed_at"] {
        assert!(done[field].as_u64().is_some(), "{field} in {done}");
    }
    assert!(done["error_file_id"].is_null());
    let out = file_lines(&server, &done["output_file_id"]).await;
    let mut ids: Vec<&str> = out
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["job-0", "job-1", "job-2", "job-3", "job-4"]);
    for l in &out {
        assert!(l["id"].as_str().unwrap().starts_with("batch_req_"));
        assert!(l["error"].is_null());
        assert_eq!(l["response"]["status_code"], 200);
        assert!(l["response"]["request_id"].as_str().is_some());
        let body = &l["response"]["body"];
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "gpt-4o-mini");
        assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    }
    // the file object of the output
    let f = get(
        &server,
        &format!("/v1/files/{}", done["output_file_id"].as_str().unwrap()),
        OPENAI_KEY,
    )
    .await;
    assert_eq!(f.json()["purpose"], "batch_output");
    assert_eq!(server.batch_totals().items.succeeded, 5);
    // the input file too
    let input = get(
        &server,
        &format!(
            "/v1/files/{}/content",
            done["input_file_id"].as_str().unwrap()
        ),
        OPENAI_KEY,
    )
    .await;
    assert_eq!(parse_jsonl(&input.body), lines);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_list_finds_created_batches_newest_first_with_metadata() {
    let server = MockServer::start(fast()).await.unwrap();
    let one = vec![chat_line("a", gpt_body("x"))];
    let first = openai_batch(&server, &one, json!({"ratewise_run": "run-1", "n": "1"}))
        .await
        .json();
    let second = openai_batch(&server, &one, json!({"ratewise_run": "run-2"}))
        .await
        .json();
    let list = get(&server, "/v1/batches?limit=10", OPENAI_KEY).await;
    assert_eq!(list.status, 200);
    let l = list.json();
    assert_eq!(l["object"], "list");
    assert_eq!(l["data"][0]["id"], second["id"]);
    assert_eq!(l["data"][1]["id"], first["id"]);
    assert_eq!(l["first_id"], second["id"]);
    assert_eq!(l["last_id"], first["id"]);
    assert_eq!(l["has_more"], false);
    assert_eq!(
        l["data"][1]["metadata"],
        json!({"ratewise_run": "run-1", "n": "1"})
    );
    assert!(l["data"][1]["created_at"].as_u64().is_some());
    assert_eq!(l["data"][1]["request_counts"]["total"], 1);
    // pages
    let p1 = get(&server, "/v1/batches?limit=1", OPENAI_KEY).await.json();
    assert_eq!(p1["data"].as_array().unwrap().len(), 1);
    assert_eq!(p1["has_more"], true);
    let p2 = get(
        &server,
        &format!(
            "/v1/batches?limit=1&after={}",
            p1["last_id"].as_str().unwrap()
        ),
        OPENAI_KEY,
    )
    .await
    .json();
    assert_eq!(p2["data"][0]["id"], first["id"]);
    assert_eq!(p2["has_more"], false);
    // metadata is bounded as documented: 16 pairs
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let r = openai_batch(&server, &one, Value::Object(many)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    server.shutdown().await;
}

#[tokio::test]
async fn openai_cancel_lets_in_progress_items_finish_and_cancels_the_rest() {
    // 0.5 item per provider second at 10×: one item every 200 ms real.
    let cfg = MockConfig {
        seconds_per_minute: 6.0,
        batch: BatchConfig {
            items_per_second: 0.5,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let lines: Vec<Value> = (0..6)
        .map(|i| chat_line(&format!("c{i}"), gpt_body(&format!("q{i}"))))
        .collect();
    let b = openai_batch(&server, &lines, Value::Null).await.json();
    let id = b["id"].as_str().unwrap();
    let r = call(
        &server,
        "POST",
        &format!("/v1/batches/{id}/cancel"),
        OPENAI_KEY,
        "",
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json();
    assert_eq!(c["status"], "cancelling");
    assert!(c["cancelling_at"].as_u64().is_some());
    let done = wait_openai(&server, id, &["cancelled"]).await;
    assert!(done["cancelled_at"].as_u64().is_some());
    let completed = done["request_counts"]["completed"].as_u64().unwrap();
    assert!(completed <= 2, "{done}");
    let errors = file_lines(&server, &done["error_file_id"]).await;
    assert_eq!(errors.len() as u64, 6 - completed);
    for e in &errors {
        assert_eq!(e["error"]["code"], "batch_cancelled");
        assert!(e["response"].is_null());
    }
    // a second cancel is refused
    let again = call(
        &server,
        "POST",
        &format!("/v1/batches/{id}/cancel"),
        OPENAI_KEY,
        "",
        Vec::new(),
    )
    .await;
    assert_eq!(again.status, 400);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_file_mixing_models_fails_validation() {
    let server = MockServer::start(fast()).await.unwrap();
    let mut other = gpt_body("b");
    other["model"] = json!("gpt-4o");
    let lines = vec![chat_line("a", gpt_body("a")), chat_line("b", other)];
    let b = openai_batch(&server, &lines, Value::Null).await.json();
    let done = wait_openai(&server, b["id"].as_str().unwrap(), &["failed", "completed"]).await;
    assert_eq!(done["status"], "failed");
    assert!(done["failed_at"].as_u64().is_some());
    assert_eq!(done["errors"]["object"], "list");
    let e = &done["errors"]["data"][0];
    assert_eq!(e["code"], "mismatched_model");
    assert_eq!(e["line"], 2);
    assert!(done["output_file_id"].is_null() && done["error_file_id"].is_null());
    // duplicate custom_ids and a url other than the endpoint fail too
    let dup = vec![chat_line("a", gpt_body("a")), chat_line("a", gpt_body("b"))];
    let b = openai_batch(&server, &dup, Value::Null).await.json();
    let done = wait_openai(&server, b["id"].as_str().unwrap(), &["failed", "completed"]).await;
    assert_eq!(done["errors"]["data"][0]["code"], "duplicate_custom_id");
    let mut wrong = chat_line("a", gpt_body("a"));
    wrong["url"] = json!("/v1/embeddings");
    let b = openai_batch(&server, &[wrong], Value::Null).await.json();
    let done = wait_openai(&server, b["id"].as_str().unwrap(), &["failed", "completed"]).await;
    assert_eq!(done["errors"]["data"][0]["code"], "mismatched_endpoint");
    server.shutdown().await;
}

#[tokio::test]
async fn openai_refused_items_go_to_the_error_file() {
    let server = MockServer::start(fast()).await.unwrap();
    let mut bad = gpt_body("bad");
    bad["max_completion_tokens"] = json!(-1);
    let mut no_messages = gpt_body("none");
    no_messages.as_object_mut().unwrap().remove("messages");
    let lines = vec![
        chat_line("ok", gpt_body("fine")),
        chat_line("bad", bad),
        chat_line("none", no_messages),
    ];
    let b = openai_batch(&server, &lines, Value::Null).await.json();
    let done = wait_openai(&server, b["id"].as_str().unwrap(), &["completed"]).await;
    assert_eq!(
        done["request_counts"],
        json!({"total": 3, "completed": 1, "failed": 2})
    );
    let out = file_lines(&server, &done["output_file_id"]).await;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["custom_id"], "ok");
    let errors = file_lines(&server, &done["error_file_id"]).await;
    let mut ids: Vec<&str> = errors
        .iter()
        .map(|e| e["custom_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["bad", "none"]);
    for e in &errors {
        assert_eq!(e["response"]["status_code"], 400);
        assert_eq!(
            e["response"]["body"]["error"]["type"],
            "invalid_request_error"
        );
        assert!(e["error"].is_null());
    }
    assert_eq!(server.batch_totals().items.errored, 2);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_items_not_done_in_the_window_expire() {
    // 10 items at 2 per provider second in a 2-second window: ~4 done.
    let cfg = MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 2.0,
            window_seconds: 2.0,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let lines: Vec<Value> = (0..10)
        .map(|i| chat_line(&format!("e{i}"), gpt_body(&format!("q{i}"))))
        .collect();
    let b = openai_batch(&server, &lines, Value::Null).await.json();
    let done = wait_openai(
        &server,
        b["id"].as_str().unwrap(),
        &["expired", "completed"],
    )
    .await;
    assert_eq!(done["status"], "expired");
    assert!(done["expired_at"].as_u64().is_some());
    let completed = done["request_counts"]["completed"].as_u64().unwrap();
    assert!((1..10).contains(&completed), "{done}");
    let out = file_lines(&server, &done["output_file_id"]).await;
    assert_eq!(out.len() as u64, completed);
    let errors = file_lines(&server, &done["error_file_id"]).await;
    assert_eq!(errors.len() as u64, 10 - completed);
    for e in &errors {
        assert_eq!(e["error"]["code"], "batch_expired");
    }
    server.shutdown().await;
}

// ----- Anthropic ------------------------------------------------------------

#[tokio::test]
async fn anthropic_batch_runs_to_the_end_with_results_by_custom_id() {
    let server = MockServer::start(fast()).await.unwrap();
    let r = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(4),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    let id = b["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("msgbatch_"));
    assert_eq!(b["type"], "message_batch");
    assert_eq!(b["processing_status"], "in_progress");
    assert_eq!(b["request_counts"]["processing"], 4);
    assert!(b["results_url"].is_null());
    assert!(b.get("metadata").is_none());
    let created = ratewise_core::time::parse_rfc3339(b["created_at"].as_str().unwrap()).unwrap();
    let expires = ratewise_core::time::parse_rfc3339(b["expires_at"].as_str().unwrap()).unwrap();
    let window = expires.duration_since(created).unwrap().as_secs_f64();
    assert!(
        (863.0..865.0).contains(&window),
        "24 provider hours at 100×: {window}"
    );

    let done = wait_anthropic(&server, &id).await;
    assert_eq!(
        done["request_counts"],
        json!({"processing": 0, "succeeded": 4, "errored": 0, "canceled": 0, "expired": 0})
    );
    assert!(done["ended_at"].as_str().is_some());
    let url = done["results_url"].as_str().unwrap();
    let path = url.strip_prefix(&server.base_url()).unwrap();
    let res = get(&server, path, ANTHROPIC_KEY).await;
    assert_eq!(res.status, 200);
    let lines = parse_jsonl(&res.body);
    let ids: Vec<&str> = lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["req-0", "req-1", "req-2", "req-3"]);
    for l in &lines {
        assert_eq!(l["result"]["type"], "succeeded");
        let m = &l["result"]["message"];
        assert_eq!(m["type"], "message");
        assert_eq!(m["model"], "claude-sonnet-4-5");
        assert!(m["usage"]["output_tokens"].as_u64().unwrap() > 0);
        assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_results_are_refused_until_the_batch_ends() {
    let cfg = MockConfig {
        seconds_per_minute: 60.0,
        batch: BatchConfig {
            items_per_second: 0.001,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let b = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(1),
    )
    .await
    .json();
    let id = b["id"].as_str().unwrap();
    let r = get(
        &server,
        &format!("/v1/messages/batches/{id}/results"),
        ANTHROPIC_KEY,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let unknown = get(&server, "/v1/messages/batches/msgbatch_nope", ANTHROPIC_KEY).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["type"], "not_found_error");
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_list_finds_created_batches_newest_first() {
    let server = MockServer::start(fast()).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let b = post_json(
            &server,
            "/v1/messages/batches",
            ANTHROPIC_KEY,
            &anthropic_requests(2),
        )
        .await
        .json();
        ids.push(b["id"].as_str().unwrap().to_string());
    }
    let l = get(&server, "/v1/messages/batches?limit=20", ANTHROPIC_KEY)
        .await
        .json();
    let listed: Vec<&str> = l["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]);
    assert_eq!(l["has_more"], false);
    assert_eq!(l["first_id"], ids[2].as_str());
    assert_eq!(l["last_id"], ids[0].as_str());
    let b = &l["data"][2];
    assert!(b["created_at"].as_str().is_some());
    let c = &b["request_counts"];
    let total: u64 = ["processing", "succeeded", "errored", "canceled", "expired"]
        .iter()
        .map(|k| c[*k].as_u64().unwrap())
        .sum();
    assert_eq!(total, 2);
    // pages: after_id goes to older batches, before_id to newer ones
    let p1 = get(&server, "/v1/messages/batches?limit=2", ANTHROPIC_KEY)
        .await
        .json();
    assert_eq!(p1["has_more"], true);
    let p2 = get(
        &server,
        &format!(
            "/v1/messages/batches?limit=2&after_id={}",
            p1["last_id"].as_str().unwrap()
        ),
        ANTHROPIC_KEY,
    )
    .await
    .json();
    assert_eq!(p2["data"][0]["id"], ids[0].as_str());
    assert_eq!(p2["has_more"], false);
    let back = get(
        &server,
        &format!("/v1/messages/batches?limit=1&before_id={}", ids[0]),
        ANTHROPIC_KEY,
    )
    .await
    .json();
    assert_eq!(back["data"][0]["id"], ids[1].as_str());
    assert_eq!(back["has_more"], true);
    // OpenAI's list does not show Anthropic's batches
    let o = get(&server, "/v1/batches", OPENAI_KEY).await.json();
    assert_eq!(o["data"], json!([]));
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_cancel_ends_with_canceled_results() {
    let cfg = MockConfig {
        seconds_per_minute: 6.0,
        batch: BatchConfig {
            items_per_second: 0.5,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let b = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(5),
    )
    .await
    .json();
    let id = b["id"].as_str().unwrap();
    let c = call(
        &server,
        "POST",
        &format!("/v1/messages/batches/{id}/cancel"),
        ANTHROPIC_KEY,
        "",
        Vec::new(),
    )
    .await;
    assert_eq!(c.status, 200, "{}", c.text());
    let c = c.json();
    assert_eq!(c["processing_status"], "canceling");
    assert!(c["cancel_initiated_at"].as_str().is_some());
    assert!(c["request_counts"]["canceled"].as_u64().unwrap() >= 3);
    let done = wait_anthropic(&server, id).await;
    let counts = &done["request_counts"];
    let (ok, canceled) = (
        counts["succeeded"].as_u64().unwrap(),
        counts["canceled"].as_u64().unwrap(),
    );
    assert_eq!(ok + canceled, 5, "{done}");
    assert!(ok <= 2);
    let res = get(
        &server,
        &format!("/v1/messages/batches/{id}/results"),
        ANTHROPIC_KEY,
    )
    .await;
    let lines = parse_jsonl(&res.body);
    let n = lines
        .iter()
        .filter(|l| l["result"] == json!({"type": "canceled"}))
        .count();
    assert_eq!(n as u64, canceled);
    // an ended batch can be deleted; then it is gone
    let del = call(
        &server,
        "DELETE",
        &format!("/v1/messages/batches/{id}"),
        ANTHROPIC_KEY,
        "",
        Vec::new(),
    )
    .await;
    assert_eq!(del.json()["type"], "message_batch_deleted");
    assert_eq!(
        get(
            &server,
            &format!("/v1/messages/batches/{id}"),
            ANTHROPIC_KEY
        )
        .await
        .status,
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_invalid_params_end_errored() {
    let server = MockServer::start(fast()).await.unwrap();
    let mut no_max = claude_params("no max");
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let body = json!({"requests": [
        {"custom_id": "good", "params": claude_params("fine")},
        {"custom_id": "no-max", "params": no_max},
    ]});
    let b = post_json(&server, "/v1/messages/batches", ANTHROPIC_KEY, &body)
        .await
        .json();
    let done = wait_anthropic(&server, b["id"].as_str().unwrap()).await;
    assert_eq!(done["request_counts"]["succeeded"], 1);
    assert_eq!(done["request_counts"]["errored"], 1);
    let res = get(
        &server,
        &format!("/v1/messages/batches/{}/results", b["id"].as_str().unwrap()),
        ANTHROPIC_KEY,
    )
    .await;
    let lines = parse_jsonl(&res.body);
    let errored = lines.iter().find(|l| l["custom_id"] == "no-max").unwrap();
    assert_eq!(errored["result"]["type"], "errored");
    assert_eq!(errored["result"]["error"]["type"], "error");
    assert_eq!(
        errored["result"]["error"]["error"]["type"],
        "invalid_request_error"
    );
    assert!(errored["result"]["error"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_requests_are_validated_at_create() {
    let server = MockServer::start(fast()).await.unwrap();
    let dup = json!({"requests": [
        {"custom_id": "same", "params": claude_params("a")},
        {"custom_id": "same", "params": claude_params("b")},
    ]});
    for (body, what) in [
        (dup, "duplicate"),
        (
            json!({"requests": [{"custom_id": "has space", "params": claude_params("a")}]}),
            "pattern",
        ),
        (
            json!({"requests": [{"custom_id": "x".repeat(65), "params": claude_params("a")}]}),
            "long",
        ),
        (json!({"requests": []}), "empty"),
        (
            json!({"requests": [{"custom_id": "a", "params": claude_params("a")}], "metadata": {}}),
            "metadata",
        ),
    ] {
        let r = post_json(&server, "/v1/messages/batches", ANTHROPIC_KEY, &body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text());
        assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{what}");
    }
    let r = post_json(&server, "/v1/messages/batches", "", &anthropic_requests(1)).await;
    assert_eq!(r.status, 401);
    assert!(server.batches().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_items_not_done_in_the_window_expire() {
    let cfg = MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 2.0,
            window_seconds: 2.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let b = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(10),
    )
    .await
    .json();
    let id = b["id"].as_str().unwrap();
    let done = wait_anthropic(&server, id).await;
    let c = &done["request_counts"];
    let ok = c["succeeded"].as_u64().unwrap();
    let expired = c["expired"].as_u64().unwrap();
    assert!((1..10).contains(&ok), "{done}");
    assert_eq!(ok + expired, 10);
    let res = get(
        &server,
        &format!("/v1/messages/batches/{id}/results"),
        ANTHROPIC_KEY,
    )
    .await;
    let n = parse_jsonl(&res.body)
        .iter()
        .filter(|l| l["result"] == json!({"type": "expired"}))
        .count();
    assert_eq!(n as u64, expired);
    server.shutdown().await;
}

// ----- both -----------------------------------------------------------------

#[tokio::test]
async fn a_spend_cap_refuses_batch_creation() {
    let cfg = MockConfig {
        spend: SpendConfig {
            cap_usd: Some(0.0),
            ..SpendConfig::default()
        },
        ..fast()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let r = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(1),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["type"], "rate_limit_error");
    assert_eq!(
        e["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    let o = openai_batch(&server, &[chat_line("a", gpt_body("a"))], Value::Null).await;
    assert_eq!(o.status, 429, "{}", o.text());
    assert_eq!(o.json()["error"]["code"], "insufficient_quota");
    // the direct path answers the same (ids aside)
    let direct = anthropic(&server, &claude_params("x")).await;
    assert_eq!(direct.status, 429);
    assert_eq!(direct.json()["error"], e["error"]);
    // billing off: 402 for batch creation too
    server.set_spend_cap(None);
    server.set_billing_error(true);
    let r = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(1),
    )
    .await;
    assert_eq!(r.status, 402);
    assert_eq!(r.json()["error"]["type"], "billing_error");
    assert!(server.batches().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn batch_spend_counts_toward_the_cap() {
    // A cap a little above nothing: the first batch runs past it (both
    // providers say a batch may slightly exceed a spend limit); the next
    // create is refused.
    let cfg = MockConfig {
        spend: SpendConfig {
            cap_usd: Some(1e-9),
            ..SpendConfig::default()
        },
        ..fast()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let b = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(3),
    )
    .await
    .json();
    let done = wait_anthropic(&server, b["id"].as_str().unwrap()).await;
    assert_eq!(done["request_counts"]["succeeded"], 3);
    assert!(server.usd_batch() > 1e-9);
    assert_eq!(server.usd_direct(), 0.0);
    let r = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(1),
    )
    .await;
    assert_eq!(r.status, 429);
    let direct = anthropic(&server, &claude_params("x")).await;
    assert_eq!(direct.status, 429);
    assert_eq!(
        direct.json()["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn batch_prices_are_half_the_direct_prices() {
    let cfg = MockConfig {
        prices: ModelPrice::documented(),
        ..fast()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let texts: Vec<String> = (0..4)
        .map(|i| format!("the same question, number {i}"))
        .collect();
    // direct
    for t in &texts {
        assert_eq!(anthropic(&server, &claude_params(t)).await.status, 200);
        assert_eq!(openai(&server, &gpt_body(t)).await.status, 200);
    }
    let direct = server.usd_direct();
    assert!(direct > 0.0);
    // the same requests in batches
    let reqs: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"custom_id": format!("c{i}"), "params": claude_params(t)}))
        .collect();
    let a = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &json!({"requests": reqs}),
    )
    .await
    .json();
    let lines: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| chat_line(&format!("c{i}"), gpt_body(t)))
        .collect();
    let o = openai_batch(&server, &lines, Value::Null).await.json();
    wait_anthropic(&server, a["id"].as_str().unwrap()).await;
    wait_openai(&server, o["id"].as_str().unwrap(), &["completed"]).await;
    let batch = server.usd_batch();
    assert!(
        (batch - direct / 2.0).abs() < 1e-12,
        "batch {batch} vs direct {direct}"
    );
    assert_eq!(server.usd_direct(), direct);
    assert!((server.spend_usd() - (direct + batch)).abs() < 1e-12);
    // the per-model prices differ: Sonnet costs more than gpt-4o-mini
    let per: Vec<f64> = server.batches().iter().map(|b| b.usd).collect();
    assert!(per[0] > per[1], "{per:?}");
    // the control route says the same
    let s = get(&server, "/mock/spend", "").await.json();
    assert_eq!(s["usd_direct"].as_f64().unwrap(), direct);
    assert_eq!(s["usd_batch"].as_f64().unwrap(), batch);
    assert_eq!(s["batch_items"]["succeeded"], 8);
    assert_eq!(s["batches"], 2);
    let listed = get(&server, "/mock/batches", "").await.json();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn batch_items_do_not_take_the_per_minute_limits() {
    let two = Limits {
        requests_per_minute: Some(2),
        ..Limits::default()
    };
    let cfg = MockConfig {
        seconds_per_minute: 60.0,
        anthropic_limits: two,
        openai_limits: two,
        batch: BatchConfig {
            items_per_second: 1000.0,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let a = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(10),
    )
    .await
    .json();
    let lines: Vec<Value> = (0..10)
        .map(|i| chat_line(&format!("c{i}"), gpt_body(&format!("q{i}"))))
        .collect();
    let o = openai_batch(&server, &lines, Value::Null).await.json();
    let a = wait_anthropic(&server, a["id"].as_str().unwrap()).await;
    let o = wait_openai(&server, o["id"].as_str().unwrap(), &["completed"]).await;
    assert_eq!(a["request_counts"]["succeeded"], 10);
    assert_eq!(o["request_counts"]["completed"], 10);
    // the buckets are untouched: two direct requests each, then a 429
    for _ in 0..2 {
        assert_eq!(anthropic(&server, &claude_params("d")).await.status, 200);
        assert_eq!(openai(&server, &gpt_body("d")).await.status, 200);
    }
    assert_eq!(anthropic(&server, &claude_params("d")).await.status, 429);
    assert_eq!(openai(&server, &gpt_body("d")).await.status, 429);
    // and the batch routes' own requests are not recorded as API requests
    assert_eq!(server.records().len(), 6);
    server.shutdown().await;
}

#[tokio::test]
async fn batch_stores_are_bounded() {
    let cfg = MockConfig {
        batch: BatchConfig {
            items_per_second: 0.001,
            max_batches: 1,
            max_files: 2,
            max_file_bytes: 1000,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let big = upload(&server, &vec![b'x'; 2000]).await;
    assert_eq!(big.status, 413, "{}", big.text());
    let first = openai_batch(&server, &[chat_line("a", gpt_body("a"))], Value::Null).await;
    assert_eq!(first.status, 200);
    // one batch kept, still running: the next is refused
    let r = post_json(
        &server,
        "/v1/messages/batches",
        ANTHROPIC_KEY,
        &anthropic_requests(1),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    let second = upload(&server, b"{}\n").await;
    assert_eq!(second.status, 200);
    let third = upload(&server, b"{}\n").await;
    assert_eq!(third.status, 400, "{}", third.text());
    // deleting a file makes room
    let id = second.json()["id"].as_str().unwrap().to_string();
    let del = call(
        &server,
        "DELETE",
        &format!("/v1/files/{id}"),
        OPENAI_KEY,
        "",
        Vec::new(),
    )
    .await;
    assert_eq!(del.json()["deleted"], true);
    assert_eq!(upload(&server, b"{}\n").await.status, 200);
    server.shutdown().await;
}
