//! Persistence for Polpo: one set of store traits, three backends (file, SQLite, PostgreSQL),
//! one conformance suite that every backend passes.
