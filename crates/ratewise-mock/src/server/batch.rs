//! The batch routes: OpenAI `/v1/files` and `/v1/batches`, Anthropic
//! `/v1/messages/batches`, over [`crate::batch::BatchStore`].

use super::{lock, Resp, State, Wire};
use crate::batch::Refusal;
use crate::model::Answer;
use crate::render::{self, RenderCtx, Rendered};
use crate::request::{self, header_str};
use http::{Method, Request};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use ratewise_core::Provider;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

/// One batch route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    FileUpload,
    File(String),
    FileContent(String),
    FileDelete(String),
    OpenaiCreate,
    OpenaiList,
    OpenaiGet(String),
    OpenaiCancel(String),
    AnthropicCreate,
    AnthropicList,
    AnthropicGet(String),
    AnthropicCancel(String),
    AnthropicResults(String),
    AnthropicDelete(String),
}

impl Route {
    fn provider(&self) -> Provider {
        match self {
            Route::AnthropicCreate
            | Route::AnthropicList
            | Route::AnthropicGet(_)
            | Route::AnthropicCancel(_)
            | Route::AnthropicResults(_)
            | Route::AnthropicDelete(_) => Provider::Anthropic,
            _ => Provider::Openai,
        }
    }
}

fn id_segment(s: &str) -> Option<String> {
    (!s.is_empty() && !s.contains('/')).then(|| request::truncate(s, 128))
}

