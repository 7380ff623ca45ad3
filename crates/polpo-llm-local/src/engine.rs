//! llama.cpp in-process: loading a GGUF once per path and generating text token by token.
//!
//! This module knows tokens, batches and samplers and nothing about messages or tool calls: it
//! renders turns with the model's own chat template, decodes, and hands text to a callback that
//! says whether anyone still listens.

use crate::error::LocalModelError;
use crate::grammar::{Constraint, Tags};
use crate::prompt::{ToolResults, Turn};
use crate::utf8::Utf8Stream;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Seed for sampling when a temperature is asked for; fixed so runs are repeatable.
const SEED: u32 = 0x5eed;

/// A loaded model. llama.cpp contexts must not be created concurrently from one model, and two
/// generations on a 2-core machine only slow each other down, so generations take turns.
pub struct LoadedModel {
    model: LlamaModel,
    template: LlamaChatTemplate,
    tool_results: ToolResults,
    turn: Mutex<()>,
}

/// What to generate.
pub struct Job {
    /// The conversation.
    pub turns: Vec<Turn>,
    /// Grammar constraint on the output: tool calls when tools are offered, the schema of a
    /// structured answer.
    pub grammar: Option<Constraint>,
    /// Context window in tokens.
    pub context_size: u32,
    /// Output token cap.
    pub max_tokens: u32,
    /// CPU threads.
    pub threads: usize,
    /// Sampling temperature; `None` or 0 is greedy.
    pub temperature: Option<f32>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The model ended its turn.
    EndOfTurn,
    /// The token cap or the context window was reached.
    Limit,
    /// The listener went away.
    Cancelled,
}

/// Counts and timings of one generation.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Tokens in the rendered prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Time to evaluate the prompt.
    pub prefill: Duration,
    /// Time spent generating after the prompt.
    pub decode: Duration,
    /// Why it stopped.
    pub stop: Stop,
}

fn backend() -> Result<&'static LlamaBackend, LocalModelError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|detail| LocalModelError::Inference { detail: format!("llama.cpp backend: {detail}") })
}

/// The model at `path`, loaded on first use and kept for the life of the process (one instance
/// per path, shared by every provider and request).
pub fn load(path: &Path) -> Result<Arc<LoadedModel>, LocalModelError> {
    static MODELS: OnceLock<Mutex<HashMap<PathBuf, Arc<LoadedModel>>>> = OnceLock::new();
    let failed = |detail: String| LocalModelError::LoadFailed { path: path.to_path_buf(), detail };
    let key = std::fs::canonicalize(path).map_err(|e| failed(e.to_string()))?;
    let mut models = MODELS.get_or_init(Default::default).lock().map_err(|_| failed("model cache poisoned".into()))?;
    if let Some(model) = models.get(&key) {
        return Ok(model.clone());
    }
    let model = LlamaModel::load_from_file(backend()?, &key, &LlamaModelParams::default())
        .map_err(|e| failed(format!("{e} (is it a GGUF file?)")))?;
    // The GGUF's own template when llama.cpp recognises it, else ChatML (what Qwen and SmolLM2 use).
    let template = model
        .chat_template(None)
        .ok()
        .filter(|t| model.apply_chat_template(t, &[], true).is_ok())
        .map_or_else(|| LlamaChatTemplate::new("chatml"), Ok)
        .map_err(|e| failed(e.to_string()))?;
    let tool_results = ToolResults::for_template(template.to_str().unwrap_or_default());
    let loaded = Arc::new(LoadedModel { model, template, tool_results, turn: Mutex::new(()) });
    models.insert(key, loaded.clone());
    Ok(loaded)
}

impl LoadedModel {
    /// How this model's chat template passes tool results back (see [`ToolResults`]).
    pub fn tool_results(&self) -> ToolResults {
        self.tool_results
    }

