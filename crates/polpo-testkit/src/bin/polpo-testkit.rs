//! `polpo-testkit [--port N] [--text TEXT] [--chunk-chars N]`: serve a fake LLM that answers
//! every request (OpenAI or Anthropic wire) with the same text, forever, for benchmarks.

use polpo_testkit::{FakeLlm, Options, Turn};

const USAGE: &str = "usage: polpo-testkit [--port N] [--text TEXT] [--chunk-chars N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port: u16 = 0;
    let mut text = String::from("Hello from the fake LLM.");
    let mut options = Options { repeat: true, record: false, ..Options::default() };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--port" => port = value.parse()?,
            "--text" => text = value,
            "--chunk-chars" => options.chunk_chars = value.parse()?,
            _ => return Err(USAGE.into()),
        }
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let fake = FakeLlm::start_with(listener, [Turn::text(text)], options)?;
    println!("fake llm listening: OpenAI base {} · Anthropic base {}", fake.base_url(), fake.anthropic_base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
