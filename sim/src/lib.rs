//! Warden's deterministic simulator: the real server code (the `warden` crate) on a
//! simulated `Env` — executor, clock, disk, stdio — with faults injected and invariants
//! checked. See `docs/ARCHITECTURE.md`, "The simulator".

// The world's fixed names and what a simulation reports: every room uses them.
pub mod names;
pub mod report;
// The simulated Env and the world behind it: executor, clock, disk, stdio, services.
pub mod env;
// The invariants, checked over the simulated disk and the services' records.
pub mod checks;
// What the world is asked to do: generated worlds, the client and the operator.
pub mod workload;
// Fault plans, which faults fired, and the crash windows covered.
pub mod plan;
// One seeded simulation (and the instances beside its first on one store).
pub mod sweep;
// What is built on one simulation: fuzz properties, shrinking, the timeline.
pub mod fuzzing;
pub mod shrink;
pub mod timeline;
// A sweep over many seeds on every core, and its summary.
pub mod explore;
