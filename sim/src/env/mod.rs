//! The simulated `Env` and the world behind it (TigerBeetle's `src/testing/`): a seeded
//! executor, a clock, a disk with crash semantics, stdio, HTTP, a sandbox, services, and the
//! durability oracle watching them.

pub mod admin;
pub mod clock;
pub mod disk;
pub mod executor;
pub mod http;
pub mod oracle;
pub mod sandbox;
pub mod services;
pub mod state_db;
pub mod stdio;
pub mod world;
