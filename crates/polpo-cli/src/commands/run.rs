//! `polpo run <agent> "<prompt>"`: one chat turn with an agent from the terminal.
//!
//! The answer streams to stdout as it is written; tool activity goes to stderr, so
//! `polpo run coder "…" > answer.md` captures just the answer. The turn is stored in a session
//! like any chat; `--session` continues one. `--json` prints one machine-readable object
//! instead of streaming.

use super::Global;
use anyhow::Context as _;
use polpo_core::message::Message;
use polpo_engine::meter::Meter;
use polpo_engine::runs::{Progress, RunManager, RunOptions};
use polpo_engine::{ChatInput, Failure, RunEvent};
use polpo_llm::ToolChoice;
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// Options of `polpo run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent (its directory name under `.polpo/agents/`).
    agent: String,
    /// What to ask. `-` reads the prompt from stdin.
    prompt: String,
    /// Continue this session instead of starting a new one.
    #[arg(long)]
    session: Option<String>,
    /// Restrict the agent's tools for this run (repeatable; can only narrow).
    #[arg(long = "allow-tool", value_name = "PATTERN")]
    allow_tools: Vec<String>,
    /// Tool choice for the first model call: `auto` (default), `none`, `required`, or a tool
    /// name to force (small offline models rarely pick a tool unprompted).
    #[arg(long, value_name = "auto|none|required|TOOL")]
    tool_choice: Option<String>,
    /// Print `{answer, sessionId, runId, usage, turns}` as JSON instead of streaming.
    #[arg(long)]
    json: bool,
}

/// Run one turn; exit 1 with `error: <code>: <sentence>` when it fails.
pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let prompt = if args.prompt == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the prompt from stdin")?
    } else {
        args.prompt.clone()
    };
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    rt.block_on(async {
        let runtime = polpo_assemble::open(project).await?;
        let mut input = ChatInput::new(args.agent.clone(), vec![Message::user(prompt)]);
        input.session_id = args.session.clone();
        if !args.allow_tools.is_empty() {
            input.allowed_tools = Some(args.allow_tools.clone());
        }
        if let Some(choice) = &args.tool_choice {
            input.tool_choice = tool_choice(choice);
        }
        // The same entry as every other surface: the engine decides how the turn runs (here in
        // this process, never as a durable run: nothing outlives the command).
        let runs = RunManager::new(runtime, RunOptions::from_env());
        let mut invoked = match runs.invoke(input, Meter::start()).await {
            Ok(invoked) => invoked,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        // Dropped on Ctrl-C, which cancels the model call and the tools; the run then finishes
        // as aborted.
        let mut attachment = invoked.attachment();
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let stream = !args.json;
        let finished = loop {
            tokio::select! {
                _ = &mut ctrl_c, if attachment.is_some() => attachment = None,
                progress = invoked.next() => match progress {
                    Some(Progress::Event(event, _)) if stream => print_event(&event),
                    Some(Progress::Event(..)) => {}
                    Some(Progress::Finished(finished)) => break finished.result,
                    None => break Err(Failure { code: "internal".into(), message: "the run stopped without an answer".into() }),
                },
            }
        };
        match finished {
            Ok(answer) => {
                if args.json {
                    super::print_json(&json!({
                        "answer": answer.content, "sessionId": answer.session_id, "runId": invoked.run_id(), "finishReason": answer.finish_reason,
                        "usage": answer.usage, "turns": answer.turns,
                    }))?;
                } else {
                    println!();
                    eprintln!("session {} · {} turn(s) · {} tokens in, {} out", answer.session_id, answer.turns, answer.usage.input_tokens, answer.usage.output_tokens);
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(failure) => {
                if stream {
                    println!();
                }
                eprintln!("error: {}", failure.message);
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// `--tool-choice` as the engine's choice: the three keywords, anything else a tool name (the
/// engine refuses a name outside the agent's tools before any model call).
fn tool_choice(value: &str) -> ToolChoice {
    match value {
        "auto" => ToolChoice::Auto,
        "none" => ToolChoice::None,
        "required" => ToolChoice::Required,
        name => ToolChoice::Tool(name.to_owned()),
    }
}

/// Answer text to stdout as it streams; tool activity to stderr.
fn print_event(event: &RunEvent) {
    match event {
        RunEvent::TextDelta { text } => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        RunEvent::ToolCalling { name, arguments, .. } => eprintln!("\n→ {name} {}", clip(&arguments.to_string(), 200)),
        RunEvent::ToolCompleted { name, result, is_error, .. } => {
            eprintln!(
                "{} {name}: {}",
                if *is_error { "✗" } else { "✓" },
                clip(result.lines().next().unwrap_or(""), 200)
            );
        }
        _ => {}
    }
}

/// At most `max` characters, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_choice_keywords_and_tool_names() {
        assert_eq!(tool_choice("auto"), ToolChoice::Auto);
        assert_eq!(tool_choice("none"), ToolChoice::None);
        assert_eq!(tool_choice("required"), ToolChoice::Required);
        assert_eq!(tool_choice("read"), ToolChoice::Tool("read".into()));
    }
}
