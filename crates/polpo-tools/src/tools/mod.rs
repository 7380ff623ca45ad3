//! The built-in system tools, one module each.

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
