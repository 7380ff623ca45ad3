//! `polpo bench`: what the runtime costs on this machine, measured the way users run it.
//!
//! One run is the common agent shape: the user asks to read a file, the model calls `read`, the
//! tool runs, the model answers (2 model calls, 1 tool, 10 tool schemas per call). The model is
//! an in-process fake answering at once ([`fake`]), so what is measured is Polpo alone: the real
//! server (`polpo_server::router` on loopback, over HTTP), the real engine, tools and store.
//!
//! The bench always runs a built-in bench agent in a temporary project, never the project's own
//! agents: those name real models, hooks, MCP servers and connections that would reach real
//! services, and the project's store must not receive thousands of bench sessions. The agent is
//! the shape of the scenario (10 tools, `read` among them), on the store kind asked for
//! (`--store file|sqlite`, in the temporary folder, removed afterwards).
//!
//! Figures: the runtime's own time per run and per model turn from the server's
//! `x-polpo-overhead-ms` (model and tool waits excluded), over `--runs` sequential runs; RSS growth
//! over those runs and the process's peak RSS (`/proc/self/status`: server, fake and client are
//! one process); runs/s with `--concurrency` clients for `--duration` seconds; `cold_ms` from
//! loading the project to the first answered run; and the runs that failed or answered wrong.
//!
//! `--stored-sessions N` first fills the bench store with N finished chats (written through the
//! store itself, as a server that served them would have left them), so `cold_ms` and the first
//! page of the session list (`page_ms`, through the server's route) show what start-up and
//! listing cost with that much history: both must not grow with it.

mod fake;

