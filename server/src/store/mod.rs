//! What is on disk and how it is read back: the record line format, a run's journal and its
//! fold, the ledger, and the helpers that make a write durable. Knows nothing of calls,
//! protocols or how a run is driven.

pub mod files;
pub mod journal;
pub mod ledger;
pub mod record;
