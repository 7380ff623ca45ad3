//! Closed string enums of the config files, each with the list of its spellings so the
//! schema check and serde can never disagree about what is accepted.

/// Declares a string enum, its serde spelling and `NAMES` (every spelling, in order).
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every accepted spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The spelling used in JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }
    };
}
// Loop files declare their closed enums the same way.
pub(crate) use string_enum;

string_enum! {
    /// How hard the model thinks (`reasoning` on agents and in settings).
    ReasoningLevel {
        /// No extended thinking.
        Off = "off",
        /// Minimal thinking.
        Minimal = "minimal",
        /// Low.
        Low = "low",
        /// Medium.
        Medium = "medium",
        /// High.
        High = "high",
        /// The provider's maximum.
        Xhigh = "xhigh",
    }
}

string_enum! {
    /// Where runs, sessions and tasks are kept (`settings.storage`).
    StorageKind {
        /// JSON/Markdown under `.polpo/` (the default).
        File = "file",
        /// One SQLite file under `.polpo/`.
        Sqlite = "sqlite",
        /// PostgreSQL at `DATABASE_URL` or `settings.databaseUrl`.
        Postgres = "postgres",
    }
}

string_enum! {
    /// Whether an agent run is a child process or runs inside the server.
    ExecutionMode {
        /// A child process per run (the default for tasks).
        Subprocess = "subprocess",
        /// Inside the server process.
        InProcess = "in-process",
    }
}

string_enum! {
    /// How chat completions execute (`settings.chatExecution`).
    ChatExecution {
        /// As a durable Run (the default).
        Run = "run",
        /// Inline in the request, without a Run record.
        Inline = "inline",
    }
}

string_enum! {
    /// Orchestrator log verbosity (`settings.logLevel`).
    LogLevel {
        /// Errors only.
        Quiet = "quiet",
        /// The default.
        Normal = "normal",
        /// Everything.
        Verbose = "verbose",
    }
}

string_enum! {
    /// When volatile mission agents are removed (`settings.volatileCleanup`).
    VolatileCleanup {
        /// When the mission completes.
        OnComplete = "on_complete",
        /// Only when asked.
        Manual = "manual",
    }
}

string_enum! {
    /// The wire API a custom provider speaks (`providers.<name>.api`).
    ProviderApi {
        /// OpenAI chat completions.
        OpenaiCompletions = "openai-completions",
        /// OpenAI responses.
        OpenaiResponses = "openai-responses",
        /// Anthropic messages.
        AnthropicMessages = "anthropic-messages",
    }
}

string_enum! {
    /// How tools are exposed to the model (`toolLoading.mode`).
    ToolLoadingMode {
        /// The runtime decides from the tool count.
        Auto = "auto",
        /// Every tool schema up front.
        Direct = "direct",
        /// `polpo_tool_list` / `polpo_tool_search` / `polpo_tool_load` on demand.
        Progressive = "progressive",
    }
}

string_enum! {
    /// Post-turn memory learning (`memory.learning.mode`).
    LearningMode {
        /// No learning (the default).
        Off = "off",
        /// Reviewable candidates only.
        Suggest = "suggest",
        /// Applies candidates the deterministic policy accepts.
        Automatic = "automatic",
    }
}

string_enum! {
    /// Where learning may happen (`memory.learning.surfaces`).
    LearningSurface {
        /// Direct chat.
        Chat = "chat",
        /// Channel turns.
        Channel = "channel",
    }
}

string_enum! {
    /// Kinds of typed memory items.
    MemoryKind {
        /// A fact.
        Fact = "fact",
        /// A preference.
        Preference = "preference",
        /// Something left open.
        OpenThread = "open_thread",
        /// A style note.
        Style = "style",
        /// A failure to avoid.
        FailurePattern = "failure_pattern",
        /// An episode worth repeating.
        SuccessfulEpisode = "successful_episode",
        /// A procedural hint.
        ProcedureHint = "procedure_hint",
    }
}

string_enum! {
    /// Priority of a structured responsibility in `identity.responsibilities`.
    ResponsibilityPriority {
        /// Critical.
        Critical = "critical",
        /// High.
        High = "high",
        /// Medium.
        Medium = "medium",
        /// Low.
        Low = "low",
    }
}

string_enum! {
    /// On/off switch used by `modelRouting.mode` and `executionRouter.mode`.
    RouterMode {
        /// Disabled.
        Off = "off",
        /// Automatic routing.
        Auto = "auto",
    }
}

string_enum! {
    /// Transport of an MCP server (`mcpServers.<name>.type`).
    McpTransport {
        /// A child process speaking stdio.
        Stdio = "stdio",
        /// Server-sent events.
        Sse = "sse",
        /// Streamable HTTP.
        Http = "http",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_serde_agree() {
        for name in ExecutionMode::NAMES {
            let parsed: ExecutionMode = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(parsed.as_str(), *name);
        }
        assert!(serde_json::from_value::<StorageKind>(serde_json::json!("File")).is_err());
    }
}
