//! `GET /api/v1/events` (and `/v1/events`): the runtime's live events as server-sent events,
//! framed as the reference frames them: `id: <event id>`, `event: <name>`, `data: <payload>`.
//!
//! A client that reconnects sends `Last-Event-ID` (browsers do it by themselves; `?after=` does
//! the same for clients that cannot set headers) and receives exactly the events it missed,
//! then the live feed. When those events are no longer kept, an `events_lost` event (no id, so
//! the client's position stays where it was) comes first. `?filter=session:*,run:*` (or the
//! parameter repeated) narrows the feed by event-name globs; `events_lost` always passes.
//! A `: ping` comment every 20 s keeps proxies from closing a quiet stream.
//!
//! The feed carries every client's sessions and runs, so with several API keys only admin
//! keys may open it (`403 forbidden` for a client key).

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError};
use crate::sse::with_pings;
use crate::state::AppState;
use axum::extract::{Extension, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAliveStream, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use polpo_core::hooks::matcher::glob_matches;
use polpo_engine::events::bus::EVENTS_LOST;
use polpo_engine::{Delivery, Subscription};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

/// Most filter globs one request may give.
pub const MAX_FILTERS: usize = 32;

/// The handler.
pub async fn stream(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    if !caller.admin {
        return RestError(ApiError::new(
            ErrorCode::Forbidden,
            "the live event feed shows every client's activity: it needs an admin API key",
        ))
        .into_response();
    }
    match open(&state, &headers, &query) {
        Ok(sse) => sse.into_response(),
        Err(e) => RestError(e).into_response(),
    }
}

fn open(
    state: &AppState,
    headers: &HeaderMap,
    query: &[(String, String)],
) -> Result<Sse<KeepAliveStream<impl Stream<Item = Result<Event, Infallible>> + use<>>>, ApiError> {
    let after = resume_point(headers, query)?;
    let filters = filters(query)?;
    let (backlog, subscription) = state.runtime.events().subscribe_after(after);
    let events = feed(backlog.into(), subscription, filters);
    Ok(with_pings(events))
}

/// Where to resume: the `Last-Event-ID` header, else `?after=`. The header wins because a
/// browser reconnecting keeps the original URL (and its stale `after`) but sends a newer header.
fn resume_point(headers: &HeaderMap, query: &[(String, String)]) -> Result<Option<u64>, ApiError> {
    let header = headers.get("last-event-id").map(|v| v.to_str().unwrap_or("?").trim());
    let param = query.iter().find(|(k, _)| k == "after").map(|(_, v)| v.trim());
    match header.filter(|h| !h.is_empty()).or(param.filter(|p| !p.is_empty())) {
        None => Ok(None),
        Some(id) => id.parse().map(Some).map_err(|_| {
            ApiError::invalid(format!(
                "`{id}` is not an event id: Last-Event-ID and `after` take the numeric `id:` of an event"
            ))
        }),
    }
}

/// The name globs of every `filter` parameter, comma-separated or repeated.
fn filters(query: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    let globs: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "filter")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect();
    if globs.len() > MAX_FILTERS {
        return Err(ApiError::invalid(format!("at most {MAX_FILTERS} filter globs per request")));
    }
    Ok(globs)
}

/// The backlog, then live deliveries, as SSE events (filtered by name).
fn feed(
    backlog: VecDeque<Delivery>,
    subscription: Subscription,
    filters: Vec<String>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold((backlog, subscription, filters), |(mut backlog, mut sub, filters)| async move {
        loop {
            let delivery = match backlog.pop_front() {
                Some(d) => d,
                None => sub.recv().await?,
            };
            if let Some(event) = frame(&delivery, &filters) {
                return Some((Ok(event), (backlog, sub, filters)));
            }
        }
    })
}

/// One delivery as an SSE event; `None` when the filters exclude it.
fn frame(delivery: &Delivery, filters: &[String]) -> Option<Event> {
    match delivery {
        Delivery::Event(e) => {
            if !filters.is_empty() && !filters.iter().any(|g| glob_matches(g, &e.event)) {
                return None;
            }
            Some(Event::default().id(e.id.to_string()).event(e.event.as_str()).data(e.data.as_str()))
        }
        Delivery::Lost(lost) => {
            Some(Event::default().event(EVENTS_LOST).data(serde_json::to_string(lost).unwrap_or_default()))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::http::HeaderValue;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_header_wins_over_a_stale_after_parameter() {
        let mut h = HeaderMap::new();
        assert_eq!(resume_point(&h, &q(&[("after", "5")])).unwrap(), Some(5));
        h.insert("last-event-id", HeaderValue::from_static("9"));
        assert_eq!(resume_point(&h, &q(&[("after", "5")])).unwrap(), Some(9));
        assert_eq!(resume_point(&HeaderMap::new(), &[]).unwrap(), None);
        assert_eq!(resume_point(&HeaderMap::new(), &q(&[("after", "x")])).unwrap_err().code, "invalid_request");
    }

    #[test]
    fn filters_may_be_comma_separated_or_repeated() {
        assert_eq!(
            filters(&q(&[("filter", "session:*, run:*"), ("filter", "tool:completed")])).unwrap(),
            ["session:*", "run:*", "tool:completed"]
        );
        assert!(filters(&q(&[("filter", &vec!["a"; 40].join(","))])).is_err());
    }
}
