//! The `.polpo/` folder on disk.
//!
//! One loader reads a project (directory layout or legacy aggregate files) into a validated
//! [`polpo_core`] value, collecting every problem with its file and JSON pointer. Every write
//! goes through [`fsx::write_atomic`] (temp file, fsync, rename, fsync dir), so a crash never
//! leaves a half-written config file.
