//! What the world is asked to do: generated, fixed and operators' own worlds, the client
//! model and the operator model.

pub mod client;
pub mod fixture;
pub mod generate;
pub mod operator;
pub mod own;
pub mod refusable;
