//! `[admin]`: where the admin listener is and who may call it.
//!
//! ```toml
//! [admin]
//! address = "127.0.0.1:8788"        # or admin = "127.0.0.1:8788" at the top
//! # token = "…"                     # at least 16 visible ASCII characters
//! # token_file = "/var/lib/ratewise/admin-token"
//! allowed_hosts = ["ratewise.internal"]   # names besides the bound address and loopback
//! allow_remote = false              # a non-loopback address needs true
//! open_metrics = false              # /metrics without the token
//! status_max_keys = 1000            # keys one /status lists
//! ```
//!
//! The token is the one given, else the one in `token_file`, else the one
//! in the default file — `<journal>.admin-token` beside the journal, else
//! `$XDG_STATE_HOME/ratewise/admin-token`, else
//! `$HOME/.local/state/ratewise/admin-token` — generated there (mode 0600)
//! at first start. With none of these (no journal, no home: an embedding),
//! it lives in memory only, for [`App::admin`](crate::App::admin).

use crate::config::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// How many keys one `/status` lists when the file does not say.
pub const DEFAULT_STATUS_MAX_KEYS: usize = 1000;

/// The `[admin]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminFile {
    pub(crate) address: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    allow_remote: Option<bool>,
    open_metrics: Option<bool>,
    status_max_keys: Option<usize>,
}

/// Where the admin token comes from.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenSource {
    /// Given in the configuration.
    Given(String),
    /// Read from this file, generated into it when it does not exist.
    File(PathBuf),
    /// Generated at start and kept in memory only.
    Memory,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never the token itself.
            TokenSource::Given(_) => f.write_str("Given(..)"),
            TokenSource::File(p) => f.debug_tuple("File").field(p).finish(),
            TokenSource::Memory => f.write_str("Memory"),
        }
    }
}

/// Who may call the admin listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// The bearer token's source.
    pub token: TokenSource,
    /// Host names (with or without a port) accepted in `Host` and
    /// `Origin` besides the bound address, `localhost`, `127.0.0.1` and
    /// `[::1]` on its port; lowercase.
    pub allowed_hosts: Vec<String>,
    /// A non-loopback address is allowed.
    pub allow_remote: bool,
    /// `/metrics` answers without the token.
    pub open_metrics: bool,
    /// Keys one `/status` lists (the others are counted).
    pub status_max_keys: usize,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            token: TokenSource::Memory,
            allowed_hosts: Vec::new(),
            allow_remote: false,
            open_metrics: false,
            status_max_keys: DEFAULT_STATUS_MAX_KEYS,
        }
    }
}

impl AdminSettings {
    /// The settings from the file; `env` finds the default token file's
    /// directory.
    pub(crate) fn from_file(
        f: AdminFile,
        address: SocketAddr,
        journal: Option<&Path>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<AdminSettings, ConfigError> {
        let token = match (f.token, f.token_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid(
                    "admin: give token or token_file, not both".into(),
                ))
            }
            (Some(t), None) => {
                check_token(&t)
                    .map_err(|why| ConfigError::Invalid(format!("admin.token: {why}")))?;
                TokenSource::Given(t)
            }
            (None, Some(p)) => TokenSource::File(p),
            (None, None) => {
                default_token_file(journal, env).map_or(TokenSource::Memory, TokenSource::File)
            }
        };
        let mut allowed_hosts = Vec::with_capacity(f.allowed_hosts.len());
        for h in f.allowed_hosts {
            let h = h.trim().to_ascii_lowercase();
            if h.is_empty() || h.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
                return Err(ConfigError::Invalid(format!(
                    "admin.allowed_hosts: {h:?} is not a host name (name or name:port)"
                )));
            }
            allowed_hosts.push(h);
        }
        if f.status_max_keys == Some(0) {
            return Err(ConfigError::Invalid(
                "admin.status_max_keys must be more than 0".into(),
            ));
        }
        let s = AdminSettings {
            token,
            allowed_hosts,
            allow_remote: f.allow_remote.unwrap_or(false),
            open_metrics: f.open_metrics.unwrap_or(false),
            status_max_keys: f.status_max_keys.unwrap_or(DEFAULT_STATUS_MAX_KEYS),
        };
        s.check_address(address).map_err(ConfigError::Invalid)?;
        Ok(s)
    }

    /// A non-loopback admin address needs `allow_remote = true`: the
    /// token then crosses the network in clear unless something in front
    /// adds TLS.
    pub fn check_address(&self, address: SocketAddr) -> Result<(), String> {
        if address.ip().is_loopback() || self.allow_remote {
            Ok(())
        } else {
            Err(format!(
                "admin address {address} is not loopback: set [admin] allow_remote = true to serve /stop and /resume beyond this machine (the token travels in clear: put TLS in front)"
            ))
        }
    }
}

