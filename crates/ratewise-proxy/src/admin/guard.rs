//! Who may call the admin listener: a request names one of its own
//! addresses in `Host` (so DNS rebinding cannot read it), comes from no
//! foreign page (`Origin`, when present, is one of the same), and carries
//! the token (`Authorization: Bearer …`), compared in constant time. A
//! cross-origin `POST /stop` a web page sends (`text/plain`, no preflight)
//! fails all three.
//!
//! Refusals say why, in JSON, and never echo what was sent.

use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// The admin listener's checks.
pub struct Guard {
    token: String,
    digest: [u8; 32],
    /// `host:port`, lowercase.
    hosts: Vec<String>,
    open_metrics: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("hosts", &self.hosts)
            .field("open_metrics", &self.open_metrics)
            .finish_non_exhaustive()
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` names none of the listener's names (421).
    Host,
    /// `Origin` is a page elsewhere (403).
    Origin,
    /// No `Authorization: Bearer` (401).
    MissingToken,
    /// A token that is not the admin's (401).
    WrongToken,
}

impl Refusal {
    /// Its answer.
    pub fn response(self) -> Response {
        let (status, kind, message) = match self {
            Refusal::Host => (
                StatusCode::MISDIRECTED_REQUEST,
                "host_not_allowed",
                "the Host header does not name this admin listener (its address, localhost, 127.0.0.1, [::1], or [admin] allowed_hosts)",
            ),
            Refusal::Origin => (
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "requests from a web page elsewhere are refused (Origin)",
            ),
            Refusal::MissingToken => (
                StatusCode::UNAUTHORIZED,
                "token_required",
                "send Authorization: Bearer <admin token> (the token file's path is in the proxy's start log)",
            ),
            Refusal::WrongToken => (
                StatusCode::UNAUTHORIZED,
                "token_wrong",
                "the bearer token is not the admin token",
            ),
        };
        // The one shape of every admin error.
        let mut r = super::error(status, kind, message);
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"ratewise-admin\""),
            );
        }
        r
    }

    /// Its word for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Host => "host_not_allowed",
            Refusal::Origin => "origin_not_allowed",
            Refusal::MissingToken => "token_required",
            Refusal::WrongToken => "token_wrong",
        }
    }
}

impl Guard {
    /// Checks for a listener bound at `bound`, with the operator's extra
    /// host names (`name` — on the listener's port — or `name:port`).
    pub fn new(token: String, bound: SocketAddr, allowed: &[String], open_metrics: bool) -> Guard {
        let port = bound.port();
        let mut hosts = vec![
            bound.to_string().to_ascii_lowercase(),
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ];
        for h in allowed {
            let h = h.to_ascii_lowercase();
            hosts.push(if split_port(&h).1.is_some() {
                h
            } else {
                format!("{h}:{port}")
            });
        }
        Guard {
            digest: Sha256::digest(token.as_bytes()).into(),
            token,
            hosts,
            open_metrics,
        }
    }

    /// The token (for an embedding's own calls and tests; never logged).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The `Authorization` value that passes (for an embedding's own
    /// calls and tests).
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// Whether a request for `path` with these headers may proceed.
    /// `/healthz` always may (it says only whether the proxy is up).
    pub fn check(
        &self,
        path: &str,
        authority: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        if path == "/healthz" {
            return Ok(());
        }
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or(authority);
        if !host.is_some_and(|h| self.allows(h, 80)) {
            return Err(Refusal::Host);
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let ok = origin
                .to_str()
                .ok()
                .and_then(origin_host)
                .is_some_and(|(h, default)| self.allows(h, default));
            if !ok {
                return Err(Refusal::Origin);
            }
        }
        if path == "/metrics" && self.open_metrics {
            return Ok(());
        }
        let given = bearer(headers).ok_or(Refusal::MissingToken)?;
        let d: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        // Constant time: every byte of the digests is compared.
        let diff = d
            .iter()
            .zip(&self.digest)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff == 0 {
            Ok(())
        } else {
            Err(Refusal::WrongToken)
        }
    }

    /// Whether `hostport` (a port of `default_port` when it has none) is
    /// one of the listener's names.
    fn allows(&self, hostport: &str, default_port: u16) -> bool {
        let hp = hostport.trim().to_ascii_lowercase();
        let full = match split_port(&hp) {
            (_, Some(_)) => hp,
            (h, None) => format!("{h}:{default_port}"),
        };
        self.hosts.contains(&full)
    }
}

/// (host, port) of `host[:port]`; an IPv6 literal is bracketed.
fn split_port(hp: &str) -> (&str, Option<u16>) {
    match hp.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            match p.parse() {
                Ok(p) => (h, Some(p)),
                Err(_) => (hp, None),
            }
        }
        _ => (hp, None),
    }
}

/// The `host[:port]` of an `Origin` and its scheme's default port;
/// `None` for `null` or anything not `http(s)://host[:port]`.
fn origin_host(origin: &str) -> Option<(&str, u16)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
        return None;
    }
    Some((rest, default))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-token";

    fn guard() -> Guard {
        Guard::new(
            TOKEN.into(),
            "127.0.0.1:8788".parse().unwrap(),
            &["ratewise.internal".into(), "proxy.lan:9000".into()],
            false,
        )
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn host_origin_and_token_are_each_checked() {
        let g = guard();
        let auth = format!("Bearer {TOKEN}");
        let ok = |host: &str| {
            g.check(
                "/status",
                None,
                &headers(&[("host", host), ("authorization", &auth)]),
            )
        };
        for host in [
            "127.0.0.1:8788",
            "localhost:8788",
            "[::1]:8788",
            "LOCALHOST:8788",
            "ratewise.internal:8788",
            "proxy.lan:9000",
        ] {
            assert_eq!(ok(host), Ok(()), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8788",
            "localhost:9999",
            "localhost",
            "127.0.0.1",
            "proxy.lan:8788",
            "[::1]",
        ] {
            assert_eq!(ok(host), Err(Refusal::Host), "{host}");
        }
        assert_eq!(
            g.check("/status", None, &headers(&[("authorization", &auth)])),
            Err(Refusal::Host)
        );
        assert_eq!(
            g.check(
                "/status",
                Some("localhost:8788"),
                &headers(&[("authorization", &auth)])
            ),
            Ok(())
        );
        let with_origin = |o: &str| {
            g.check(
                "/stop",
                None,
                &headers(&[
                    ("host", "localhost:8788"),
                    ("origin", o),
                    ("authorization", &auth),
                ]),
            )
        };
        assert_eq!(with_origin("http://localhost:8788"), Ok(()));
        for o in [
            "http://evil.example",
            "null",
            "http://localhost",
            "https://localhost:8788/x",
            "file://",
        ] {
            assert_eq!(with_origin(o), Err(Refusal::Origin), "{o}");
        }
        let h = headers(&[("host", "localhost:8788")]);
        assert_eq!(g.check("/stop", None, &h), Err(Refusal::MissingToken));
        assert_eq!(g.check("/metrics", None, &h), Err(Refusal::MissingToken));
        assert_eq!(g.check("/healthz", None, &HeaderMap::new()), Ok(()));
        for wrong in [
            "Bearer nope",
            "Basic abc",
            &format!("Bearer {TOKEN}x"),
            "Bearer",
        ] {
            let r = g.check(
                "/stop",
                None,
                &headers(&[("host", "localhost:8788"), ("authorization", wrong)]),
            );
            assert!(
                matches!(r, Err(Refusal::WrongToken | Refusal::MissingToken)),
                "{wrong}"
            );
        }
    }

    #[test]
    fn open_metrics_skips_only_the_token() {
        let g = Guard::new(TOKEN.into(), "127.0.0.1:8788".parse().unwrap(), &[], true);
        assert_eq!(
            g.check("/metrics", None, &headers(&[("host", "localhost:8788")])),
            Ok(())
        );
        assert_eq!(
            g.check("/metrics", None, &headers(&[("host", "evil.example")])),
            Err(Refusal::Host)
        );
        assert_eq!(
            g.check("/status", None, &headers(&[("host", "localhost:8788")])),
            Err(Refusal::MissingToken)
        );
    }

    #[test]
    fn a_refusal_never_echoes_the_token() {
        for r in [
            Refusal::Host,
            Refusal::Origin,
            Refusal::MissingToken,
            Refusal::WrongToken,
        ] {
            let dbg = format!("{:?}", guard());
            assert!(!dbg.contains(TOKEN));
            assert!(!r.as_str().is_empty());
        }
    }
}