/// The batch route of `method` `path`, if it is one.
pub(super) fn route(method: &Method, path: &str) -> Option<Route> {
    let m = method.clone();
    if let Some(rest) = path.strip_prefix("/v1/messages/batches") {
        let rest = rest.trim_start_matches('/');
        return match (m, rest) {
            (Method::POST, "") => Some(Route::AnthropicCreate),
            (Method::GET, "") => Some(Route::AnthropicList),
            (Method::POST, r) => id_segment(r.strip_suffix("/cancel")?).map(Route::AnthropicCancel),
            (Method::GET, r) if r.ends_with("/results") => {
                id_segment(r.strip_suffix("/results")?).map(Route::AnthropicResults)
            }
            (Method::GET, r) => id_segment(r).map(Route::AnthropicGet),
            (Method::DELETE, r) => id_segment(r).map(Route::AnthropicDelete),
            _ => None,
        };
    }
    if let Some(rest) = path.strip_prefix("/v1/batches") {
        let rest = rest.trim_start_matches('/');
        return match (m, rest) {
            (Method::POST, "") => Some(Route::OpenaiCreate),
            (Method::GET, "") => Some(Route::OpenaiList),
            (Method::POST, r) => id_segment(r.strip_suffix("/cancel")?).map(Route::OpenaiCancel),
            (Method::GET, r) => id_segment(r).map(Route::OpenaiGet),
            _ => None,
        };
    }
    if let Some(rest) = path.strip_prefix("/v1/files") {
        let rest = rest.trim_start_matches('/');
        return match (m, rest) {
            (Method::POST, "") => Some(Route::FileUpload),
            (Method::GET, r) if r.ends_with("/content") => {
                id_segment(r.strip_suffix("/content")?).map(Route::FileContent)
            }
            (Method::GET, r) => id_segment(r).map(Route::File),
            (Method::DELETE, r) => id_segment(r).map(Route::FileDelete),
            _ => None,
        };
    }
    None
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn ok_json(ctx: &RenderCtx, v: &Value) -> Rendered {
    Rendered {
        status: 200,
        headers: vec![
            ("content-type", "application/json".to_string()),
            render::id_header(ctx),
        ],
        body: serde_json::to_vec(v).unwrap_or_default(),
    }
}

fn refused(ctx: &RenderCtx, r: Refusal) -> Rendered {
    render::render_status_error(ctx, r.status, &r.message)
}

fn not_found(ctx: &RenderCtx, what: &str, id: &str) -> Rendered {
    render::render_status_error(ctx, 404, &format!("No such {what}: {id}"))
}

/// Serves one batch route.
pub(super) async fn serve(state: &State, wire: Wire, route: Route, req: Request<Incoming>) -> Resp {
    let provider = route.provider();
    let seq = state.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let mut ctx = RenderCtx::new(provider, "", state.config.seed, seq, SystemTime::now());
    ctx.scale = state.clock.scale();
    if provider == Provider::Openai {
        ctx.flavor = state.config.flavor;
    }
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    let Some(key) = request::api_key(h) else {
        let msg = match provider {
            Provider::Openai => "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            _ => "x-api-key header is required",
        };
        return wire.respond(render::render_status_error(&ctx, 401, msg));
    };
    let key = state
        .config
        .key_labels
        .get(key)
        .cloned()
        .unwrap_or_else(|| request::key_fingerprint(key));
    let cfg = state.config.batch;
    let limit = match route {
        Route::FileUpload => cfg.max_file_bytes.saturating_add(64 << 10),
        Route::AnthropicCreate => cfg.max_anthropic_bytes,
        _ => 1 << 20,
    };
    let body = match Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return wire.respond(render::render_status_error(
                &ctx,
                413,
                &format!("Request exceeds the maximum allowed number of bytes ({limit})."),
            ))
        }
    };
    let base = state.base_url.as_str();
    let now = state.clock.now();
    let mut store = lock(&state.batches);
    let mut model = lock(&state.model);
    store.advance(now, &mut model);
    let creates = matches!(route, Route::OpenaiCreate | Route::AnthropicCreate);
    if creates {
        if let Some(outcome) = model.money_outcome() {
            // The direct path's billing / spend-cap answer.
            let answer = Answer {
                nth: seq,
                outcome,
                windows: Vec::new(),
                stall: None,
                stream_fault: None,
            };
            return wire.respond(render::render_answer(&ctx, &answer));
        }
    }
    drop(model);
    let query = parts.uri.query();
    let r = match route {
        Route::FileUpload => {
            let ct = header_str(h, "content-type").unwrap_or("");
            match parse_multipart(ct, &body) {
                Err(msg) => render::render_status_error(&ctx, 400, &msg),
                Ok(parts) => {
                    let field = |n: &str| parts.iter().find(|p| p.name == n);
                    match (field("purpose"), field("file")) {
                        (None, _) => render::render_status_error(
                            &ctx,
                            400,
                            "Missing required parameter: 'purpose'.",
                        ),
                        (_, None) => render::render_status_error(
                            &ctx,
                            400,
                            "Missing required parameter: 'file'.",
                        ),
                        (Some(p), Some(f)) => {
                            let purpose = String::from_utf8_lossy(p.data).trim().to_string();
                            if purpose != "batch" {
                                render::render_status_error(
                                    &ctx,
                                    400,
                                    &format!(
                                        "The mock stores files for purpose 'batch' only, not '{}'.",
                                        request::truncate(&purpose, 32)
                                    ),
                                )
                            } else {
                                let name = f.filename.clone().unwrap_or_else(|| "file".into());
                                match store.upload(&name, &purpose, f.data.to_vec(), now) {
                                    Ok(v) => ok_json(&ctx, &v),
                                    Err(e) => refused(&ctx, e),
                                }
                            }
                        }
                    }
                }
            }
        }
        Route::File(id) => match store.file(&id) {
            Some(v) => ok_json(&ctx, &v),
            None => not_found(&ctx, "File", &id),
        },
        Route::FileContent(id) => match store.file_content(&id) {
            Some(bytes) => Rendered {
                status: 200,
                headers: vec![
                    ("content-type", "application/octet-stream".to_string()),
                    render::id_header(&ctx),
                ],
                body: bytes.to_vec(),
            },
            None => not_found(&ctx, "File", &id),
        },
        Route::FileDelete(id) => match store.delete_file(&id) {
            Some(v) => ok_json(&ctx, &v),
            None => not_found(&ctx, "File", &id),
        },
        Route::OpenaiCreate | Route::AnthropicCreate => {
            match serde_json::from_slice::<Value>(&body) {
                Err(e) => {
                    render::render_status_error(&ctx, 400, &format!("invalid JSON body: {e}"))
                }
                Ok(v) => {
                    let made = if route == Route::OpenaiCreate {
                        store.create_openai(&v, &key, now)
                    } else {
                        store.create_anthropic(&v, body.len(), &key, now, base)
                    };
                    match made {
                        Ok(v) => ok_json(&ctx, &v),
                        Err(e) => refused(&ctx, e),
                    }
                }
            }
        }
        Route::OpenaiList => {
            let limit = query_param(query, "limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(20);
            ok_json(&ctx, &store.list_openai(limit, query_param(query, "after")))
        }
        Route::AnthropicList => {
            let limit = query_param(query, "limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(20);
            let v = store.list_anthropic(
                limit,
                query_param(query, "before_id"),
                query_param(query, "after_id"),
                base,
            );
            ok_json(&ctx, &v)
        }
        Route::OpenaiGet(id) | Route::AnthropicGet(id) => match store.get(provider, &id, base) {
            Some(v) => ok_json(&ctx, &v),
            None => not_found(&ctx, "batch", &id),
        },
        Route::OpenaiCancel(id) | Route::AnthropicCancel(id) => {
            match store.cancel(provider, &id, now, base) {
                Ok(v) => ok_json(&ctx, &v),
                Err(e) => refused(&ctx, e),
            }
        }
        Route::AnthropicResults(id) => match store.anthropic_results(&id) {
            Ok(bytes) => Rendered {
                status: 200,
                headers: vec![
                    ("content-type", "application/binary".to_string()),
                    render::id_header(&ctx),
                ],
                body: bytes,
            },
            Err(e) => refused(&ctx, e),
        },
        Route::AnthropicDelete(id) => match store.delete_anthropic(&id) {
            Ok(v) => ok_json(&ctx, &v),
            Err(e) => refused(&ctx, e),
        },
    };
    drop(store);
    wire.respond(r)
}

/// One part of a `multipart/form-data` body.
#[derive(Debug)]
struct Part<'a> {
    name: String,
    filename: Option<String>,
    data: &'a [u8],
}

