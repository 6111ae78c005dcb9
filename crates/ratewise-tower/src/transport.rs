//! Telling "never sent" from "sent, no answer" for errors of real clients.
//!
//! A failure before the request left (connection refused, DNS, TLS) is
//! safe to retry. A failure after it may have been written (connection
//! reset, a timeout waiting for the status) may have been generated and
//! billed: it is `outcome_unknown`. Anything this module does not
//! recognise counts as sent (the safe side: no silent duplicate).

use ratewise_core::classify::TransportFailure;
use std::error::Error as StdError;
use std::io;

/// Classifies an error of the inner service by walking its source chain.
///
/// Recognised: `std::io::Error` kinds anywhere in the chain (any inner
/// service), `tower::timeout::error::Elapsed`, and with the `hyper`
/// feature (default) `hyper_util::client::legacy::Error` (`is_connect()` →
/// never sent; a DNS failure is told by its message) and `hyper::Error`
/// (timeouts → `timeout_after_send`, anything else → `reset_after_send`).
///
/// ```
/// use ratewise_core::classify::TransportFailure;
/// use ratewise_tower::transport_failure;
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(transport_failure(&refused), TransportFailure::ConnectRefused);
/// let reset = io::Error::from(io::ErrorKind::ConnectionReset);
/// assert_eq!(transport_failure(&reset), TransportFailure::ResetAfterSend);
/// // Unknown errors are "sent, no answer".
/// let other = io::Error::other("something else");
/// assert_eq!(transport_failure(&other), TransportFailure::ResetAfterSend);
/// ```
pub fn transport_failure(err: &(dyn StdError + 'static)) -> TransportFailure {
    #[cfg_attr(not(feature = "hyper"), allow(unused_mut))]
    let mut connect = false;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    let mut depth = 0;
    while let Some(e) = cur {
        depth += 1;
        if depth > 32 {
            break;
        }
        #[cfg(feature = "hyper")]
        match hyper_failure(e, connect) {
            HyperSays::Connect => connect = true,
            HyperSays::Failure(f) => return f,
            HyperSays::Nothing => {}
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(f) = from_io(io.kind(), connect) {
                return f;
            }
        } else if e.is::<tower::timeout::error::Elapsed>() {
            return if connect {
                TransportFailure::ConnectRefused
            } else {
                TransportFailure::TimeoutAfterSend
            };
        }
        if connect && is_dns_message(e) {
            return TransportFailure::DnsFailed;
        }
        cur = e.source();
    }
    if connect {
        TransportFailure::ConnectRefused
    } else {
        TransportFailure::ResetAfterSend
    }
}

#[cfg(feature = "hyper")]
enum HyperSays {
    /// hyper-util's client failed to connect: nothing was sent.
    Connect,
    Failure(TransportFailure),
    Nothing,
}

/// What hyper's and hyper-util's own error types say about one link of
/// the chain.
#[cfg(feature = "hyper")]
fn hyper_failure(e: &(dyn StdError + 'static), connect: bool) -> HyperSays {
    if let Some(legacy) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if legacy.is_connect() {
            return HyperSays::Connect;
        }
    } else if let Some(h) = e.downcast_ref::<hyper::Error>() {
        if !connect {
            return HyperSays::Failure(if h.is_timeout() {
                TransportFailure::TimeoutAfterSend
            } else {
                TransportFailure::ResetAfterSend
            });
        }
    }
    HyperSays::Nothing
}

fn from_io(kind: io::ErrorKind, connect: bool) -> Option<TransportFailure> {
    use io::ErrorKind as K;
    match kind {
        K::ConnectionRefused
        | K::AddrNotAvailable
        | K::AddrInUse
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown => Some(TransportFailure::ConnectRefused),
        _ if connect => Some(TransportFailure::ConnectRefused),
        K::TimedOut => Some(TransportFailure::TimeoutAfterSend),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            Some(TransportFailure::ResetAfterSend)
        }
        _ => None,
    }
}

/// hyper-util's connector reports resolver failures as "dns error".
fn is_dns_message(e: &(dyn StdError + 'static)) -> bool {
    let mut text = String::new();
    use std::fmt::Write;
    let _ = write!(text, "{e}");
    text.len() < 256 && text.to_ascii_lowercase().contains("dns error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(io::Error);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl StdError for Wrap {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn io_kinds_inside_a_chain() {
        let w = Wrap(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(transport_failure(&w), TransportFailure::ConnectRefused);
        let w = Wrap(io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(transport_failure(&w), TransportFailure::TimeoutAfterSend);
        let w = Wrap(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(transport_failure(&w), TransportFailure::ResetAfterSend);
    }

    #[test]
    fn tower_timeout_is_sent_no_answer() {
        let e = tower::timeout::error::Elapsed::new();
        assert_eq!(transport_failure(&e), TransportFailure::TimeoutAfterSend);
    }

    #[tokio::test]
    async fn legacy_client_connect_refused_is_never_sent() {
        use bytes::Bytes;
        use http_body_util::Empty;
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;
        // Bind then drop: nothing listens on the port.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let err = client
            .get(format!("http://127.0.0.1:{port}/").parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(transport_failure(&err), TransportFailure::ConnectRefused);
    }
}
