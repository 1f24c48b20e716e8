//! What is on disk and how it is read back: the record line format, a run's journal and its
//! fold, the ledger, and the helpers that make a write durable. Knows nothing of calls,
//! protocols or how a run is driven.

pub mod files;
pub mod journal;
pub mod lease;
pub mod ledger;
pub mod owners;
pub mod place;
pub mod record;
pub mod records;
pub mod shared;

/// The buckets of the ledger's fsync latency (seconds): 50 µs to about 3 s, doubling.
pub const FSYNC_BUCKETS_SECONDS: [f64; 16] = [
    0.00005, 0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048, 0.4096,
    0.8192, 3.2768,
];
