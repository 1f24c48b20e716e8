//! The invariants: the ledger against the journals (`check`, each read by the checker's own
//! reader too: `ledger_reader`, `journal_reader`), every write against the services' records (`truth`), and
//! the limits the checker reads from the manifest itself;
//! and in an operator's own world, what its settings let happen (`own`).

pub mod check;
pub mod journal_reader;
pub mod ledger_reader;
pub mod limits;
pub mod own;
pub mod slots;
pub mod truth;
