//! The one reader of an upstream's base URL, for every place a person
//! writes one (`ratewise proxy --upstream`, an `[[upstream]]`'s `url`,
//! `ratewise run --upstream`, `upstream =` in its config).
//!
//! Why one reader: the callers' paths already begin with the API's
//! version (`/v1/chat/completions`, `/v1/messages`), and the SDKs'
//! documented base URLs end with it (`https://api.openai.com/v1`). A base
//! read one way by the runner and another by the proxy sent the proxy's
//! requests to `/v1/v1/chat/completions` (a 404) with no word at start.
//! Both now read `https://host`, `https://host/` and `https://host/v1` as
//! the same upstream.

use std::fmt;

/// An upstream's base URL as it was read: `http://` or `https://`, a
/// host, no query, no trailing `/` and no trailing `/v1` (the callers'
/// paths carry it). A path before that is kept
/// (`https://api.groq.com/openai`).
///
/// ```
/// use ratewise_tower::UpstreamUrl;
/// let up = UpstreamUrl::parse("https://api.openai.com/v1/").unwrap();
/// assert_eq!(up.as_str(), "https://api.openai.com");
/// assert_eq!(up.origin(), "https://api.openai.com:443");
/// assert!(UpstreamUrl::parse("ftp://example.com").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UpstreamUrl {
    base: String,
    origin: String,
}

/// Why a text is not an upstream's base URL. Each names the URL as
/// [`UpstreamUrlError::shown`] gives it: without a user, password or
/// query, which may hold a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamUrlError {
    /// Nothing was given.
    Empty,
    /// Not a URL at all.
    NotAUrl {
        /// The URL, shown without credentials.
        shown: String,
    },
    /// A scheme other than `http` or `https` (or none).
    Scheme {
        /// The URL, shown without credentials.
        shown: String,
    },
    /// No host.
    NoHost {
        /// The URL, shown without credentials.
        shown: String,
    },
    /// A query: the callers' own query is what goes upstream.
    Query {
        /// The URL, shown without credentials.
        shown: String,
    },
}

impl UpstreamUrlError {
    /// The URL as the error shows it.
    pub fn shown(&self) -> &str {
        match self {
            UpstreamUrlError::Empty => "",
            UpstreamUrlError::NotAUrl { shown }
            | UpstreamUrlError::Scheme { shown }
            | UpstreamUrlError::NoHost { shown }
            | UpstreamUrlError::Query { shown } => shown,
        }
    }
}

impl fmt::Display for UpstreamUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LIKE: &str = "like https://api.openai.com or https://api.openai.com/v1";
        match self {
            UpstreamUrlError::Empty => write!(f, "upstream: no URL given ({LIKE})"),
            UpstreamUrlError::NotAUrl { shown } => {
                write!(f, "upstream {shown:?}: not a URL ({LIKE})")
            }
            UpstreamUrlError::Scheme { shown } => write!(
                f,
                "upstream {shown:?}: not an http:// or https:// URL ({LIKE})"
            ),
            UpstreamUrlError::NoHost { shown } => {
                write!(f, "upstream {shown:?}: no host ({LIKE})")
            }
            UpstreamUrlError::Query { shown } => write!(
                f,
                "upstream {shown:?}: must not have a query (the callers' own goes upstream)"
            ),
        }
    }
}

impl std::error::Error for UpstreamUrlError {}

/// `text` without a user or password (`user:pw@`) and without a query:
/// what an error or a log may show of a URL that could not be read.
fn shown(text: &str) -> String {
    let text = text.split(['?', '#']).next().unwrap_or("");
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, text),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match scheme {
        Some(s) => format!("{s}://{host}{path}"),
        None => format!("{host}{path}"),
    }
}

