//! Outbound HTTP with an SSRF guard.
//!
//! A model can be talked (by a web page, a file, a user) into fetching internal addresses:
//! cloud metadata at 169.254.169.254, an admin port on localhost, the office LAN. So every
//! request — and every redirect hop, which is followed here by hand — resolves the host first,
//! refuses non-public addresses, and then connects only to the addresses it checked (the
//! client is pinned to them, so a second DNS answer cannot rebind the name). Proxies from the
//! environment are ignored for the same reason.

use crate::{ToolContext, ToolError};
use reqwest::header::{AUTHORIZATION, COOKIE, HeaderMap, LOCATION, PROXY_AUTHORIZATION};
use reqwest::{Method, StatusCode, Url};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;
/// DNS resolution bound.
const DNS_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP/TLS connect bound per hop.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which private targets outbound requests may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// Any address, private ones included.
    pub allow_private: bool,
    /// Exact `host:port` authorities (as in the URL; IPv6 in brackets) exempt from the guard.
    pub private_allowlist: Vec<String>,
    /// When set, the only hosts (exact names as in the URL, case-insensitive) a request may
    /// reach, checked on every hop so a redirect cannot leave the list (`host_not_allowed`);
    /// the address checks still apply to them. `None`: any host the guard lets through.
    pub host_allowlist: Option<Vec<String>>,
}

impl NetworkPolicy {
    /// The policy a tool call runs under.
    pub fn from_context(ctx: &ToolContext) -> Self {
        Self {
            allow_private: ctx.allow_private_network,
            private_allowlist: ctx.private_network_allowlist.clone(),
            host_allowlist: None,
        }
    }

    fn exempts(&self, url: &Url) -> bool {
        self.allow_private
            || match (url.host_str(), url.port_or_known_default()) {
                (Some(host), Some(port)) => {
                    let authority = format!("{host}:{port}");
                    self.private_allowlist.iter().any(|allowed| allowed.eq_ignore_ascii_case(&authority))
                }
                _ => false,
            }
    }
}

/// One outbound request as a tool describes it.
#[derive(Debug, Clone)]
pub struct OutboundRequest {
    /// Method.
    pub method: Method,
    /// Target.
    pub url: Url,
    /// Request headers.
    pub headers: HeaderMap,
    /// Request body.
    pub body: Option<Vec<u8>>,
}

/// True for globally routable unicast addresses; false for loopback, private, shared (CGNAT),
/// link-local, unique-local, multicast, unspecified, documentation and reserved ranges, and for
/// IPv6 forms that embed such an IPv4 address (mapped, compatible, NAT64, 6to4).
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let blocked = a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224;
    !blocked
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded_v4 = || Ipv4Addr::from(((u32::from(s[6])) << 16) | u32::from(s[7]));
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
        return false;
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    if s[..6].iter().all(|&seg| seg == 0) {
        // IPv4-compatible (deprecated) ::a.b.c.d
        return is_public_v4(embedded_v4());
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&seg| seg == 0) {
        // NAT64 well-known prefix 64:ff9b::/96
        return is_public_v4(embedded_v4());
    }
    if s[0] == 0x2002 {
        // 6to4: the IPv4 address sits in segments 1 and 2.
        return is_public_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    let blocked = (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64 64:ff9b:1::/48
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo tunnels
        || (s[0] == 0x100 && s[1..4].iter().all(|&seg| seg == 0)); // discard 100::/64
    !blocked
}

/// Checks one hop's URL against the policy and returns the socket addresses the connection
/// must use: scheme http(s), host resolved, every address public (or the target exempt).
pub async fn check_url(url: &Url, policy: &NetworkPolicy) -> Result<Vec<SocketAddr>, ToolError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::new(
            "unsupported_scheme",
            format!("only http and https URLs are allowed, not {}", url.scheme()),
        ));
    }
    let port = url.port_or_known_default().ok_or_else(|| ToolError::new("invalid_url", "the URL has no port"))?;
    if let Some(hosts) = &policy.host_allowlist {
        let host = url.host_str().unwrap_or_default();
        if !hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(host)) {
            return Err(ToolError::new(
                "host_not_allowed",
                format!("refusing to connect to {host}: it is not in the host allowlist"),
            ));
        }
    }
    let addrs: Vec<SocketAddr> = match (host_ip(url), url.host_str()) {
        (Some(ip), _) => vec![SocketAddr::new(ip, port)],
        (None, Some(domain)) if !domain.is_empty() => {
            let lookup = tokio::net::lookup_host((domain, port));
            tokio::time::timeout(DNS_TIMEOUT, lookup)
                .await
                .map_err(|_| ToolError::new("dns_failed", format!("resolving {domain} timed out")))?
                .map_err(|e| ToolError::new("dns_failed", format!("cannot resolve {domain}: {e}")))?
                .collect()
        }
        _ => return Err(ToolError::new("invalid_url", "the URL has no host")),
    };
    if addrs.is_empty() {
        return Err(ToolError::new("dns_failed", "the host resolved to no address"));
    }
    if !policy.exempts(url)
        && let Some(bad) = addrs.iter().find(|addr| !is_public_ip(addr.ip()))
    {
        return Err(ToolError::new(
            "ssrf_blocked",
            format!(
                "refusing to connect to {} ({}): loopback, private and link-local addresses are not allowed",
                url.host_str().unwrap_or_default(),
                bad.ip()
            ),
        ));
    }
    Ok(addrs)
}

