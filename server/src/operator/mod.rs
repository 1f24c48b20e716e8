//! The operator's view of, and hand on, a server's runs: listed and shown from the ledger and
//! the journals beside a live server (and on the read-only console page), and resolved through
//! the live server's admin channel.

pub mod admin;
pub mod console;
pub mod in_doubt;
pub mod kept;
pub mod runs;
pub mod status;
pub mod verdict;
