//! Warden's deterministic simulator: the real server code (the `warden` crate) on a
//! simulated `Env` — executor, clock, disk, stdio — with faults injected and invariants
//! checked. See `docs/ARCHITECTURE.md`, "The simulator".

pub mod check;
pub mod client;
pub mod clock;
pub mod coverage;
pub mod disk;
pub mod executor;
pub mod fired;
pub mod fixture;
pub mod fuzzing;
pub mod generate;
pub mod http;
pub mod limits;
pub mod names;
pub mod operator;
pub mod oracle;
pub mod plan;
pub mod report;
pub mod sandbox;
pub mod services;
pub mod shrink;
pub mod stdio;
pub mod sweep;
pub mod timeline;
pub mod truth;
pub mod world;
