//! `polpo runs get|tail|steer|abort|reconcile`: durable runs of a running server, over its
//! HTTP API (`/v1/runs/{id}…`), so a terminal can follow, steer or stop a run that a client
//! started elsewhere.
//!
//! The server is `--url` (default `http://127.0.0.1:<settings.port or 3890>`), the API key
//! `POLPO_API_KEY`. A server error prints its stable code and message
//! (`error: run_not_found: …`) and exits 1. `tail` follows the run's journal and, when the
//! connection drops (a server restart, a hand-over), reconnects with `Last-Event-ID`, so every
//! event is printed exactly once; it exits 0 when the run completed, 2 when it paused for
//! reconciliation, 1 when it failed or was cancelled.

use super::Global;
use super::remote::{Client, ServerError};
use anyhow::Context as _;
use polpo_engine::events::JournalEvent;
use polpo_llm::{SseDecoder, SseEvent};
use polpo_store::{IdGen, RunStatus, UuidV7Ids};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Options of `polpo runs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server (default: `http://127.0.0.1:<settings.port or 3890>`). The API key, if the
    /// server needs one, comes from `POLPO_API_KEY`.
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `polpo runs` subcommands.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// The run: status, agent, session, number of events, and why it is paused (for an
    /// unconfirmed write: the call itself — tool, arguments, effect key, when it started).
    Get {
        /// The run id (`x-polpo-run-id`).
        id: String,
        /// Print the run as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the run's events, one per line, until it ends (exit 0 only when it completed).
    Tail {
        /// The run id.
        id: String,
        /// Start after this event sequence number (default: from the first event).
        #[arg(long, value_name = "N")]
        after: Option<u64>,
        /// Print each event as its raw JSON (`RunStreamEvent`).
        #[arg(long)]
        json: bool,
    },
    /// Add a message to a running run, delivered before its next model call.
    Steer {
        /// The run id.
        id: String,
        /// What to tell the agent.
        message: String,
        /// Deliver it when the run would otherwise finish (starts another turn).
        #[arg(long)]
        follow_up: bool,
        /// Idempotency key: sending the same id again is ignored (default: a new one).
        #[arg(long, value_name = "ID")]
        message_id: Option<String>,
    },
    /// Cancel the run's model call and tools.
    Abort {
        /// The run id.
        id: String,
        /// Why, for the run's journal.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Decide a write a crash left unconfirmed (the run is paused) and resume the run.
    Reconcile {
        /// The run id.
        id: String,
        /// What became of the call: `applied`, `not-applied` (run it now) or `skip`.
        outcome: Outcome,
        /// The effect key (default: the one the run paused on).
        #[arg(long)]
        key: Option<String>,
        /// For `applied`: the tool result the model sees.
        #[arg(long)]
        result: Option<String>,
    },
}

/// What became of an unconfirmed effect.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Outcome {
    /// It happened (`--result` is what the model sees).
    Applied,
    /// It did not happen: the run executes the call now, once, and goes on.
    #[value(alias = "not_applied")]
    NotApplied,
    /// Do not run it: the model is told it was not run.
    Skip,
}

/// How long `tail` keeps reconnecting to a server that does not answer.
const RECONNECT_FOR: Duration = Duration::from_secs(30);
/// The first wait before reconnecting; doubled up to [`RECONNECT_MAX_WAIT`].
const RECONNECT_FIRST_WAIT: Duration = Duration::from_millis(100);
const RECONNECT_MAX_WAIT: Duration = Duration::from_secs(2);
/// Silence after which a stream counts as dropped (the server pings every 20 s).
const STREAM_SILENCE: Duration = Duration::from_secs(60);

/// Run a `polpo runs` subcommand against the server.
pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let client = Client::connect(global, args.url);
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        match args.command {
            Command::Get { id, json } => get(&client, &id, json).await,
            Command::Tail { id, after, json } => tail(&client, &id, after.unwrap_or(0), json).await,
            Command::Steer { id, message, follow_up, message_id } => {
                steer(&client, &id, message, follow_up, message_id).await
            }
            Command::Abort { id, reason } => {
                client.call(Method::POST, &format!("/v1/runs/{id}/abort"), Some(json!({"reason": reason}))).await?;
                println!("run {id} is cancelling");
                Ok(ExitCode::SUCCESS)
            }
            Command::Reconcile { id, outcome, key, result } => reconcile(&client, &id, outcome, key, result).await,
        }
    })
}