/// A token a header can carry and a guess cannot find: 16 to 512 visible
/// ASCII characters.
pub(crate) fn check_token(t: &str) -> Result<(), &'static str> {
    if !(16..=512).contains(&t.len()) {
        return Err("must be 16 to 512 characters");
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII, without spaces");
    }
    Ok(())
}

/// `<journal>.admin-token`, else the user's state directory.
fn default_token_file(
    journal: Option<&Path>,
    env: &impl Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    if let Some(j) = journal {
        let mut name = j.as_os_str().to_owned();
        name.push(".admin-token");
        return Some(PathBuf::from(name));
    }
    let nonempty = |v: &str| env(v).filter(|s| !s.trim().is_empty());
    if let Some(state) = nonempty("XDG_STATE_HOME") {
        return Some(PathBuf::from(state).join("ratewise").join("admin-token"));
    }
    nonempty("HOME").map(|h| {
        PathBuf::from(h)
            .join(".local")
            .join("state")
            .join("ratewise")
            .join("admin-token")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(a: &str) -> SocketAddr {
        a.parse().unwrap()
    }

    #[test]
    fn the_token_file_defaults_beside_the_journal_then_in_the_state_directory() {
        let none = |_: &str| None;
        let s = AdminSettings::from_file(
            AdminFile::default(),
            addr("127.0.0.1:1"),
            Some(Path::new("/var/j.jsonl")),
            &none,
        )
        .unwrap();
        assert_eq!(
            s.token,
            TokenSource::File("/var/j.jsonl.admin-token".into())
        );
        let home = |v: &str| (v == "HOME").then(|| "/home/u".to_owned());
        let s = AdminSettings::from_file(AdminFile::default(), addr("127.0.0.1:1"), None, &home)
            .unwrap();
        assert_eq!(
            s.token,
            TokenSource::File("/home/u/.local/state/ratewise/admin-token".into())
        );
        let s = AdminSettings::from_file(AdminFile::default(), addr("127.0.0.1:1"), None, &none)
            .unwrap();
        assert_eq!(s.token, TokenSource::Memory);
        assert_eq!(s.status_max_keys, DEFAULT_STATUS_MAX_KEYS);
    }

    #[test]
    fn a_given_token_is_never_printed_and_must_be_long() {
        let f = AdminFile {
            token: Some("s3cret-s3cret-s3cret".into()),
            ..AdminFile::default()
        };
        let s = AdminSettings::from_file(f, addr("127.0.0.1:1"), None, &|_: &str| None).unwrap();
        assert!(!format!("{s:?}").contains("s3cret"));
        let short = AdminFile {
            token: Some("short".into()),
            ..AdminFile::default()
        };
        let e = AdminSettings::from_file(short, addr("127.0.0.1:1"), None, &|_: &str| None)
            .unwrap_err();
        assert!(e.to_string().contains("16 to 512") && !e.to_string().contains("short"));
    }

    #[test]
    fn a_remote_address_needs_allow_remote() {
        let e = AdminSettings::from_file(
            AdminFile::default(),
            addr("0.0.0.0:8788"),
            None,
            &|_: &str| None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("allow_remote"), "{e}");
        let f = AdminFile {
            allow_remote: Some(true),
            ..AdminFile::default()
        };
        assert!(AdminSettings::from_file(f, addr("0.0.0.0:8788"), None, &|_: &str| None).is_ok());
        let v6 =
            AdminSettings::from_file(AdminFile::default(), addr("[::1]:1"), None, &|_: &str| None);
        assert!(v6.is_ok());
    }
}
