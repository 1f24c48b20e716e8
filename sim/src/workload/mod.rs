//! What the world is asked to do: generated and fixed worlds, the client model and the
//! operator model.

pub mod client;
pub mod fixture;
pub mod generate;
pub mod operator;
