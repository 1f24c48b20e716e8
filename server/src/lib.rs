//! Warden: a crash-safe MCP tool server. See `docs/ARCHITECTURE.md` for the codemap.
//!
//! The rooms are declared in dependency order: each may use the rooms above it, never one
//! below (the tidy test `rooms_import_only_the_rooms_before_them` holds this).

// Leaf code: imports nothing from the crate.
pub mod base;
// The bounds that cross rooms, and their relations asserted.
pub mod limits;
// The operator's configuration, read and range-checked.
pub mod manifest;
// Grants checked, narrowed, replayed, scrubbed: no I/O.
pub mod broker;
// Starlark programs: load, check inputs, execute against the broker.
pub mod program;
// The seam: every clock, disk, socket, process and random byte.
pub mod env;
// The seam's production side.
pub mod io;
// Record lines, journals, the ledger, durable files: nothing of calls or protocols.
pub mod store;
// What is loaded at start: tools, resources, prompts, the tool lock.
pub mod catalog;
// A run from its journal's header to its settle.
pub mod run;
// What a client asks for: tools/call and the rest, in either era.
pub mod call;
// The only room that knows JSON-RPC and HTTP.
pub mod protocol;
// The operator's view of runs, and the live server's admin channel.
pub mod operator;
// The binary's commands, wiring the rooms together.
pub mod commands;

/// Warden's version, bound into journals and reported as `serverInfo.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
