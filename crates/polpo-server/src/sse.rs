//! What every server-sent event stream shares (chat completions, run journals, the live
//! event feed): keep-alive pings, so proxies do not close a quiet stream.

use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::Stream;
use std::convert::Infallible;
use std::time::Duration;

/// SSE comment interval that keeps proxies from closing a quiet stream.
pub const PING_INTERVAL: Duration = Duration::from_secs(20);

/// `events` as an SSE response with a `: ping` comment every [`PING_INTERVAL`].
pub fn with_pings<S: Stream<Item = Result<Event, Infallible>> + Send + 'static>(events: S) -> Sse<KeepAliveStream<S>> {
    Sse::new(events).keep_alive(KeepAlive::new().interval(PING_INTERVAL).text("ping"))
}
