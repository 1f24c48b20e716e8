//! The invariants: the ledger against the journals (`check`), every write against the
//! services' records (`truth`), and the limits the checker reads from the manifest itself.

pub mod check;
pub mod limits;
pub mod truth;
