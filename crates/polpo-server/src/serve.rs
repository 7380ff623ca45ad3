//! Binding and running the server.
//!
//! Security by default: with no API key configured the server only ever listens on
//! 127.0.0.1, whatever host was asked for, and says so. A public bind needs a key.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

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
        notice: Some(format!("no API key configured: listening on 127.0.0.1 only, not {host}. Set POLPO_API_KEY (or settings.apiKeys) to serve other machines.")),
    }
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
