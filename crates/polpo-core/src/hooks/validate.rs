//! Reading and checking a hook pack file, collecting every [`Problem`] with its JSON pointer.
//!
//! The file is parsed once as JSON (for precise pointers), then each hook is read into its
//! typed shape and checked against the contract: known events and fields, one handler or one
//! gate, deterministic gate validators, bounded timeouts and limits, public `https`
//! endpoints, and no inline credentials anywhere.

use super::limits::*;
use super::pack::*;
use super::secrets::{contains_token, is_secret_name};
use crate::problem::{Problem, pointer_push};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::net::IpAddr;

/// Knobs for validation that differ between production and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ValidateOptions {
    /// Accept `http://127.0.0.1` endpoints: tests, or an operator who runs a hook endpoint on
    /// the same machine ([`LOOPBACK_ENV`]). Otherwise packs must use public https.
    pub allow_loopback_http: bool,
}

/// The operator's switch for a hook endpoint on the same machine: `POLPO_HOOKS_ALLOW_LOOPBACK=1`
/// lets `http` handlers use `http://127.0.0.1:<port>` (nothing else private, no other name).
pub const LOOPBACK_ENV: &str = "POLPO_HOOKS_ALLOW_LOOPBACK";

impl ValidateOptions {
    /// The options the value of [`LOOPBACK_ENV`] (read by the caller, since this crate reads no
    /// environment) asks for: `1` accepts `http://127.0.0.1`; anything else, public https only.
    pub fn with_loopback_switch(value: Option<&str>) -> Self {
        Self { allow_loopback_http: value == Some("1") }
    }
}

/// One hook as written in the file (before the event and id are known).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HookSpec {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    matcher: Matcher,
    #[serde(default = "default_priority")]
    priority: i32,
    #[serde(default)]
    observe: bool,
    #[serde(default)]
    handler: Option<Handler>,
    #[serde(default)]
    on_failure: OnFailure,
    #[serde(default)]
    termination_gate: Option<TerminationGate>,
}

fn default_priority() -> i32 {
    DEFAULT_PRIORITY
}

/// Parse and validate the pack `name` from the text of `file`.
pub fn parse_pack(name: &str, text: &str, file: &str, opts: &ValidateOptions) -> Result<HookPack, Vec<Problem>> {
    let at = |p: Problem| p.in_file(file);
    if text.len() > MAX_PACK_BYTES {
        return Err(vec![at(Problem::new(
            "pack_too_large",
            format!("hook packs are limited to {MAX_PACK_BYTES} bytes"),
        )
        .at(""))]);
    }
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        vec![at(Problem::new("invalid_json", format!("not valid JSON: {e}")).at_line(e.line(), e.column()))]
    })?;
    let (pack, problems) = check_document(name, &doc, opts);
    if problems.is_empty() { Ok(pack) } else { Err(problems.into_iter().map(at).collect()) }
}

