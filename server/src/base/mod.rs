//! Leaf code every room may use: money, the single-threaded synchronisation primitives.
//! Imports nothing from the crate.

pub mod json;
pub mod layout;
pub mod money;
pub mod sync;
pub mod text;
pub mod time;
