//! Binding and running the server.
//!
//! Security by default: with no API key configured the server only ever listens on
//! 127.0.0.1, whatever host was asked for, and says so. A public bind needs a key.
//!
//! [`run`] serves connections itself (hyper's HTTP/1 server) rather than through
//! `axum::serve`, for what a server on a shared machine needs and `axum::serve` does not
//! expose: a client must send its first byte within [`Limits::header_read_timeout`], and
//! its whole request head within as long again (a slow or silent client, or an idle keep-alive
//! connection, is closed then), a connection holds no buffers until its first byte, and beyond
//! [`Limits::max_connections`] (or [`Limits::max_per_address`] from one client address) a new
//! connection is answered `503 too_many_connections` and
//! closed instead of queueing.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Where the server listens and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// A sentence for the start-up banner when the request was narrowed.
    pub notice: Option<String>,
}

/// The address to bind for `host:port`: the host as asked when keys exist, else loopback.
pub fn bind_address(host: IpAddr, port: u16, has_keys: bool) -> Bind {
    if has_keys || host.is_loopback() {
        return Bind { addr: SocketAddr::new(host, port), notice: None };
    }
    Bind {
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        notice: Some(format!(
            "no API key configured: listening on 127.0.0.1 only, not {host}. Set POLPO_API_KEY (or settings.apiKeys) to serve other machines."
        )),
    }
}

/// Environment variable overriding [`DEFAULT_MAX_CONNECTIONS`] and `settings.maxConnections`.
pub const MAX_CONNECTIONS_ENV: &str = "POLPO_MAX_CONNECTIONS";
/// Connections served at once unless `POLPO_MAX_CONNECTIONS` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Time a client has to send a whole request head, and that a keep-alive connection may
/// wait idle for its next request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest read buffer of a connection: request heads fit (browsers' are a few KB), bodies
/// stream through it in pieces.
pub const MAX_BUF_BYTES: usize = 64 * 1024;
/// Refused connections being answered at once; more are closed without an answer.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// How long a refused connection may take to read its `503`.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// Connections served at once; more are refused with `503 too_many_connections`.
    pub max_connections: usize,
    /// Connections one client address (IPv6: one /64) may hold at once, so a single client
    /// cannot take every slot; beyond it, `503 too_many_connections` as well.
    pub max_per_address: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_CONNECTIONS / 4,
        }
    }
}

impl Limits {
    /// The defaults, with the cap from `POLPO_MAX_CONNECTIONS` when it is a positive number, else
    /// from `setting` (`settings.maxConnections`). A server bound to loopback only (no keys)
    /// serves one machine, whose clients all share 127.0.0.1: there the per-address share is the
    /// whole cap.
    pub fn configured(setting: Option<u32>, local_only: bool) -> Self {
        let from_env = std::env::var(MAX_CONNECTIONS_ENV).ok().and_then(|v| v.trim().parse().ok()).filter(|n| *n > 0);
        let from_setting = setting.and_then(|n| usize::try_from(n).ok()).filter(|n| *n > 0);
        let max = from_env.or(from_setting).unwrap_or(DEFAULT_MAX_CONNECTIONS);
        Self {
            max_connections: max,
            max_per_address: if local_only { max } else { (max / 4).max(1) },
            ..Self::default()
        }
    }
}

/// Open connections per client address, so that one address cannot hold every slot.
#[derive(Default)]
struct PerAddress {
    open: std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>,
}

impl PerAddress {
    /// A slot for `peer`, or `None` when its address already holds `max`.
    fn take(self: &Arc<Self>, peer: IpAddr, max: usize) -> Option<AddressSlot> {
        let address = crate::ratelimit::address_key(peer);
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(AddressSlot { owner: self.clone(), address })
    }
}

/// One connection's share of its address; given back when the connection ends.
struct AddressSlot {
    owner: Arc<PerAddress>,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Serve `app` on `listener` until `shutdown` completes, then stop accepting and wait for the
/// open connections to finish their requests (streams end once their runs are handed over).
/// Handlers see the peer address as `ConnectInfo<SocketAddr>`.
pub async fn run(listener: TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_address = Arc::new(PerAddress::default());
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let graceful = GracefulShutdown::new();
    let memory = Arc::new(crate::memory::Release::default());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).max_buf_size(MAX_BUF_BYTES);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = per_address
            .take(peer.ip(), limits.max_per_address)
            .and_then(|mine| Some((mine, slots.clone().try_acquire_owned().ok()?)));
        let Some(slot) = slot else {
            if let Ok(permit) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(permit);
                });
            }
            continue;
        };
        let (app, builder, watcher, memory) = (app.clone(), builder.clone(), graceful.watcher(), memory.clone());
        memory.opened();
        let header_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            // A silent client costs no buffers: the connection is set up once its first byte
            // has arrived (peeked, not read: `readable()` is ready at once on a new socket),
            // and dropped when nothing came within the header timeout.
            let first_byte = tokio::time::timeout(header_timeout, stream.peek(&mut [0u8; 1])).await;
            if matches!(first_byte, Ok(Ok(n)) if n > 0) {
                let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    app.clone().oneshot(request)
                });
                // Boxed, so the task of a silent client stays small.
                let _ = Box::pin(watcher.watch(builder.serve_connection(TokioIo::new(stream), service))).await;
            }
            drop(slot);
            memory.closed();
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Answer a connection over the cap with a complete `503 too_many_connections` and close it,
/// letting the client read the answer first (closing with its request unread would reset
/// the connection and lose the answer).
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"ok":false,"error":"the server has too many open connections; retry shortly","code":"too_many_connections"}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, answer).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_keys_a_public_bind_is_narrowed_to_loopback() {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let b = bind_address(any, 3890, false);
        assert_eq!(b.addr, "127.0.0.1:3890".parse().unwrap());
        assert!(b.notice.unwrap().contains("127.0.0.1 only"));
        assert_eq!(bind_address(any, 3890, true).addr, "0.0.0.0:3890".parse().unwrap());
    }
}
