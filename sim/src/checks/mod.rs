//! The invariants: the ledger against the journals (`check`, the ledger read by the checker's
//! own reader too: `ledger_reader`), every write against the services' records (`truth`), and
//! the limits the checker reads from the manifest itself;
//! and in an operator's own world, what its settings let happen (`own`).

pub mod check;
pub mod ledger_reader;
pub mod limits;
pub mod own;
pub mod truth;
