//! A run from its journal's header to its settle: the pure state machine, the driver that
//! performs its commands through `Env`, the sending of actions and model calls, recovery at
//! start, retention, input rounds and notifications.

pub mod drain;
pub mod driver;
pub mod input;
pub mod machine;
pub mod metrics;
pub mod model;
pub mod notice;
pub mod notify;
pub mod perform;
pub mod recovery;
pub mod retention;
pub mod runs;
pub mod store;
pub mod takeover;
