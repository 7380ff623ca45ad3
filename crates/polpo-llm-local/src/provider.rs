//! `LocalProvider`: the `local/<model>` provider, a [`ModelProvider`] backed by llama.cpp.
//!
//! Each call finds the weights (explicit path, `POLPO_LOCAL_MODEL`, then the cache), loads them
//! once per process, and generates on a blocking thread that streams events through a channel.
//! Dropping the stream closes the channel, and generation stops at the next token. A model that
//! answers a tool result by making the same call again is asked once more, without tools, to
//! answer instead (see `Retry`).

use crate::install;
use polpo_llm::{LlmError, ModelProvider, ModelRequest, ModelStream};
use std::path::PathBuf;

/// Default context window: enough for a system prompt with a few tool schemas and a short
/// conversation, small enough that the KV cache stays cheap on a laptop.
pub const DEFAULT_CONTEXT_SIZE: u32 = 4096;

/// Default output cap when the request sets none: a small model that loops should stop soon.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 512;

/// Where the provider finds weights and how big a generation may get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSettings {
    /// Folder of installed models (see [`install::default_cache_dir`]).
    pub cache_dir: PathBuf,
    /// A GGUF to use whatever the request's model name (config key or CLI flag); wins over all.
    pub model_path: Option<PathBuf>,
    /// Context window in tokens.
    pub context_size: u32,
    /// Output cap when the request sets none; requests may ask for less, never for more.
    pub max_output_tokens: u32,
    /// CPU threads for inference.
    pub threads: usize,
}

impl LocalSettings {
    /// Defaults with models looked up in `cache_dir`, one thread per available core.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            model_path: None,
            context_size: DEFAULT_CONTEXT_SIZE,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

/// The in-process local model provider.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    settings: LocalSettings,
}

impl LocalProvider {
    /// A provider with these settings; nothing is loaded until the first call.
    pub fn new(settings: LocalSettings) -> Self {
        Self { settings }
    }

    /// The settings this provider runs with.
    pub fn settings(&self) -> &LocalSettings {
        &self.settings
    }

    /// True when this binary can run models (built with the `llama` feature).
    pub fn is_supported() -> bool {
        cfg!(feature = "llama")
    }
}

#[async_trait::async_trait]
impl ModelProvider for LocalProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError> {
        let path = install::locate(self.settings.model_path.as_deref(), &request.model, &self.settings.cache_dir)?;
        run::start(&self.settings, path, request).await
    }
}

#[cfg(not(feature = "llama"))]
mod run {
    use super::*;
    use crate::error::LocalModelError;

    pub async fn start(_: &LocalSettings, _: PathBuf, _: ModelRequest) -> Result<ModelStream, LlmError> {
        Err(LocalModelError::Unsupported.into())
    }
}

#[cfg(feature = "llama")]
mod run {
    use super::*;
    use crate::engine::{self, Job, LoadedModel, Stop};
    use crate::framing::{self, Piece, Splitter};
    use crate::grammar::{Constraint, JsonAnswer, ToolConstraint};
    use crate::prompt::{self, ToolResults};
    use polpo_core::message::{FinishReason, ToolCall, Usage};
    use polpo_core::tool::ToolSpec;
    use polpo_llm::{LlmErrorKind, ModelEvent, ToolChoice};
    use std::sync::Arc;
    use tokio::sync::mpsc;

    type Sender = mpsc::Sender<Result<ModelEvent, LlmError>>;

    /// Events buffered between the decoding thread and the consumer.
    const CHANNEL_CAPACITY: usize = 64;

