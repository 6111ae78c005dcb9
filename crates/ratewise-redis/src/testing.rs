//! A Redis server for tests (feature `testing`): `RATEWISE_REDIS_URL`
//! when set (what `.ci/run` starts), else a `redis-server` of the test's
//! own on a free loopback port. Without one the test fails: a test that
//! needs Redis is marked `#[ignore = "needs redis-server"]`, so a machine
//! without it shows the test as ignored in cargo's own summary, and
//! `.ci/run` runs it with `--include-ignored` (DESIGN principle 16: a skip
//! is not a pass).
//!
//! ```no_run
//! #[tokio::test]
//! #[ignore = "needs redis-server"]
//! async fn shares_a_limit() {
//!     let (url, _server) = ratewise_redis::testing::redis();
//!     # let _ = url;
//! }
//! ```

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` this test started; killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Server {
    /// A new server on a free loopback port.
    ///
    /// # Panics
    ///
    /// Where `redis-server` cannot be started or does not listen.
    pub fn start() -> Server {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        Self::start_on(port)
    }

    /// A new server on `port` (a restart of a killed one).
    ///
    /// # Panics
    ///
    /// Where `redis-server` cannot be started or does not listen.
    pub fn start_on(port: u16) -> Server {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = child.unwrap_or_else(|e| {
            panic!(
                "redis-server could not be started: {e} (install redis-server, \
                 or set RATEWISE_REDIS_URL; tests that need it are #[ignore]d)"
            )
        });
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let started = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Server {
            child: Some(child),
            port,
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills it at once (SIGKILL): its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis to share: CI's (`RATEWISE_REDIS_URL`) or one of our own. The
/// server, when ours, must be kept alive by the caller.
///
/// # Panics
///
/// Where neither is to be had (see [`Server::start`]).
pub fn redis() -> (String, Option<Server>) {
    if let Ok(url) = std::env::var("RATEWISE_REDIS_URL") {
        return (url, None);
    }
    let s = Server::start();
    (s.url(), Some(s))
}

/// A prefix no other test uses, for tests sharing one Redis.
pub fn prefix() -> String {
    format!("ratewise-test-{:016x}", fastrand::u64(..))
}

/// A TCP forwarder in front of a server that a test can cut and restore:
/// one process cut off from Redis while the others still reach it.
pub struct Cuttable {
    /// Where to connect instead of the server.
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Cuttable {
    /// Forwards a loopback port to `target` (must run in a tokio runtime).
    pub async fn start(target: u16) -> Cuttable {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("bound").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> =
            Default::default();
        let (c, l) = (cut.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue;
                }
                let link = tokio::spawn(async move {
                    if let Ok(mut up) =
                        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                l.lock().unwrap_or_else(|e| e.into_inner()).push(link);
            }
        });
        Cuttable { port, cut, links }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Drops every connection through it and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for link in self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            link.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
