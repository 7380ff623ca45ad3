//! The built-in system tools, one module each.
//!
//! Each tool is declared with [`builtin_tool!`]: its doc, spec, effect and an async function
//! that receives the decoded arguments, so a tool file holds its arguments, schema and behaviour
//! and nothing else.

/// Declares a built-in tool: a struct holding its spec, `new`/`Default`, and the [`Tool`] impl
/// that decodes the arguments (refusing unknown ones) and calls `call(ctx, args)`.
/// `call_effect: f` narrows the effect per call from the raw arguments.
macro_rules! builtin_tool {
    (
        $(#[$doc:meta])*
        $tool:ident {
            spec: $spec:expr,
            effect: $effect:expr,
            $(call_effect: $call_effect:path,)?
            call: $call:path $(,)?
        }
    ) => {
        $(#[$doc])*
        pub struct $tool {
            spec: polpo_core::tool::ToolSpec,
        }

        impl $tool {
            /// The tool with its spec.
            pub fn new() -> Self {
                Self { spec: $spec }
            }
        }

        impl Default for $tool {
            fn default() -> Self {
                Self::new()
            }
        }

        #[async_trait::async_trait]
        impl $crate::Tool for $tool {
            fn spec(&self) -> &polpo_core::tool::ToolSpec {
                &self.spec
            }

            fn effect(&self) -> polpo_core::tool::ToolEffect {
                $effect
            }

            $(
                fn call_effect(&self, args: &serde_json::Value) -> polpo_core::tool::ToolEffect {
                    $call_effect(args)
                }
            )?

            async fn call(
                &self,
                ctx: &$crate::ToolContext,
                args: serde_json::Value,
            ) -> Result<$crate::ToolOutput, $crate::ToolError> {
                $call(ctx, $crate::args::parse_args(args)?).await
            }
        }
    };
}

pub mod bash;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod http;
pub mod ls;
pub mod memory;
pub mod outcome;
pub mod read;
mod text;
mod walk;
pub mod write;

use crate::Tool;
use std::sync::Arc;

/// Every built-in tool, in the reference's order.
pub fn system_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read::ReadTool::new()),
        Arc::new(write::WriteTool::new()),
        Arc::new(edit::EditTool::new()),
        Arc::new(bash::BashTool::new()),
        Arc::new(glob::GlobTool::new()),
        Arc::new(grep::GrepTool::new()),
        Arc::new(ls::LsTool::new()),
        Arc::new(http::HttpFetchTool::new()),
        Arc::new(http::HttpDownloadTool::new()),
        Arc::new(outcome::RegisterOutcomeTool::new()),
        Arc::new(memory::MemoryGetTool::new()),
        Arc::new(memory::MemorySaveTool::new()),
        Arc::new(memory::MemoryAppendTool::new()),
        Arc::new(memory::MemoryUpdateTool::new()),
    ]
}