    pub async fn start(
        settings: &LocalSettings,
        path: PathBuf,
        request: ModelRequest,
    ) -> Result<ModelStream, LlmError> {
        let model = tokio::task::spawn_blocking(move || engine::load(&path)).await.map_err(joined)??;
        let results = model.tool_results();
        let job = job(settings, &request, results);
        let retry = retry(settings, &request, results);
        let (tx, mut rx) = mpsc::channel(CHANNEL_CAPACITY);
        tokio::task::spawn_blocking(move || generate(&model, &job, retry.as_ref(), &tx));
        Ok(Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx))))
    }

    fn joined(e: tokio::task::JoinError) -> LlmError {
        LlmError::new(LlmErrorKind::ProviderUnavailable, format!("local model loader stopped: {e}"))
    }

    fn job(settings: &LocalSettings, request: &ModelRequest, results: ToolResults) -> Job {
        let tools = prompt::offered_tools(request);
        let answer = request.response_format.as_ref().and_then(JsonAnswer::from_response_format);
        let grammar = if !tools.is_empty() {
            Some(Constraint::Tools(ToolConstraint {
                tools: tools.into_iter().cloned().collect(),
                allow_text: matches!(request.tool_choice, ToolChoice::Auto),
            }))
        } else if let Some(answer) = answer {
            // A structured answer: decoded under its schema's grammar, so it parses.
            Some(Constraint::Json(answer))
        } else if prompt::has_tool_history(request) && request.response_format.is_none() {
            // No tool this turn, but earlier calls in view: a small model would write another.
            Some(Constraint::Tools(ToolConstraint::text_only()))
        } else {
            None
        };
        Job {
            turns: prompt::turns(request, results),
            grammar,
            context_size: settings.context_size,
            max_tokens: request
                .max_output_tokens
                .map_or(settings.max_output_tokens, |n| n.min(settings.max_output_tokens)),
            threads: settings.threads,
            temperature: request.temperature,
        }
    }

    /// A second chance for a turn that may loop: a small model often answers a tool result by
    /// making the very same call again, and greedy decoding would repeat that every turn until
    /// the agent runs out of turns. Such a repeat is not sent; the model is asked once more,
    /// with no tool offered, to answer from the result it has.
    struct Retry {
        /// The calls whose results end the conversation.
        answered: Vec<ToolCall>,
        /// The same request with tool choice `none`.
        answer: Job,
    }

    /// Only when the model may choose (`auto`) and the conversation ends with tool results.
    fn retry(settings: &LocalSettings, request: &ModelRequest, results: ToolResults) -> Option<Retry> {
        let answered = prompt::just_answered(request);
        if answered.is_empty() || request.tool_choice != ToolChoice::Auto {
            return None;
        }
        let answer = ModelRequest { tool_choice: ToolChoice::None, ..request.clone() };
        Some(Retry { answered: answered.to_vec(), answer: job(settings, &answer, results) })
    }

    /// Runs on a blocking thread: decode (again without tools if the model repeated a call it was
    /// just answered), send events until done or dropped, then usage and the finish reason.
    fn generate(model: &Arc<LoadedModel>, job: &Job, retry: Option<&Retry>, tx: &Sender) {
        let mut usage = Usage::default();
        let answered = retry.map_or(&[][..], |r| r.answered.as_slice());
        let mut pass = decode(model, job, answered, tx, &mut usage);
        if let (Pass::Repeated, Some(retry)) = (&pass, retry) {
            tracing::debug!("the local model repeated a call it was just answered; asking it to answer");
            pass = decode(model, &retry.answer, &[], tx, &mut usage);
        }
        let Pass::Done { stop, calls } = pass else {
            return;
        };
        let finish = match stop {
            _ if calls > 0 => FinishReason::ToolCalls,
            Stop::Limit => FinishReason::Length,
            Stop::EndOfTurn | Stop::Cancelled => FinishReason::Stop,
        };
        let _ = tx
            .blocking_send(Ok(ModelEvent::Usage(usage)))
            .and_then(|()| tx.blocking_send(Ok(ModelEvent::Finish(finish))));
    }

    /// How one decoding pass ended.
    enum Pass {
        /// Generation ended and its events were sent, `calls` of them tool calls.
        Done { stop: Stop, calls: usize },
        /// The output was a call repeating one in `answered`; nothing was sent.
        Repeated,
        /// The consumer went away, or the error was sent.
        Over,
    }

    /// One generation: split text from calls and send them, adding its tokens to `usage`.
    fn decode(model: &Arc<LoadedModel>, job: &Job, answered: &[ToolCall], tx: &Sender, usage: &mut Usage) -> Pass {
        let mut splitter = Splitter::default();
        let mut out = Outlet {
            tx,
            offered: job.grammar.as_ref().map_or(&[], Constraint::tools),
            answered,
            sent: false,
            calls: 0,
            repeated: false,
        };
        // A structured answer is all text: its opening `{` is not a bare call.
        let json = job.grammar.as_ref().is_some_and(Constraint::is_json);
        let result = model.generate(job, &mut |text| {
            if json {
                out.send(Piece::Text(text.to_owned()))
            } else {
                splitter.push(text).into_iter().all(|p| out.send(p))
            }
        });
        let stats = match result {
            Ok(stats) => stats,
            Err(e) => {
                let _ = tx.blocking_send(Err(e.into()));
                return Pass::Over;
            }
        };
        usage.input_tokens += stats.prompt_tokens as u64;
        usage.output_tokens += stats.completion_tokens as u64;
        if stats.stop != Stop::Cancelled
            && let Some(piece) = splitter.finish()
        {
            out.send(piece);
        }
        match (out.repeated, stats.stop) {
            (true, _) => Pass::Repeated,
            (false, Stop::Cancelled) => Pass::Over,
            (false, stop) => Pass::Done { stop, calls: out.calls },
        }
    }

    /// Where a pass's pieces go: the consumer, unless the first thing out is a repeated call.
    struct Outlet<'a> {
        tx: &'a Sender,
        /// The tools of this pass: a Markdown JSON block is a call only if it names one.
        offered: &'a [ToolSpec],
        answered: &'a [ToolCall],
        sent: bool,
        calls: usize,
        repeated: bool,
    }

    impl Outlet<'_> {
        /// Send one piece as events; false when generation should stop (consumer gone, or a
        /// repeated call held back).
        fn send(&mut self, piece: Piece) -> bool {
            let call = match piece {
                Piece::Text(text) => Err(text),
                Piece::Call(body) => framing::parse_call(&body).ok_or_else(|| framing::unparsed_call_text(&body)),
                Piece::Fenced { block, body } => {
                    framing::parse_call(&body).filter(|c| self.offered.iter().any(|t| t.name == c.name)).ok_or(block)
                }
            };
            let event = match call {
                Ok(call) if !self.sent && framing::repeats(&call, self.answered) => {
                    self.repeated = true;
                    return false;
                }
                Ok(call) => {
                    self.calls += 1;
                    ModelEvent::ToolCall(call)
                }
                Err(text) => ModelEvent::TextDelta(text),
            };
            self.sent = true;
            self.tx.blocking_send(Ok(event)).is_ok()
        }
    }
}

#[cfg(all(test, not(feature = "llama")))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_llama_the_provider_says_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let provider = LocalProvider::new(LocalSettings {
            model_path: Some(dir.path().join("m.gguf")),
            ..LocalSettings::new(dir.path())
        });
        let e = provider.stream(ModelRequest::default()).await.err().unwrap();
        assert_eq!(e.kind, polpo_llm::LlmErrorKind::ProviderUnavailable);
        assert!(e.message.contains("`llama` feature"), "{}", e.message);
        assert!(!LocalProvider::is_supported());
    }
}
