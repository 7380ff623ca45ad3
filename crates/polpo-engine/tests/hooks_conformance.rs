//! Conformance suite for Runtime Hooks and the termination gate: real command hooks (small
//! `sh` scripts in temp dirs), a real local HTTP hook server, real built-in tools, and the
//! scripted fake LLM over HTTP through the OpenAI provider. One binary, many modules, so the
//! suite links once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

mod hooks_conformance {
    pub mod support;

    mod gate;
    mod handlers;
    mod readme;
    mod scopes;
    mod stop;
    mod tools;
}
