//! Which `Host` headers a server answers: the policy the guard's host check applies,
//! chosen once when the server state is built. A local-only server (no API keys) answers local
//! names only, so a page whose DNS name is made to point at 127.0.0.1 (DNS rebinding) is
//! refused.

/// Host names a local-only server answers to.
pub const LOCAL_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
/// Environment variable listing the hosts a server with keys answers to.
pub const ALLOWED_HOSTS_ENV: &str = "POLPO_ALLOWED_HOSTS";

/// Which `Host` headers the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPolicy {
    /// [`LOCAL_HOSTS`] only, any port; a request without `Host` is refused.
    Local,
    /// Any host (a server with keys and no `POLPO_ALLOWED_HOSTS`).
    Any,
    /// These names (any port) or `name:port` entries.
    List(Vec<String>),
}

impl HostPolicy {
    /// The policy for a server with or without keys: local-only mode answers local names
    /// only; with keys, `POLPO_ALLOWED_HOSTS` when set, else any host.
    pub fn for_server(has_keys: bool) -> Self {
        if !has_keys {
            return Self::Local;
        }
        match std::env::var(ALLOWED_HOSTS_ENV) {
            Ok(list) if !list.trim().is_empty() => Self::list(&list),
            _ => Self::Any,
        }
    }

    /// A comma-separated list of names or `name:port`.
    pub fn list(list: &str) -> Self {
        Self::List(list.split(',').map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty()).collect())
    }

    /// Whether a request with this `Host` (authority) is answered.
    pub fn allows(&self, authority: Option<&str>) -> bool {
        let Some(authority) = authority.map(str::to_ascii_lowercase) else { return *self == Self::Any };
        let name = host_name(&authority);
        match self {
            Self::Local => LOCAL_HOSTS.contains(&name),
            Self::Any => true,
            Self::List(allowed) => allowed.iter().any(|a| *a == authority || a == name),
        }
    }
}

/// The name part of `host[:port]` (an IPv6 literal keeps its brackets).
fn host_name(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(authority, |end| &authority[..end + 2]),
        None => authority.split(':').next().unwrap_or(authority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_mode_answers_loopback_names_on_any_port_only() {
        let local = HostPolicy::Local;
        for ok in ["localhost", "localhost:3890", "127.0.0.1:1", "[::1]:3890", "LOCALHOST"] {
            assert!(local.allows(Some(ok)), "{ok}");
        }
        for bad in ["attacker.example:3890", "localhost.evil.example", "127.0.0.1.nip.io", "[::2]:3890"] {
            assert!(!local.allows(Some(bad)), "{bad}");
        }
        assert!(!local.allows(None), "HTTP/1.0 without Host");
        assert!(HostPolicy::Any.allows(None));
        let list = HostPolicy::list("api.example.com, other.example:8443");
        assert!(list.allows(Some("api.example.com:3890")) && list.allows(Some("other.example:8443")));
        assert!(!list.allows(Some("other.example:3890")) && !list.allows(None));
    }
}