/// Sends `request`, following up to [`MAX_REDIRECTS`] redirects, each hop checked by
/// [`check_url`]. Returns the final (non-redirect) response with its body unread; the caller
/// bounds the body and the overall time.
pub async fn send_guarded(
    mut request: OutboundRequest,
    policy: &NetworkPolicy,
) -> Result<reqwest::Response, ToolError> {
    for _ in 0..=MAX_REDIRECTS {
        let addrs = check_url(&request.url, policy).await?;
        let client = pinned_client(&request.url, &addrs)?;
        let mut builder = client.request(request.method.clone(), request.url.clone()).headers(request.headers.clone());
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let response = builder.send().await.map_err(|e| request_error(&e))?;
        let Some(next) = redirect_target(&request.url, &response) else {
            return Ok(response);
        };
        let status = response.status();
        if status == StatusCode::SEE_OTHER
            || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND) && request.method == Method::POST)
        {
            request.method = Method::GET;
            request.body = None;
        }
        if next.origin() != request.url.origin() {
            // Credentials were meant for the first origin only.
            for name in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
                request.headers.remove(name);
            }
        }
        request.url = next;
    }
    Err(ToolError::new("too_many_redirects", format!("more than {MAX_REDIRECTS} redirects")))
}

fn redirect_target(current: &Url, response: &reqwest::Response) -> Option<Url> {
    if !response.status().is_redirection() {
        return None;
    }
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    current.join(location).ok()
}

/// The URL's host when it is an IP literal (the URL parser has already normalised forms such
/// as `2130706433` or `0x7f.1` to dotted IPv4, and IPv6 comes bracketed).
fn host_ip(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).parse().ok()
}

fn pinned_client(url: &Url, addrs: &[SocketAddr]) -> Result<reqwest::Client, ToolError> {
    install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("polpo/", env!("CARGO_PKG_VERSION")));
    if let (None, Some(domain)) = (host_ip(url), url.host_str()) {
        builder = builder.resolve_to_addrs(domain, addrs);
    }
    builder
        .build()
        .map_err(|e| ToolError::new("http_client_error", format!("cannot build HTTP client: {}", e.without_url())))
}

/// Installs the ring crypto provider for rustls once per process (reqwest is built without a
/// default provider); a provider installed earlier by someone else is kept.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A transport error as a tool error, without the URL (it may carry credentials or tokens).
pub(crate) fn request_error(err: &reqwest::Error) -> ToolError {
    let code = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect_failed"
    } else {
        "http_error"
    };
    let mut message = format!("request failed: {}", strip_url(err));
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    ToolError::new(code, message)
}

fn strip_url(err: &reqwest::Error) -> String {
    // `without_url` consumes; re-describe by kind instead of cloning the error.
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        "connection failed".to_owned()
    } else if err.is_body() || err.is_decode() {
        "invalid response body".to_owned()
    } else {
        "transport error".to_owned()
    }
}