impl UpstreamUrl {
    /// Reads `text` (surrounding spaces, a trailing `/` and one trailing
    /// `/v1` are dropped).
    pub fn parse(text: &str) -> Result<UpstreamUrl, UpstreamUrlError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(UpstreamUrlError::Empty);
        }
        let err_shown = || shown(trimmed);
        // The scheme first, as written: `api.openai.com` and `ftp://…`
        // are told as such, not as unreadable.
        let scheme = match trimmed.split_once("://") {
            Some((s, _)) if s.eq_ignore_ascii_case("http") => "http",
            Some((s, _)) if s.eq_ignore_ascii_case("https") => "https",
            _ => return Err(UpstreamUrlError::Scheme { shown: err_shown() }),
        };
        let mut base = trimmed.trim_end_matches('/');
        if let Some(b) = base.strip_suffix("/v1") {
            base = b.trim_end_matches('/');
        }
        if base.len() <= scheme.len() + 3 {
            return Err(UpstreamUrlError::NoHost { shown: err_shown() });
        }
        let uri: http::Uri = base
            .parse()
            .map_err(|_| UpstreamUrlError::NotAUrl { shown: err_shown() })?;
        let host = match uri.host() {
            Some(h) if !h.is_empty() => h,
            _ => return Err(UpstreamUrlError::NoHost { shown: err_shown() }),
        };
        if uri.query().is_some() {
            return Err(UpstreamUrlError::Query { shown: err_shown() });
        }
        let authority = uri.authority().map_or(host, |a| a.as_str());
        let path = uri.path().trim_end_matches('/');
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Ok(UpstreamUrl {
            base: format!("{scheme}://{authority}{path}"),
            origin: format!("{scheme}://{host}:{port}"),
        })
    }

    /// The base the callers' paths are appended to
    /// (`https://api.openai.com`, `http://10.0.0.5:8080/gateway`).
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// The base as a `String`.
    pub fn into_string(self) -> String {
        self.base
    }

    /// `scheme://host:port`, the port always said (443 and 80 when the URL
    /// gives none): what a connection is made to, and what an error about
    /// one may name. Never a user, a password, a path or a query.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

impl fmt::Display for UpstreamUrl {
    /// The base without a user or password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(&self.base))
    }
}

impl fmt::Debug for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A user and password in the URL are credentials.
        f.debug_tuple("UpstreamUrl")
            .field(&shown(&self.base))
            .finish()
    }
}

impl std::str::FromStr for UpstreamUrl {
    type Err = UpstreamUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UpstreamUrl::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_slash_and_v1_name_the_same_upstream() {
        for given in [
            "https://api.openai.com",
            "https://api.openai.com/",
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
            "  https://api.openai.com/v1  ",
        ] {
            let up = UpstreamUrl::parse(given).unwrap();
            assert_eq!(up.as_str(), "https://api.openai.com", "{given:?}");
            assert_eq!(up.origin(), "https://api.openai.com:443");
        }
        let groq = UpstreamUrl::parse("https://api.groq.com/openai/v1").unwrap();
        assert_eq!(groq.as_str(), "https://api.groq.com/openai");
        let local = UpstreamUrl::parse("HTTP://127.0.0.1:9000/v1").unwrap();
        assert_eq!(local.as_str(), "http://127.0.0.1:9000");
        assert_eq!(local.origin(), "http://127.0.0.1:9000");
        // Only one /v1, and only at the end.
        assert_eq!(
            UpstreamUrl::parse("http://h/v1/v1").unwrap().as_str(),
            "http://h/v1"
        );
        assert_eq!(
            UpstreamUrl::parse("http://h/v1beta").unwrap().as_str(),
            "http://h/v1beta"
        );
    }

    #[test]
    fn a_bad_url_is_a_typed_error_that_shows_no_credential() {
        // Each with the variants it may be (by name).
        let cases: [(&str, &[&str]); 6] = [
            ("", &["Empty"]),
            ("http://not a url", &["NotAUrl"]),
            ("ftp://x", &["Scheme"]),
            ("api.openai.com", &["Scheme"]),
            ("http:///v1", &["NoHost"]),
            ("https://u:secret@h/v1?key=AIzaSECRET", &["Query"]),
        ];
        for (given, variants) in cases {
            let e = UpstreamUrl::parse(given).unwrap_err();
            let debug = format!("{e:?}");
            assert!(
                variants.iter().any(|v| debug.starts_with(v)),
                "{given:?}: {debug}"
            );
            let text = e.to_string();
            assert!(text.starts_with("upstream"), "{text}");
            assert!(
                !text.contains("SECRET") && !text.contains("secret"),
                "{text}"
            );
        }
        let e = UpstreamUrl::parse("https://u:secret@h/v1?key=AIzaSECRET").unwrap_err();
        assert_eq!(e.shown(), "https://h/v1");
    }

    #[test]
    fn display_and_debug_show_no_user_or_password() {
        let up = UpstreamUrl::parse("https://user:pw@h:8443/base/").unwrap();
        assert_eq!(up.as_str(), "https://user:pw@h:8443/base");
        assert_eq!(up.to_string(), "https://h:8443/base");
        assert_eq!(up.origin(), "https://h:8443");
        assert!(!format!("{up:?}").contains("pw"));
    }
}
