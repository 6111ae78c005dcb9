//! The mock's own control routes (`/mock/...`), for the binary and for
//! scripts that cannot call the Rust API. `GET /mock/spend` says what
//! direct answers and batch items cost (`usd_direct`, `usd_batch`,
//! `usd_total`, `batch_items`, `batches`); `GET /mock/batches` lists the
//! batches of both providers.

use super::{lock, Resp, State};
use crate::body::MockBody;
use crate::config::AccelerationConfig;
use crate::faults::FaultRule;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

pub(super) async fn control(
    state: &State,
    method: &Method,
    path: &str,
    req: Request<Incoming>,
) -> Resp {
    let body = match Limited::new(req.into_body(), state.config.max_body_bytes)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => return plain(413, "body too large"),
    };
    match (method, path) {
        (&Method::GET, "/mock/spend") => {
            super::advance_batches(state);
            let totals = lock(&state.batches).totals();
            let model = lock(&state.model);
            let v = serde_json::json!({
                "usd_direct": model.usd_direct(),
                "usd_batch": model.usd_batch(),
                "usd_total": model.spend_usd(),
                "batch_items": totals.items,
                "batches": totals.batches,
            });
            return json_resp(200, serde_json::to_vec(&v).unwrap_or_default());
        }
        (&Method::GET, "/mock/batches") => {
            super::advance_batches(state);
            let list = lock(&state.batches).summaries();
            return json_resp(200, serde_json::to_vec(&list).unwrap_or_default());
        }
        _ => {}
    }
    let mut model = lock(&state.model);
    match (method, path) {
        (&Method::GET, "/mock/records") => {
            let recs = lock(&state.records);
            json_resp(200, serde_json::to_vec(&*recs).unwrap_or_default())
        }
        (&Method::DELETE, "/mock/records") => {
            lock(&state.records).clear();
            plain(204, "")
        }
        (&Method::PUT, "/mock/faults") => match serde_json::from_slice::<Vec<FaultRule>>(&body) {
            Ok(rules) => {
                model.set_faults(rules);
                plain(204, "")
            }
            Err(e) => plain(400, &e.to_string()),
        },
        (&Method::PUT, "/mock/billing") => match serde_json::from_slice::<bool>(&body) {
            Ok(on) => {
                model.set_billing_error(on);
                plain(204, "")
            }
            Err(e) => plain(400, &e.to_string()),
        },
        (&Method::PUT, "/mock/acceleration") => {
            match serde_json::from_slice::<Option<AccelerationConfig>>(&body) {
                Ok(acc) => {
                    model.set_acceleration(acc);
                    plain(204, "")
                }
                Err(e) => plain(400, &e.to_string()),
            }
        }
        (&Method::PUT, "/mock/spend-cap") => match serde_json::from_slice::<Option<f64>>(&body) {
            Ok(cap) => {
                model.set_spend_cap(cap);
                plain(204, "")
            }
            Err(e) => plain(400, &e.to_string()),
        },
        _ => plain(404, "unknown control route"),
    }
}

fn plain(status: u16, text: &str) -> Resp {
    let mut r = Response::new(MockBody::full(text.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

fn json_resp(status: u16, body: Vec<u8>) -> Resp {
    let mut r = plain(status, "");
    *r.body_mut() = MockBody::full(body);
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}