async fn get(client: &Client, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let run = client.call(Method::GET, &format!("/v1/runs/{id}"), None).await?;
    if json {
        return super::print_json(&run);
    }
    for (label, key) in [
        ("run", "id"),
        ("status", "status"),
        ("agent", "agent"),
        ("session", "sessionId"),
        ("events", "lastSeq"),
        ("created", "createdAt"),
        ("updated", "updatedAt"),
        ("error", "error"),
    ] {
        match &run[key] {
            Value::Null => {}
            Value::String(s) => println!("{label:<8} {s}"),
            other => println!("{label:<8} {other}"),
        }
    }
    let pause = &run["pause"]["detail"];
    if !pause.is_null() {
        let field = |key: &str| pause[key].as_str().unwrap_or("-").to_owned();
        println!("paused   {}", run["pause"]["code"].as_str().unwrap_or_default());
        if pause.get("tool").is_some() {
            // Records from before the call was shown carry only the tool and the key.
            let arguments = pause.get("arguments").map_or_else(|| "-".to_owned(), Value::to_string);
            println!("call     {} {}", field("tool"), clip(&arguments));
            println!("effect   {}", field("key"));
            println!("started  {}", field("startedAt"));
            println!("decide   polpo runs reconcile {id} applied|not-applied|skip");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Follow the journal from `after` to the run's terminal event, reconnecting with
/// `Last-Event-ID` when the connection drops.
async fn tail(client: &Client, id: &str, mut after: u64, json: bool) -> anyhow::Result<ExitCode> {
    let mut reconnecting = false;
    let mut wait = RECONNECT_FIRST_WAIT;
    let mut unreachable_since: Option<Instant> = None;
    loop {
        let mut request = client.request(Method::GET, &format!("/v1/runs/{id}/events?after={after}"));
        if reconnecting {
            request = request.header("last-event-id", after.to_string());
        }
        // Why the connection dropped.
        let dropped: String = match client.send(request).await {
            Ok(response) => {
                let mut events = SseFrames::new(response);
                loop {
                    match events.next().await {
                        Ok(Some(frame)) if frame.event.as_deref() == Some("error") => {
                            let error: Value = serde_json::from_str(&frame.data).unwrap_or_default();
                            let text = |k: &str| error[k].as_str().unwrap_or_default().to_owned();
                            return Err(ServerError { code: text("code"), message: text("message") }.into());
                        }
                        Ok(Some(frame)) => {
                            let Some(seq) = frame.id.and_then(|id| id.trim().parse().ok()).filter(|seq| *seq > after)
                            else {
                                continue;
                            };
                            let event: Value = serde_json::from_str(&frame.data)
                                .with_context(|| format!("event {seq} of run {id} is not JSON"))?;
                            after = seq;
                            (wait, unreachable_since) = (RECONNECT_FIRST_WAIT, None);
                            println!("{}", if json { event.to_string() } else { human(&event) });
                            let Some(entry) = JournalEvent::from_frame(&event) else { continue };
                            // The server's stream goes on past `run.paused` (through the
                            // reconciliation); tail stops there unless the run was reconciled
                            // already, since only a person's decision resumes it.
                            let paused = matches!(entry, JournalEvent::Paused(_));
                            let stops = entry.is_terminal()
                                || (paused
                                    && !client
                                        .call(Method::GET, &format!("/v1/runs/{id}"), None)
                                        .await
                                        .is_ok_and(|run| run["status"] != "paused"));
                            if stops {
                                return Ok(ending(id, &entry));
                            }
                        }
                        Ok(None) => {
                            // A run can end without a final event (its process died while
                            // recording it): the stored status says so.
                            if let Ok(run) = client.call(Method::GET, &format!("/v1/runs/{id}"), None).await
                                && let Some(status) =
                                    run["status"].as_str().and_then(RunStatus::parse).filter(|s| s.is_terminal())
                                && run["lastSeq"].as_u64().unwrap_or_default() <= after
                            {
                                if status == RunStatus::Completed {
                                    return Ok(ExitCode::SUCCESS);
                                }
                                eprintln!("run {id} ended {}", status.as_str());
                                return Ok(ExitCode::FAILURE);
                            }
                            break "the server ended the stream".to_owned();
                        }
                        Err(e) => break e,
                    }
                }
            }
            Err(e) if e.code == "server_unreachable" => e.message,
            Err(e) => return Err(e.into()),
        };
        reconnecting = true;
        let since = *unreachable_since.get_or_insert_with(Instant::now);
        if since.elapsed() > RECONNECT_FOR {
            return Err(ServerError::unreachable(
                &client.url,
                format!("gave up reconnecting after {} s: {dropped}", RECONNECT_FOR.as_secs()),
            )
            .into());
        }
        if wait == RECONNECT_FIRST_WAIT {
            eprintln!("connection lost after event {after} ({dropped}); reconnecting");
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RECONNECT_MAX_WAIT);
    }
}

/// The exit code for the event a run's tail stops at, with a line on stderr when the run did
/// not complete.
fn ending(id: &str, entry: &JournalEvent) -> ExitCode {
    match entry {
        JournalEvent::Completed(_) => ExitCode::SUCCESS,
        JournalEvent::Paused(paused) => {
            let key = paused.detail["key"].as_str().unwrap_or_default();
            eprintln!(
                "run {id} paused: {}: see the call with `polpo runs get {id}`, decide it with `polpo runs reconcile {id} applied|not-applied|skip` (effect {key})",
                paused.code
            );
            ExitCode::from(2)
        }
        JournalEvent::Cancelled(_) => {
            eprintln!("run {id} was cancelled");
            ExitCode::FAILURE
        }
        JournalEvent::Failed(failure) => {
            eprintln!("run {id} failed: {}: {}", failure.code, failure.message);
            ExitCode::FAILURE
        }
        other => {
            eprintln!("run {id} ended at {:?}", other.kind());
            ExitCode::FAILURE
        }
    }
}

/// One line for a run event (a `RunStreamEvent` frame): sequence, type, and what matters in it.
fn human(frame: &Value) -> String {
    let data = &frame["data"];
    let quoted = |text: &str| clip(&Value::String(text.to_owned()).to_string());
    let detail = match JournalEvent::from_frame(frame) {
        Some(JournalEvent::TextDelta(t) | JournalEvent::ReasoningDelta(t)) => quoted(&t.text),
        Some(JournalEvent::ToolStarted(t)) => format!("{} {}", t.name, clip(&t.arguments.to_string())),
        Some(JournalEvent::ToolCompleted(t) | JournalEvent::ToolFailed(t)) => {
            format!("{} -> {}", t.name, quoted(&t.result))
        }
        Some(JournalEvent::Completed(answer)) => quoted(answer.content.as_deref().unwrap_or_default()),
        Some(JournalEvent::Failed(failure)) => format!("{}: {}", failure.code, failure.message),
        Some(JournalEvent::Paused(paused)) => {
            format!("{} {}", paused.code, paused.detail["key"].as_str().unwrap_or_default())
        }
        _ if data.as_object().is_none_or(serde_json::Map::is_empty) => String::new(),
        _ => clip(&data.to_string()),
    };
    let kind = frame["type"].as_str().unwrap_or_default();
    format!("{:>4} {kind} {detail}", frame["sequence"].as_u64().unwrap_or_default()).trim_end().to_owned()
}

/// At most 200 characters of `text`, so one event stays one readable line.
fn clip(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

async fn steer(
    client: &Client,
    id: &str,
    message: String,
    follow_up: bool,
    message_id: Option<String>,
) -> anyhow::Result<ExitCode> {
    let message_id = message_id.unwrap_or_else(|| format!("cli-{}", UuidV7Ids.next_id()));
    let mode = if follow_up { "follow_up" } else { "steer" };
    let reply = client
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/steer"),
            Some(json!({"id": message_id, "mode": mode, "content": message})),
        )
        .await?;
    if reply["duplicate"] == true {
        println!("already received: message {message_id} was sent to run {id} before");
    } else {
        println!("accepted: message {message_id} queued for run {id} ({mode})");
    }
    Ok(ExitCode::SUCCESS)
}

async fn reconcile(
    client: &Client,
    id: &str,
    outcome: Outcome,
    key: Option<String>,
    result: Option<String>,
) -> anyhow::Result<ExitCode> {
    let key = match key {
        Some(key) => key,
        None => paused_on(client, id).await?,
    };
    let outcome = match outcome {
        Outcome::Applied => "applied",
        Outcome::NotApplied => "not_applied",
        Outcome::Skip => "skip",
    };
    client
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/reconcile"),
            Some(json!({"key": key, "outcome": outcome, "result": result})),
        )
        .await?;
    let what = match outcome {
        "not_applied" => "the call runs now",
        "skip" => "the call is skipped",
        _ => "the effect is confirmed",
    };
    println!("run {id} resumed: effect {key} reconciled as {outcome}; {what}");
    Ok(ExitCode::SUCCESS)
}

/// The effect key a paused run stopped on (its `pause`, as `GET /v1/runs/{id}` shows it).
async fn paused_on(client: &Client, id: &str) -> Result<String, ServerError> {
    let run = client.call(Method::GET, &format!("/v1/runs/{id}"), None).await?;
    run["pause"]["detail"]["key"].as_str().map(str::to_owned).ok_or_else(|| ServerError {
        code: "run_not_active".into(),
        message: format!(
            "run `{id}` is {}, not paused on an effect; pass --key",
            run["status"].as_str().unwrap_or("unknown")
        ),
    })
}

/// The frames of an SSE response as they arrive (comments and pings skipped), decoded by the
/// same bounded decoder the model providers use.
struct SseFrames {
    response: reqwest::Response,
    decoder: SseDecoder,
    ready: VecDeque<SseEvent>,
}

impl SseFrames {
    fn new(response: reqwest::Response) -> Self {
        Self { response, decoder: SseDecoder::default(), ready: VecDeque::new() }
    }

    /// The next frame; `None` when the server ends the stream; `Err` when the connection
    /// fails, stays silent past [`STREAM_SILENCE`] or sends a frame over the decoder's bounds.
    async fn next(&mut self) -> Result<Option<SseEvent>, String> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            let mut decoded = Vec::new();
            let chunk = match tokio::time::timeout(STREAM_SILENCE, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None)) => {
                    self.decoder.finish(&mut decoded).map_err(|e| e.to_string())?;
                    return Ok(decoded.pop());
                }
                Ok(Err(e)) => return Err(format!("the connection failed: {e}")),
                Err(_) => return Err(format!("nothing received for {} s", STREAM_SILENCE.as_secs())),
            };
            self.decoder.push(&chunk, &mut decoded).map_err(|e| e.to_string())?;
            self.ready.extend(decoded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line_with_its_sequence_and_what_matters() {
        let delta = json!({"sequence": 7, "type": "output.text.delta", "data": {"text": "Hello\nworld"}});
        assert_eq!(human(&delta), r#"   7 output.text.delta "Hello\nworld""#);
        let tool = json!({"sequence": 12, "type": "tool.started", "data": {"id": "c1", "name": "bash", "arguments": {"command": "ls"}}});
        assert_eq!(human(&tool), r#"  12 tool.started bash {"command":"ls"}"#);
        assert_eq!(human(&json!({"sequence": 1, "type": "run.cancelled", "data": {}})), "   1 run.cancelled");
        let long = "x".repeat(500);
        assert_eq!(
            human(&json!({"sequence": 2, "type": "run.completed", "data": {"content": long}})).chars().count(),
            4 + 1 + 13 + 1 + 200 + 1
        );
    }
}
