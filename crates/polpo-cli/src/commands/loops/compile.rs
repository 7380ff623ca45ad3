//! `polpo loops compile <file.ts> [--out FILE]`: a static TypeScript loop compiled, without
//! running it, to the canonical JSON a `.json` loop holds (the JSON `polpo loops show` prints),
//! after the checks the project loader applies to one loop. Problems go to stderr with the
//! file, line and column; the JSON to stdout, or atomically to `--out`.

use super::super::print_problems_to_stderr;
use anyhow::Context as _;
use polpo_core::config::Location;
use polpo_core::loops::{LoopConfig, validate_loop};
use polpo_core::problem::Problem;
use polpo_project::fsx::{MAX_FILE_BYTES, read_bounded, write_atomic};
use std::path::Path;
use std::process::ExitCode;

/// Compile `file`; write the JSON to `out`, or print it.
pub fn run(file: &Path, out: Option<&Path>) -> anyhow::Result<ExitCode> {
    let bytes = read_bounded(file, MAX_FILE_BYTES).with_context(|| format!("cannot read {}", file.display()))?;
    let source = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", file.display()))?;
    let config = match compile(&source, file) {
        Ok(config) => config,
        Err(problems) => {
            print_problems_to_stderr(&problems);
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut json = serde_json::to_string_pretty(&config)?;
    json.push('\n');
    match out {
        Some(out) => {
            write_atomic(out, json.as_bytes()).with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => print!("{json}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The loop `source` (from `file`, whose stem is the loop id) compiled and checked.
fn compile(source: &str, file: &Path) -> Result<LoopConfig, Vec<Problem>> {
    let shown = file.display().to_string();
    let id = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let compiled = polpo_loop_ts::compile(source, &shown)?;
    let at = Location::file(&shown);
    let config = compiled.config(&at)?;
    let problems: Vec<Problem> =
        validate_loop(&id, &config).into_iter().map(|p| compiled.positions.locate(at.locate(p))).collect();
    if problems.is_empty() { Ok(config) } else { Err(problems) }
}