/// Validate an already-parsed pack document. Always returns the hooks it could read, so
/// `hooks explain` can still show a pack that has problems.
pub fn check_document(name: &str, doc: &Value, opts: &ValidateOptions) -> (HookPack, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut pack = HookPack { name: name.to_string(), description: None, hooks: Vec::new() };
    let Some(root) = doc.as_object() else {
        problems.push(Problem::new("invalid_type", "a hook pack is a JSON object").at(""));
        return (pack, problems);
    };
    for key in root.keys() {
        if !["version", "description", "hooks"].contains(&key.as_str()) {
            problems.push(
                Problem::new("unknown_field", format!("unknown field `{key}` (expected version, description, hooks)"))
                    .at(pointer_push("", key)),
            );
        }
    }
    match root.get("version") {
        Some(Value::Number(n)) if n.as_u64() == Some(u64::from(PACK_VERSION)) => {}
        Some(v) => problems.push(
            Problem::new(
                "unsupported_version",
                format!("version {v} is not supported; this runtime reads version {PACK_VERSION}"),
            )
            .at("/version"),
        ),
        None => problems
            .push(Problem::new("missing_field", format!("`version` is required (use {PACK_VERSION})")).at("/version")),
    }
    match root.get("description") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => pack.description = Some(s.clone()),
        Some(_) => problems.push(Problem::new("invalid_type", "`description` must be a string").at("/description")),
    }
    let Some(events) = root.get("hooks") else {
        problems.push(
            Problem::new("missing_field", "`hooks` is required: an object from event name to a list of hooks")
                .at("/hooks"),
        );
        return (pack, problems);
    };
    let Some(events) = events.as_object() else {
        problems.push(
            Problem::new("invalid_type", "`hooks` must be an object from event name to a list of hooks").at("/hooks"),
        );
        return (pack, problems);
    };
    let mut ids = HashSet::new();
    for (event_name, list) in events {
        let event_ptr = pointer_push("/hooks", event_name);
        let Some(event) = HookEvent::parse(event_name) else {
            let known: Vec<&str> = HookEvent::ALL.iter().map(|e| e.as_str()).collect();
            problems.push(
                Problem::new(
                    "unknown_event",
                    format!("unknown event `{event_name}` (expected one of {})", known.join(", ")),
                )
                .at(event_ptr),
            );
            continue;
        };
        if event == HookEvent::ModelBefore {
            // Better a loud problem than a hook that silently never fires.
            problems.push(
                Problem::new("unsupported_event", "`model:before` hooks are not run by this runtime yet").at(event_ptr),
            );
            continue;
        }
        let Some(list) = list.as_array() else {
            problems
                .push(Problem::new("invalid_type", format!("`{event_name}` must be a list of hooks")).at(event_ptr));
            continue;
        };
        for (i, value) in list.iter().enumerate() {
            let ptr = pointer_push(&event_ptr, &i.to_string());
            if pack.hooks.len() >= MAX_HOOKS_PER_PACK {
                problems.push(
                    Problem::new("too_many_hooks", format!("a pack may declare at most {MAX_HOOKS_PER_PACK} hooks"))
                        .at(ptr),
                );
                return (pack, problems);
            }
            let spec: HookSpec = match HookSpec::deserialize(value) {
                Ok(s) => s,
                Err(e) => {
                    problems.push(Problem::new("invalid_hook", e.to_string()).at(ptr));
                    continue;
                }
            };
            if let Some(hook) = check_hook(name, event, i, spec, &ptr, opts, &mut problems) {
                if !ids.insert(hook.id.clone()) {
                    problems.push(
                        Problem::new("duplicate_hook_id", format!("hook id `{}` is used twice in this pack", hook.id))
                            .at(pointer_push(&ptr, "id")),
                    );
                }
                pack.hooks.push(hook);
            }
        }
    }
    pack.hooks.sort_by_key(|h| (h.event, h.declaration));
    (pack, problems)
}

