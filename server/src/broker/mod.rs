//! Grants and capabilities. Today: the registry of capability kinds the manifest check
//! uses. The broker that performs and journals actions comes with the grants work.

pub mod kinds;
