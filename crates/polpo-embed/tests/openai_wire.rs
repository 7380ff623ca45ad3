//! The OpenAI-wire embedder against the strict fake embeddings server, over real HTTP.
#![allow(clippy::unwrap_used)] // tests: a failed setup should panic loudly

use polpo_embed::{
    EmbedError, Embedder, EmbedderEnv, EmbeddingConfig, OpenAiEmbedder, OpenAiSettings, cosine, embedder_from_config,
};
use polpo_testkit::{EmbeddingsReply, FAKE_EMBEDDINGS_KEY, FakeEmbeddings};
use std::time::Duration;

const MODEL: &str = "text-embedding-3-small";

fn settings(fake: &FakeEmbeddings) -> OpenAiSettings {
    let mut s = OpenAiSettings::new(fake.base_url(), MODEL, 1536);
    s.api_key = Some(FAKE_EMBEDDINGS_KEY.into());
    s
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn vectors_come_back_one_per_text_in_order_and_unit_length() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let embedder = OpenAiEmbedder::new(settings(&fake)).unwrap();
    let input = texts(&["the cat sat on the mat", "quarterly revenue report", "a cat on a mat"]);
    let v = embedder.embed(&input).await.unwrap();
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|x| x.len() == 1536));
    assert!(v.iter().all(|x| (cosine(x, x) - 1.0).abs() < 1e-4), "normalised");
    assert!(cosine(&v[0], &v[2]) > cosine(&v[0], &v[1]), "the vectors are the texts', in order");

    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.body["model"], MODEL);
    assert_eq!(sent.body["input"], serde_json::json!(input));
    assert_eq!(sent.body["encoding_format"], "float");
    assert!(sent.body.get("dimensions").is_none(), "the native length is not asked for");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {FAKE_EMBEDDINGS_KEY}").as_str()));

    // Items out of order are put back by their index.
    fake.push(EmbeddingsReply::Reversed);
    assert_eq!(embedder.embed(&input).await.unwrap(), v);
    assert_eq!(embedder.identity().dimensions, 1536);
}

#[tokio::test]
async fn shortened_vectors_ask_for_dimensions() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let mut s = settings(&fake);
    s.dimensions = 256;
    let v = OpenAiEmbedder::new(s).unwrap().embed(&texts(&["hello world"])).await.unwrap();
    assert_eq!(v[0].len(), 256);
    assert_eq!(fake.requests()[0].body["dimensions"], 256);
}

#[tokio::test]
async fn long_lists_go_in_bounded_batches_and_keep_their_order() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let mut s = settings(&fake);
    s.max_batch = 4;
    let embedder = OpenAiEmbedder::new(s).unwrap();
    let input: Vec<String> = (0..10).map(|i| format!("note number {i}")).collect();
    let all = embedder.embed(&input).await.unwrap();
    let sizes: Vec<usize> = fake.requests().iter().map(|r| r.body["input"].as_array().unwrap().len()).collect();
    assert_eq!(sizes, [4, 4, 2]);
    let last = embedder.embed(&input[9..]).await.unwrap();
    assert_eq!(all[9], last[0]);
}

#[tokio::test]
async fn a_server_error_or_rate_limit_is_unavailable_and_never_shows_the_key() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let embedder = OpenAiEmbedder::new(settings(&fake)).unwrap();
    fake.push(EmbeddingsReply::Status(500, format!("boom for key {FAKE_EMBEDDINGS_KEY}")));
    fake.push(EmbeddingsReply::Status(429, "Rate limit reached".into()));
    for status in ["500", "429"] {
        let e = embedder.embed(&texts(&["hi"])).await.unwrap_err();
        assert!(matches!(e, EmbedError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains(status), "{e}");
        assert!(!e.to_string().contains(FAKE_EMBEDDINGS_KEY), "{e}");
    }
    assert_eq!(fake.requests().len(), 2, "one attempt each: search falls back instead of waiting");
    assert!(embedder.embed(&texts(&["hi"])).await.is_ok(), "the next call works again");
}

#[tokio::test]
async fn a_wrong_key_is_unavailable_with_the_provider_sentence() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let mut s = settings(&fake);
    s.api_key = Some("sk-wrong-and-secret".into());
    let e = OpenAiEmbedder::new(s).unwrap().embed(&texts(&["hi"])).await.unwrap_err();
    assert_eq!(e.code(), "embedding_unavailable");
    assert!(e.to_string().contains("401") && e.to_string().contains("Incorrect API key"), "{e}");
    assert!(!e.to_string().contains("sk-wrong-and-secret"), "{e}");
}

#[tokio::test]
async fn a_missing_vector_or_a_malformed_body_is_invalid() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let embedder = OpenAiEmbedder::new(settings(&fake)).unwrap();
    fake.push(EmbeddingsReply::DropLast);
    let e = embedder.embed(&texts(&["one", "two"])).await.unwrap_err();
    assert!(matches!(e, EmbedError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("1 vectors for 2 texts"), "{e}");
    fake.push(EmbeddingsReply::Raw("<html>proxy error</html>".into()));
    assert_eq!(embedder.embed(&texts(&["one"])).await.unwrap_err().code(), "embedding_invalid");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_as_unavailable() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let mut s = settings(&fake);
    s.timeout = Duration::from_millis(300);
    fake.push(EmbeddingsReply::Hang);
    let e = OpenAiEmbedder::new(s).unwrap().embed(&texts(&["hi"])).await.unwrap_err();
    assert!(matches!(e, EmbedError::Unavailable(_)), "{e:?}");
    assert!(e.to_string().contains("within 300 ms"), "{e}");
}

#[tokio::test]
async fn an_overlong_text_is_refused_before_any_request() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let embedder = OpenAiEmbedder::new(settings(&fake)).unwrap();
    let long = "word ".repeat(polpo_embed::openai::MAX_TEXT_BYTES / 4);
    let e = embedder.embed(&[long]).await.unwrap_err();
    assert_eq!(e.code(), "embedding_input_too_large");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn configuration_builds_a_working_provider_from_the_environment() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let base = fake.base_url();
    let env = move |name: &str| match name {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some(FAKE_EMBEDDINGS_KEY.to_owned()),
        _ => None,
    };
    let config: EmbeddingConfig =
        serde_json::from_value(serde_json::json!({"provider": "openai", "model": MODEL, "dimensions": 64})).unwrap();
    let embedder = embedder_from_config(&config, &EmbedderEnv { env: &env, models_dir: None }).unwrap();
    let v = embedder.embed(&texts(&["hello"])).await.unwrap();
    assert_eq!((v[0].len(), embedder.identity().dimensions), (64, 64));
    assert_eq!(fake.requests().len(), 1);
}
