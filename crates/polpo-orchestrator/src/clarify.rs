//! Whether an agent's final answer is a clarifying question instead of the work (the
//! reference's `question-detector`, inventory §5.2): a cheap look first — short, its last line
//! asks — so that most answers cost no model call; then the orchestrator model
//! (`settings.orchestratorModel`, else the task agent's) classifies it with structured output
//! `{isQuestion, question}`, since a report that ends "anything else?" is work, not a question.
//! Any failure of that call counts as "not a question": the answer is assessed like any other,
//! and a task never stalls on a classifier.

use std::sync::Arc;

use polpo_core::tasks::Task;
use serde::Deserialize;
use serde_json::json;

use crate::context::Ctx;
use crate::judge::{Call, ask, bounded, json_format, orchestrator_model};

/// Most characters of an answer that may still be a clarifying question (a long answer is
/// work, whatever its last line says); also the most of it the classifier sees.
const MAX_QUESTION_CHARS: usize = 2_000;
/// Most characters of the task description the classifier sees.
const MAX_TASK_CHARS: usize = 2_000;

/// The classifier's verdict.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Verdict {
    is_question: bool,
    question: String,
}

/// Whether the answer may be a question: short, and its last line asks.
fn looks_like_question(text: &str) -> bool {
    let text = text.trim();
    text.chars().count() <= MAX_QUESTION_CHARS
        && text.lines().rev().find(|l| !l.trim().is_empty()).is_some_and(|l| l.trim_end().ends_with('?'))
}

/// The question `answer` asks back instead of doing `task`, or `None` when it is the work.
pub(crate) async fn question_in(ctx: &Arc<Ctx>, task: &Task, answer: &str) -> Option<String> {
    if !looks_like_question(answer) {
        return None;
    }
    match classify(ctx, task, answer).await {
        Ok(Verdict { is_question: true, question }) => {
            let question = question.trim();
            Some(bounded(if question.is_empty() { answer.trim() } else { question }, MAX_QUESTION_CHARS))
        }
        Ok(_) => None,
        Err(why) => {
            tracing::warn!(task = %task.id, "question classifier failed, the answer is taken as the work: {why}");
            None
        }
    }
}

async fn classify(ctx: &Arc<Ctx>, task: &Task, answer: &str) -> Result<Verdict, String> {
    let format = json_format(
        "question_check",
        json!({
            "type": "object",
            "properties": {"isQuestion": {"type": "boolean"}, "question": {"type": "string"}},
            "required": ["isQuestion", "question"],
            "additionalProperties": false
        }),
    )?;
    let prompt = format!(
        "An agent was given the task below and ended its turn with the message below. Decide whether the message is a clarifying question the agent needs answered before it can do the work (isQuestion true, and question: the question alone), or the work itself or a report of it, which may end with a courtesy question such as \"anything else?\" (isQuestion false, question empty).\n\nTask: {}\n{}\n\nThe agent's message:\n{}",
        task.title,
        bounded(&task.description, MAX_TASK_CHARS),
        bounded(answer.trim(), MAX_QUESTION_CHARS),
    );
    let call = Call { model: orchestrator_model(ctx), prompt, format, tools: Vec::new(), max_turns: None };
    ask(ctx, task, call).await
}

#[cfg(test)]
mod tests {
    use super::looks_like_question;

    #[test]
    fn only_a_short_answer_whose_last_line_asks_goes_to_the_classifier() {
        assert!(looks_like_question("Which format should the report use?"));
        assert!(looks_like_question("I can do it two ways.\nShould I use CSV or JSON?  \n\n"));
        assert!(!looks_like_question("Done? Yes: report.txt is written."));
        assert!(!looks_like_question(""));
        assert!(!looks_like_question(&format!("{}\nAnything else?", "work ".repeat(500))), "long answers are work");
    }
}
