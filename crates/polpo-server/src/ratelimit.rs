//! Per-caller rate limits: a token bucket per caller.
//!
//! Two limits use it. Requests per API key apply when keys are configured (the server is
//! reachable from other machines); a local-only server without keys serves its one user
//! unthrottled. That limit comes from `POLPO_RATE_LIMIT_PER_MINUTE` (default 600, `0` turns it
//! off); bursts up to a tenth of a minute's budget are allowed. Failed authentications are
//! limited per client address ([`AUTH_FAILURES_PER_MINUTE`]), so guessing keys is slow.
//! The table is bounded: when it grows past [`MAX_CALLERS`] entries, full buckets (idle
//! callers) are dropped.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default requests per minute per key.
pub const DEFAULT_PER_MINUTE: u32 = 600;
/// Environment variable overriding the limit.
pub const ENV: &str = "POLPO_RATE_LIMIT_PER_MINUTE";
/// Most callers tracked at once.
pub const MAX_CALLERS: usize = 10_000;
/// Failed authentications a client address may make per minute (all at once, then one every
/// six seconds); beyond, every request from it is `429` until the budget refills.
pub const AUTH_FAILURES_PER_MINUTE: u32 = 10;

/// The limiter, keyed by `K` (a key digest, a client address).
#[derive(Debug)]
pub struct RateLimit<K = [u8; 32]> {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

impl<K: Hash + Eq> RateLimit<K> {
    /// `per_minute` requests per minute per caller, bursts of a tenth of that; `None` when
    /// `per_minute` is 0 (off).
    pub fn new(per_minute: u32) -> Option<Self> {
        Self::with_burst(per_minute, (per_minute / 10).max(1))
    }

    /// `per_minute` per caller, up to `burst` at once; `None` when `per_minute` is 0 (off).
    pub fn with_burst(per_minute: u32, burst: u32) -> Option<Self> {
        (per_minute > 0).then(|| Self {
            per_second: f64::from(per_minute) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// The limit from the environment (default [`DEFAULT_PER_MINUTE`]).
    pub fn from_env() -> Option<Self> {
        Self::new(std::env::var(ENV).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_PER_MINUTE))
    }

    /// How long until `caller` has a token again, without taking one; `None` when it has one.
    pub fn exhausted(&self, caller: &K, now: Instant) -> Option<Duration> {
        let buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, at) = buckets.get(caller)?;
        let tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        (tokens < 1.0).then(|| Duration::from_secs_f64((1.0 - tokens) / self.per_second))
    }

    /// Take one token for `caller` at `now`; `Err(wait)` says how long until one is available.
    pub fn check(&self, caller: K, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_CALLERS && !buckets.contains_key(&caller) {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, (tokens, at)| (*tokens + now.duration_since(*at).as_secs_f64() * rate) < burst);
        }
        let (tokens, at) = buckets.entry(caller).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_second))
        }
    }
}

/// The address a per-client limit counts against: IPv4 as is, IPv6 by its /64 — one host gets a
/// whole /64, so counting single IPv6 addresses would give it billions of fresh budgets.
pub fn address_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                std::net::IpAddr::V6(std::net::Ipv6Addr::from(bits))
            }
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_requests_wait_and_callers_are_separate() {
        let limit = RateLimit::<[u8; 32]>::new(60).unwrap(); // one per second, burst 6
        let t0 = Instant::now();
        for _ in 0..6 {
            assert!(limit.check([1; 32], t0).is_ok());
        }
        let wait = limit.check([1; 32], t0).unwrap_err();
        assert!(wait > Duration::from_millis(900) && wait <= Duration::from_secs(1), "{wait:?}");
        assert!(limit.check([2; 32], t0).is_ok(), "another key has its own bucket");
        assert!(limit.check([1; 32], t0 + Duration::from_secs(1)).is_ok(), "a token came back after a second");
        assert!(RateLimit::<[u8; 32]>::new(0).is_none());
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: std::net::IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: std::net::IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: std::net::IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(other));
        let mapped: std::net::IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(address_key(mapped), "10.0.0.7".parse::<std::net::IpAddr>().unwrap());
    }

    #[test]
    fn an_exhausted_caller_is_seen_without_spending_a_token() {
        let limit = RateLimit::with_burst(AUTH_FAILURES_PER_MINUTE, AUTH_FAILURES_PER_MINUTE).unwrap();
        let t0 = Instant::now();
        assert_eq!(limit.exhausted(&1u8, t0), None);
        for _ in 0..10 {
            assert!(limit.check(1u8, t0).is_ok());
        }
        let wait = limit.exhausted(&1u8, t0).unwrap();
        assert!(wait > Duration::from_secs(5) && wait <= Duration::from_secs(6), "{wait:?}");
        assert_eq!(limit.exhausted(&1u8, t0 + Duration::from_secs(6)), None);
    }
}
