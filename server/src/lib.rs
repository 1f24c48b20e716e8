//! Warden: a crash-safe MCP tool server. See `docs/ARCHITECTURE.md` for the codemap.

pub mod admission;
pub mod answer;
pub mod broker;
pub mod call;
pub mod catalog;
pub mod commands;
pub mod driver;
pub mod env;
pub mod files;
pub mod http;
pub mod input;
pub mod io;
pub mod journal;
pub mod ledger;
pub mod machine;
pub mod manifest;
pub mod money;
pub mod notice;
pub mod notify;
pub mod oauth;
pub mod program;
pub mod protocol;
pub mod record;
pub mod recovery;
pub mod retention;
pub mod retry;
pub mod runs;
pub mod status;
pub mod store;
pub mod surface;
pub mod sync;
pub mod tool_lock;

/// Warden's version, bound into journals and reported as `serverInfo.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