/// A small `multipart/form-data` reader (RFC 7578): the parts' names,
/// file names and bytes. At most 16 parts; anything malformed is a 400.
fn parse_multipart<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, String> {
    let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err("The body must be multipart/form-data.".into());
    }
    let boundary = params
        .split(';')
        .find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| v.trim().trim_matches('"'))
        })
        .filter(|b| !b.is_empty() && b.len() <= 70)
        .ok_or("multipart/form-data without a boundary.")?;
    let delim = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut pos = find(body, &delim, 0).ok_or("No multipart boundary in the body.")? + delim.len();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        // Past the CRLF after the boundary line.
        pos = find(body, b"\r\n", pos).ok_or("Malformed multipart body.")? + 2;
        let head_end = find(body, b"\r\n\r\n", pos).ok_or("Malformed multipart part headers.")?;
        let head = String::from_utf8_lossy(&body[pos..head_end]).into_owned();
        let data_start = head_end + 4;
        let mut next_delim = b"\r\n".to_vec();
        next_delim.extend_from_slice(&delim);
        let data_end = find(body, &next_delim, data_start).ok_or("Unterminated multipart part.")?;
        let mut name = None;
        let mut filename = None;
        for line in head.split("\r\n") {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if !k.trim().eq_ignore_ascii_case("content-disposition") {
                continue;
            }
            for p in v.split(';').skip(1) {
                if let Some((pk, pv)) = p.split_once('=') {
                    let pv = pv.trim().trim_matches('"').to_string();
                    match pk.trim() {
                        "name" => name = Some(pv),
                        "filename" => filename = Some(pv),
                        _ => {}
                    }
                }
            }
        }
        parts.push(Part {
            name: name.ok_or("A multipart part without a name.")?,
            filename,
            data: &body[data_start..data_end],
        });
        if parts.len() > 16 {
            return Err("Too many multipart parts.".into());
        }
        pos = data_end + next_delim.len();
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() || needle.is_empty() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_fields_and_file() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n{\"a\":1}\n\r\n--XyZ--\r\n";
        let parts = parse_multipart("multipart/form-data; boundary=XyZ", body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "purpose");
        assert_eq!(parts[0].data, b"batch");
        assert_eq!(parts[1].filename.as_deref(), Some("in.jsonl"));
        assert_eq!(parts[1].data, b"{\"a\":1}\n");
        assert!(parse_multipart("application/json", body).is_err());
        assert!(parse_multipart("multipart/form-data; boundary=XyZ", b"--XyZ\r\nbroken").is_err());
    }

    #[test]
    fn routes() {
        assert_eq!(route(&Method::POST, "/v1/files"), Some(Route::FileUpload));
        assert_eq!(
            route(&Method::GET, "/v1/files/file-1/content"),
            Some(Route::FileContent("file-1".into()))
        );
        assert_eq!(
            route(&Method::POST, "/v1/batches/batch_1/cancel"),
            Some(Route::OpenaiCancel("batch_1".into()))
        );
        assert_eq!(
            route(&Method::GET, "/v1/messages/batches/m/results"),
            Some(Route::AnthropicResults("m".into()))
        );
        assert_eq!(
            route(&Method::GET, "/v1/messages/batches"),
            Some(Route::AnthropicList)
        );
        assert_eq!(route(&Method::POST, "/v1/messages"), None);
    }
}
