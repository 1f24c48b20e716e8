//! Warden: a crash-safe MCP tool server. See `docs/ARCHITECTURE.md` for the codemap.
//!
//! The rooms are declared in dependency order: each may use the rooms above it, never one
//! below (the tidy test `rooms_import_only_the_rooms_before_them` holds this).

pub mod base;
pub mod broker;
pub mod call;
pub mod catalog;
pub mod commands;
pub mod env;
pub mod io;
pub mod manifest;
pub mod program;
pub mod protocol;
pub mod run;
pub mod store;

/// Warden's version, bound into journals and reported as `serverInfo.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