fn check_hook(
    pack: &str,
    event: HookEvent,
    index: usize,
    spec: HookSpec,
    ptr: &str,
    opts: &ValidateOptions,
    problems: &mut Vec<Problem>,
) -> Option<Hook> {
    let id = match spec.id {
        Some(id) if valid_id(&id) => id,
        Some(id) => {
            problems.push(
                Problem::new("invalid_hook_id", format!("hook id `{id}` must match [A-Za-z0-9_.-]{{1,64}}"))
                    .at(pointer_push(ptr, "id")),
            );
            id
        }
        None => format!("{event}#{index}"),
    };
    check_matcher(event, &spec.matcher, ptr, problems);
    let action = match (spec.handler, spec.termination_gate) {
        (Some(h), None) => {
            check_handler(&h, &pointer_push(ptr, "handler"), opts, problems);
            HookAction::Handler(h)
        }
        (None, Some(g)) => {
            let gptr = pointer_push(ptr, "terminationGate");
            if event != HookEvent::TurnStop {
                problems.push(
                    Problem::new("gate_event", "`terminationGate` is only valid on `turn:stop` hooks").at(gptr.clone()),
                );
            }
            if spec.observe {
                problems.push(
                    Problem::new("gate_observe", "a termination gate controls termination; it cannot be observe-only")
                        .at(pointer_push(ptr, "observe")),
                );
            }
            check_gate(&g, &gptr, opts, problems);
            HookAction::Gate(g)
        }
        (Some(_), Some(_)) => {
            problems.push(
                Problem::new(
                    "handler_and_gate",
                    "a hook has either `handler` or `terminationGate` (whose `validator` is its handler), not both",
                )
                .at(ptr),
            );
            return None;
        }
        (None, None) => {
            problems.push(
                Problem::new("missing_handler", "a hook needs a `handler` (or, on `turn:stop`, a `terminationGate`)")
                    .at(ptr),
            );
            return None;
        }
    };
    Some(Hook {
        pack: pack.to_string(),
        id,
        description: spec.description,
        event,
        declaration: index,
        priority: spec.priority,
        observe: spec.observe,
        matcher: spec.matcher,
        action,
        on_failure: spec.on_failure,
    })
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn check_matcher(event: HookEvent, m: &Matcher, ptr: &str, problems: &mut Vec<Problem>) {
    let mptr = pointer_push(ptr, "matcher");
    for (field, list) in [("tools", &m.tools), ("steps", &m.steps)] {
        for (i, p) in list.iter().flatten().enumerate() {
            if p.trim().is_empty() {
                problems.push(
                    Problem::new("invalid_pattern", format!("empty `{field}` pattern never matches"))
                        .at(pointer_push(&pointer_push(&mptr, field), &i.to_string())),
                );
            }
        }
    }
    if m.tools.is_some() && !event.is_tool_event() {
        problems.push(
            Problem::new("matcher_not_applicable", format!("a `tools` matcher has no meaning on `{event}`; remove it"))
                .at(pointer_push(&mptr, "tools")),
        );
    }
    if m.steps.is_some() && m.modes.as_ref().is_some_and(|modes| !modes.contains(&ExecutionMode::Loop)) {
        problems.push(
            Problem::new(
                "matcher_never_matches",
                "a `steps` matcher only matches in `loop` mode, which `modes` excludes",
            )
            .at(mptr),
        );
    }
}

fn check_timeout(t: Option<u64>, max: u64, ptr: &str, problems: &mut Vec<Problem>) {
    if let Some(t) = t
        && !(1..=max).contains(&t)
    {
        problems.push(
            Problem::new("timeout_out_of_range", format!("`timeoutMs` must be between 1 and {max}"))
                .at(pointer_push(ptr, "timeoutMs")),
        );
    }
}

fn check_handler(h: &Handler, ptr: &str, opts: &ValidateOptions, problems: &mut Vec<Problem>) {
    check_timeout(h.timeout_ms(), MAX_TIMEOUT_MS, ptr, problems);
    let secret = |field: &str, what: &str| {
        Problem::new(
            "inline_secret",
            format!("{what} looks like a credential; authenticate through a project Connection instead"),
        )
        .at(pointer_push(ptr, field))
    };
    match h {
        Handler::Command { command, env, .. } => {
            if command.trim().is_empty() || command.len() > MAX_COMMAND_BYTES {
                problems.push(
                    Problem::new(
                        "invalid_command",
                        format!("`command` must be non-empty and at most {MAX_COMMAND_BYTES} bytes"),
                    )
                    .at(pointer_push(ptr, "command")),
                );
            }
            if contains_token(command) {
                problems.push(secret("command", "the command line"));
            }
            for (k, v) in env {
                if is_secret_name(k) || contains_token(v) {
                    problems.push(
                        Problem::new(
                            "inline_secret",
                            format!(
                                "environment variable `{k}` looks like a secret; hooks may not carry secret env vars"
                            ),
                        )
                        .at(pointer_push(&pointer_push(ptr, "env"), k)),
                    );
                }
            }
        }
        Handler::Http { url, headers, .. } => {
            if let Err(p) = check_url(url, opts) {
                problems.push(p.at(pointer_push(ptr, "url")));
            }
            for (k, v) in headers {
                if is_secret_name(k) || contains_token(v) {
                    problems.push(
                        Problem::new(
                            "inline_secret",
                            format!("header `{k}` carries credentials; use `connection` to authenticate"),
                        )
                        .at(pointer_push(&pointer_push(ptr, "headers"), k)),
                    );
                }
            }
        }
        Handler::Tool { tool, input, .. } | Handler::McpTool { tool, input, .. } => {
            if tool.trim().is_empty() {
                problems.push(Problem::new("missing_field", "`tool` must name a tool").at(pointer_push(ptr, "tool")));
            }
            check_static_input(input, &pointer_push(ptr, "input"), problems);
        }
        Handler::Prompt { prompt, .. } => {
            if prompt.trim().is_empty() || prompt.len() > MAX_PROMPT_BYTES {
                problems.push(
                    Problem::new(
                        "invalid_prompt",
                        format!("`prompt` must be non-empty and at most {MAX_PROMPT_BYTES} bytes"),
                    )
                    .at(pointer_push(ptr, "prompt")),
                );
            }
        }
        Handler::Verifier { max_turns, .. } => {
            if !(1..=MAX_VERIFIER_TURNS).contains(max_turns) {
                problems.push(
                    Problem::new(
                        "limit_out_of_range",
                        format!("`maxTurns` must be between 1 and {MAX_VERIFIER_TURNS}"),
                    )
                    .at(pointer_push(ptr, "maxTurns")),
                );
            }
        }
    }
}

/// Fixed tool inputs end up in traces: no secrets there either.
fn check_static_input(input: &Map<String, Value>, ptr: &str, problems: &mut Vec<Problem>) {
    for (k, v) in input {
        let here = pointer_push(ptr, k);
        if is_secret_name(k) || v.as_str().is_some_and(contains_token) {
            problems.push(Problem::new("inline_secret", format!("input field `{k}` looks like a credential")).at(here));
        } else if let Value::Object(inner) = v {
            check_static_input(inner, &here, problems);
        }
    }
}

fn check_gate(g: &TerminationGate, ptr: &str, opts: &ValidateOptions, problems: &mut Vec<Problem>) {
    let vptr = pointer_push(ptr, "validator");
    if !g.validator.is_deterministic() {
        problems.push(
            Problem::new(
                "gate_validator_nondeterministic",
                format!("a termination gate validator must be a deterministic command, http, tool or mcp_tool handler, not `{}`", g.validator.kind()),
            )
            .at(pointer_push(&vptr, "type")),
        );
    }
    check_handler(&g.validator, &vptr, opts, problems);
    if !(1..=MAX_GATE_CYCLES).contains(&g.max_cycles) {
        problems.push(
            Problem::new("gate_limit_out_of_range", format!("`maxCycles` must be between 1 and {MAX_GATE_CYCLES}"))
                .at(pointer_push(ptr, "maxCycles")),
        );
    }
    if !(1..=MAX_GATE_DURATION_MS).contains(&g.max_duration_ms) {
        problems.push(
            Problem::new(
                "gate_limit_out_of_range",
                format!("`maxDurationMs` must be between 1 and {MAX_GATE_DURATION_MS} (one hour)"),
            )
            .at(pointer_push(ptr, "maxDurationMs")),
        );
    }
    if let Some(t) = g.max_tokens
        && !(1..=MAX_GATE_TOKENS).contains(&t)
    {
        problems.push(
            Problem::new("gate_limit_out_of_range", format!("`maxTokens` must be between 1 and {MAX_GATE_TOKENS}"))
                .at(pointer_push(ptr, "maxTokens")),
        );
    }
    if let Some(t) = g.validator.timeout_ms()
        && t > g.max_duration_ms
    {
        problems.push(
            Problem::new("timeout_out_of_range", "the validator's `timeoutMs` exceeds the gate's `maxDurationMs`")
                .at(pointer_push(&vptr, "timeoutMs")),
        );
    }
}

/// Only public `https` endpoints (or, with the test allowance, `http://127.0.0.1`), with no
/// credentials in the userinfo or query string. Schedules' webhooks are held to the same rule.
#[allow(clippy::result_large_err)] // a Problem is the value the caller collects, never propagated far
pub(crate) fn check_url(url: &str, opts: &ValidateOptions) -> Result<(), Problem> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Problem::new("invalid_url", format!("`{}` is not an absolute URL", truncate(url))))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(Problem::new("inline_secret", "credentials in the URL are not allowed; use `connection`"));
    }
    if let Some((_, query)) = tail.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        if let Some(key) =
            query.split('&').map(|kv| kv.split('=').next().unwrap_or_default()).find(|k| is_secret_name(k))
        {
            return Err(Problem::new(
                "inline_secret",
                format!("query parameter `{key}` carries credentials; use `connection`"),
            ));
        }
    }
    let host = host_of(authority);
    let loopback_allowed = opts.allow_loopback_http && host == "127.0.0.1";
    if !scheme.eq_ignore_ascii_case("https") && !loopback_allowed {
        return Err(Problem::new("insecure_url", "http hooks must use a public `https://` endpoint"));
    }
    if host.is_empty() {
        return Err(Problem::new("invalid_url", "the URL has no host"));
    }
    if !loopback_allowed && is_private_host(host) {
        return Err(Problem::new("private_url", format!("`{host}` is not a public endpoint")));
    }
    Ok(())
}

/// The host of an absolute URL as [`check_url`] reads it (IPv6 without its brackets); empty
/// when it has none.
pub(crate) fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    host_of(&rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())])
}

fn host_of(authority: &str) -> &str {
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default();
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// Hosts that are never public: `localhost` names and loopback, private, link-local,
/// unspecified or unique-local IP literals. Names are re-checked after DNS by the runner.
pub fn is_private_host(host: &str) -> bool {
    let lower = host.to_ascii_lowercase();
    if lower == "localhost"
        || lower.ends_with(".localhost")
        || lower.ends_with(".local")
        || lower.ends_with(".internal")
    {
        return true;
    }
    match lower.parse::<IpAddr>() {
        Ok(ip) => is_private_ip(ip),
        Err(_) => false,
    }
}

/// Loopback, private, link-local, unspecified, CGNAT or unique-local addresses.
pub fn is_private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1]))
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| is_private_ip(IpAddr::V4(v4)))
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests;