    /// Render `turns` with the chat template, ending with an open assistant turn.
    fn render(&self, turns: &[Turn]) -> Result<String, LocalModelError> {
        let messages = turns
            .iter()
            .map(|t| LlamaChatMessage::new(t.role.into(), t.content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LocalModelError::Inference { detail: format!("message text: {e}") })?;
        self.model
            .apply_chat_template(&self.template, &messages, true)
            .map_err(|e| LocalModelError::Inference { detail: format!("chat template: {e}") })
    }

    /// How this vocabulary writes the tool-call tags.
    fn tags(&self) -> Tags {
        let single = |text: &str| match self.model.vocab().tokenize(text.as_bytes(), false, true).as_slice() {
            [token] => Some(token.0),
            _ => None,
        };
        Tags::new(single("<tool_call>"), single("</tool_call>"))
    }

    /// Generate for `job`, passing decoded text to `emit` until it returns false, the model ends
    /// its turn, or a limit is reached.
    pub fn generate(&self, job: &Job, emit: &mut dyn FnMut(&str) -> bool) -> Result<Stats, LocalModelError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| LocalModelError::Inference { detail: format!("{what}: {e}") };
        let prompt = self.render(&job.turns)?;
        let _turn =
            self.turn.lock().map_err(|_| LocalModelError::Inference { detail: "model lock poisoned".into() })?;
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        if tokens.len() >= job.context_size as usize {
            return Err(LocalModelError::ContextTooLong {
                prompt_tokens: tokens.len(),
                context_size: job.context_size,
            });
        }
        let threads = i32::try_from(job.threads.max(1)).unwrap_or(1);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(job.context_size))
            .with_n_batch(job.context_size)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let mut ctx = self.model.new_context(backend()?, params).map_err(|e| fail("context", &e))?;

        let started = Instant::now();
        let mut batch = LlamaBatch::new(job.context_size as usize, 1);
        let Some(last) = tokens.len().checked_sub(1) else {
            return Err(LocalModelError::Inference { detail: "the rendered prompt is empty".into() });
        };
        for (i, token) in tokens.iter().enumerate() {
            batch.add(*token, i as i32, &[0], i == last).map_err(|e| fail("batch", &e))?;
        }
        ctx.decode(&mut batch).map_err(|e| fail("prompt", &e))?;
        let prefill = started.elapsed();

        let mut free = free_sampler(job.temperature);
        let mut constrained = match &job.grammar {
            Some(constraint) => Some(LlamaSampler::chain_simple([
                LlamaSampler::grammar(&self.model, &constraint.gbnf(&self.tags()), "root")
                    .map_err(|e| fail("grammar", &e))?,
                free_sampler(job.temperature),
            ])),
            None => None,
        };
        let vocab = self.model.vocab();
        let budget = (job.max_tokens as usize).min(job.context_size as usize - tokens.len());
        let mut text = Utf8Stream::default();
        let mut seen_text = false;
        let mut generated = 0;
        let decode_started = Instant::now();
        let stop = loop {
            if generated >= budget {
                break Stop::Limit;
            }
            // `sample` also accepts the token into the sampler (grammar included): never accept twice.
            let sampler = constrained.as_mut().unwrap_or(&mut free);
            let token = sampler.sample(&ctx, batch.n_tokens() - 1);
            if vocab.is_eog(token) {
                break Stop::EndOfTurn;
            }
            generated += 1;
            // Rendered with special tokens: Qwen's `<tool_call>` is one, and the grammar sees it too.
            let piece = text.push(&vocab.token_to_piece(token, true, None));
            if !piece.is_empty() {
                if !seen_text && job.grammar.as_ref().is_some_and(|g| g.is_free_text_start(&piece)) {
                    constrained = None;
                }
                seen_text = true;
                if !emit(&piece) {
                    break Stop::Cancelled;
                }
            }
            batch.clear();
            batch.add(token, (tokens.len() + generated - 1) as i32, &[0], true).map_err(|e| fail("batch", &e))?;
            ctx.decode(&mut batch).map_err(|e| fail("decode", &e))?;
        };
        let stats = Stats {
            prompt_tokens: tokens.len(),
            completion_tokens: generated,
            prefill,
            decode: decode_started.elapsed(),
            stop,
        };
        tracing::debug!(
            prompt_tokens = stats.prompt_tokens,
            completion_tokens = stats.completion_tokens,
            prefill_ms = stats.prefill.as_millis() as u64,
            decode_ms = stats.decode.as_millis() as u64,
            stop = ?stats.stop,
            "local generation"
        );
        Ok(stats)
    }
}

fn free_sampler(temperature: Option<f32>) -> LlamaSampler {
    match temperature {
        Some(t) if t > 0.0 => LlamaSampler::chain_simple([LlamaSampler::temp(t), LlamaSampler::dist(SEED)]),
        _ => LlamaSampler::greedy(),
    }
}