use anyhow::{Context as _, anyhow};
use axum::body::Bytes;
use polpo_server::auth::ApiKeys;
use polpo_server::serve::Limits;
use polpo_server::{AppState, router};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `polpo bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Sequential runs measured for the cost per run and the memory growth.
    #[arg(long, default_value_t = 2000)]
    runs: usize,
    /// Concurrent clients of the throughput phase.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds of the throughput phase.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// The store the bench sessions go to (in a temporary folder, never the project's).
    #[arg(long, value_enum, default_value_t = Store::File)]
    store: Store,
    /// Finished chats put into the bench store before the cold start (adds `stored_sessions` and
    /// `page_ms`, the first page of 20 sessions through the server, to the figures).
    #[arg(long, default_value_t = 0)]
    stored_sessions: usize,
    /// Every run asks `store: false` (OpenAI's stateless chat: the client sends the whole
    /// conversation and nothing is written), to see the runtime without its store.
    #[arg(long)]
    unstored: bool,
    /// One JSON line: `p50_ms, p99_ms, runs_per_s, peak_rss_kb, rss_growth_kb, cold_ms, errors`.
    #[arg(long)]
    json: bool,
}

/// The store kinds a bench can run on without a database server.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Store {
    /// The file store (the default of new projects).
    File,
    /// One SQLite database file.
    Sqlite,
}

impl Store {
    fn as_str(self) -> &'static str {
        match self {
            Store::File => "file",
            Store::Sqlite => "sqlite",
        }
    }
}

/// The 10 tools the bench agent offers the model on every call, `read` first.
const TOOLS: [&str; 10] =
    ["read", "write", "edit", "bash", "glob", "grep", "ls", "http_fetch", "http_download", "memory_get"];

/// What one bench measured.
struct Report {
    /// Runtime's own time per run, sorted (ms).
    overheads: Vec<f64>,
    /// Model calls per run in the sequential phase (2 when every run went as scripted).
    turns_per_run: f64,
    /// Tool schemas the last model call carried.
    tool_schemas: usize,
    runs_per_s: f64,
    peak_rss_kb: u64,
    rss_growth_kb: i64,
    cold_ms: f64,
    /// Time of the first `GET /api/v1/chat/sessions?limit=20` after the cold start (ms), when
    /// sessions were stored first.
    page_ms: Option<f64>,
    errors: u64,
    /// The first failure, to say why `errors` is not 0.
    first_error: Option<String>,
}

/// Run the bench and print its figures; exit 1 when any run failed.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.runs == 0 || args.concurrency == 0 || args.duration == 0 {
        return Err(anyhow!("invalid_argument: --runs, --concurrency and --duration must be at least 1"));
    }
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    let report = rt.block_on(measure(&args))?;
    if args.json {
        // One line, for scripts and CI logs to collect.
        let mut line = json!({
            "p50_ms": percentile(&report.overheads, 0.50),
            "p99_ms": percentile(&report.overheads, 0.99),
            "runs_per_s": report.runs_per_s,
            "peak_rss_kb": report.peak_rss_kb,
            "rss_growth_kb": report.rss_growth_kb,
            "cold_ms": report.cold_ms,
            "errors": report.errors,
        });
        if let Some(page_ms) = report.page_ms {
            line["stored_sessions"] = json!(args.stored_sessions);
            line["page_ms"] = json!(page_ms);
        }
        println!("{line}");
    } else {
        print_table(&args, &report);
    }
    if let Some(error) = &report.first_error {
        eprintln!("error: {} run(s) failed; the first: {error}", report.errors);
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

async fn measure(args: &Args) -> anyhow::Result<Report> {
    let fake = fake::start().await.context("cannot start the bench model")?;
    let dir = tempfile::tempdir().context("cannot create the bench project folder")?;
    write_project(dir.path(), fake.addr, args.store).context("cannot write the bench project")?;
    if args.stored_sessions > 0 {
        store_sessions(dir.path(), args.store, args.stored_sessions).await?;
    }

    let cold = Instant::now();
    let project = polpo_project::load_project(dir.path()).map_err(|problems| {
        super::print_problems_to_stderr(&problems);
        anyhow!("the bench project has {} problem(s)", problems.len())
    })?;
    let runtime = polpo_assemble::open(project).await?;
    let state = Arc::new(AppState::new(runtime, ApiKeys::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot listen on 127.0.0.1")?;
    let url = format!("http://{}/v1/chat/completions", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server =
        tokio::spawn(polpo_server::serve::run(listener, router(state), Limits::configured(None, true), async {
            let _ = stopped.await;
        }));
    let http = reqwest::Client::new();
    // One body for every run, serialised once: the client shares the CPU with the server.
    let mut request = json!({"agent": "bench", "messages": [{"role": "user", "content": question()}]});
    if args.unstored {
        request["store"] = json!(false);
    }
    let body = Bytes::from(request.to_string());
    let mut tally = Tally::default();
    tally.add(one_run(&http, &url, &body).await);
    let cold_ms = ms(cold.elapsed());
    let page_ms = match args.stored_sessions {
        0 => None,
        // An unstored cold run leaves no session of its own.
        stored => Some(first_page(&http, &url, stored, stored + usize::from(!args.unstored)).await?),
    };

    // Sequential: the cost of one run with nothing else going on, and what memory keeps.
    let rss_before = proc_status_kb("VmRSS");
    let calls_before = fake.counters.calls.load(std::sync::atomic::Ordering::Relaxed);
    let mut overheads = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        if let Some(overhead) = tally.add(one_run(&http, &url, &body).await) {
            overheads.push(overhead);
        }
    }
    let rss_growth_kb = proc_status_kb("VmRSS") as i64 - rss_before as i64;
    let calls = fake.counters.calls.load(std::sync::atomic::Ordering::Relaxed) - calls_before;
    overheads.sort_by(f64::total_cmp);

    // Throughput: `concurrency` clients each starting runs until the time is up.
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let started = Instant::now();
    let clients: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                while Instant::now() < deadline {
                    tally.add(one_run(&http, &url, &body).await);
                }
                tally
            })
        })
        .collect();
    let mut completed = 0;
    for client in clients {
        let client = client.await.context("a bench client stopped")?;
        completed += client.ok;
        tally.merge(client);
    }
    let runs_per_s = completed as f64 / started.elapsed().as_secs_f64();

    let peak_rss_kb = proc_status_kb("VmHWM");
    let _ = stop.send(());
    let _ = server.await;
    Ok(Report {
        overheads,
        turns_per_run: calls as f64 / args.runs as f64,
        tool_schemas: fake.counters.tool_schemas.load(std::sync::atomic::Ordering::Relaxed),
        runs_per_s,
        peak_rss_kb,
        rss_growth_kb,
        cold_ms,
        page_ms,
        errors: tally.errors,
        first_error: tally.first_error,
    })
}

/// The bench project: one agent on the fake's provider, the file it reads, the store asked for.
fn write_project(root: &Path, model: std::net::SocketAddr, store: Store) -> std::io::Result<()> {
    let agent = root.join(".polpo").join("agents").join("bench");
    std::fs::create_dir_all(&agent)?;
    let manifest = json!({
        "schemaVersion": polpo_core::config::SCHEMA_VERSION,
        "project": "polpo-bench",
        "settings": {
            "storage": store.as_str(),
            "providers": {"bench": {"baseUrl": format!("http://{model}/v1"), "api": "openai-completions"}},
        },
    });
    std::fs::write(root.join(".polpo").join("project.json"), manifest.to_string())?;
    let config = json!({"model": "bench/zero-latency", "allowedTools": TOOLS});
    std::fs::write(agent.join("agent.json"), config.to_string())?;
    std::fs::write(agent.join("instructions.md"), "You read files when asked and say what they contain.")?;
    std::fs::write(root.join(fake::FILE), format!("{}\n", fake::MARKER))
}

/// What the user asks in every bench run (and in every stored chat).
fn question() -> String {
    format!("Read {} and tell me what it says.", fake::FILE)
}

/// Fill the bench store with `count` finished chats (a question and its answer each), through the
/// store's own writes, 32 at a time; the store is closed again before the cold start.
async fn store_sessions(root: &Path, store: Store, count: usize) -> anyhow::Result<()> {
    use polpo_core::message::Message;
    use polpo_store::{NewMessage, NewSession};
    let kind = polpo_store::StoreKind::parse(store.as_str())?;
    let opened = polpo_store::open_store(kind, root, None, Arc::new(polpo_store::SystemClock))
        .await
        .context("cannot open the bench store to fill it")?;
    let sessions = opened.sessions.clone();
    const WRITERS: usize = 32;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let sessions = sessions.clone();
            tokio::spawn(async move {
                for i in (w..count).step_by(WRITERS) {
                    let new = NewSession { agent: "bench".into(), ..Default::default() };
                    let turn = vec![
                        NewMessage::new(Message::user(format!("{} ({i})", question()))),
                        NewMessage::new(Message::assistant(fake::ANSWER)),
                    ];
                    sessions.create_session_with_messages(new, turn).await?;
                }
                Ok::<_, polpo_store::StoreError>(())
            })
        })
        .collect();
    for writer in writers {
        writer.await.context("a store filler stopped")?.context("cannot store a bench session")?;
    }
    Ok(())
}

/// The first page of 20 sessions through the server's list route: its time (ms), after checking
/// it is a full page with a cursor to the next (so the stored sessions are really there):
/// `stored` filled in, `total` with the cold start's own.
async fn first_page(http: &reqwest::Client, chat_url: &str, stored: usize, total: usize) -> anyhow::Result<f64> {
    let url = chat_url.replace("/v1/chat/completions", "/api/v1/chat/sessions?limit=20");
    let started = Instant::now();
    let response = http.get(&url).send().await.context("the session list failed")?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.context("the session list is not JSON")?;
    let page_ms = ms(started.elapsed());
    let page = &body["data"];
    let listed = page["sessions"].as_array().map_or(0, Vec::len);
    if !status.is_success() || listed != 20.min(total) || (total > 20 && page["nextCursor"].is_null()) {
        return Err(anyhow!("the session list answered HTTP {status} with {listed} session(s), not {stored} stored"));
    }
    Ok(page_ms)
}

/// Runs that succeeded and failed, with the first failure's reason.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    /// Count one run; its overhead when it succeeded.
    fn add(&mut self, run: Result<f64, String>) -> Option<f64> {
        match run {
            Ok(overhead) => {
                self.ok += 1;
                Some(overhead)
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
                None
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// One run over HTTP: its `x-polpo-overhead-ms`, or why it failed (an error status, a missing
/// figure, or an answer other than the one a run that really read the file gets).
async fn one_run(http: &reqwest::Client, url: &str, body: &Bytes) -> Result<f64, String> {
    let request = http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.clone());
    let response = request.send().await.map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    let overhead = response.headers().get("x-polpo-overhead-ms").and_then(|v| v.to_str().ok()?.parse::<f64>().ok());
    let text = response.text().await.map_err(|e| format!("response failed: {e}"))?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {text}"));
    }
    let answer: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("unreadable answer: {e}"))?;
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    if content != fake::ANSWER {
        return Err(format!("unexpected answer: {content}"));
    }
    overhead.ok_or_else(|| "no x-polpo-overhead-ms header".to_owned())
}

/// A field of `/proc/self/status` in kB (`VmRSS`, `VmHWM`); 0 where there is no procfs.
fn proc_status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The `p` quantile of sorted figures (nearest rank); 0 when there are none.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_table(args: &Args, r: &Report) {
    let (p50, p99) = (percentile(&r.overheads, 0.50), percentile(&r.overheads, 0.99));
    let turns = if r.turns_per_run > 0.0 { r.turns_per_run } else { 1.0 };
    let profile = if cfg!(debug_assertions) { " (debug build: figures are not representative)" } else { "" };
    println!("polpo bench{profile}");
    println!(
        "  scenario: read a file → {:.0} model calls + 1 tool, {} tool schemas per call, {}",
        r.turns_per_run,
        r.tool_schemas,
        if args.unstored {
            "store: false (nothing written)".to_owned()
        } else {
            format!("{} store", args.store.as_str())
        }
    );
    println!("  {:<34} {:>12} {:>12}", "runtime's own time", "p50", "p99");
    println!("  {:<34} {:>9.3} ms {:>9.3} ms", format!("per run ({} runs)", args.runs), p50, p99);
    println!("  {:<34} {:>9.3} ms {:>9.3} ms", "per model turn", p50 / turns, p99 / turns);
    println!(
        "  {:<34} {:>12.0}",
        format!("runs/s ({} concurrent, {} s)", args.concurrency, args.duration),
        r.runs_per_s
    );
    println!("  {:<34} {:>9} kB", "peak RSS", r.peak_rss_kb);
    println!("  {:<34} {:>9} kB", format!("RSS growth over {} runs", args.runs), r.rss_growth_kb);
    match r.page_ms {
        None => println!("  {:<34} {:>9.1} ms", "cold start to first run", r.cold_ms),
        Some(page_ms) => {
            let stored = format!("{} stored sessions", args.stored_sessions);
            println!("  {:<34} {:>9.1} ms", format!("cold start to first run ({stored})"), r.cold_ms);
            println!("  {:<34} {:>9.1} ms", "first page of 20 sessions", page_ms);
        }
    }
    println!("  {:<34} {:>12}", "errors", r.errors);
}
