//! Bodies: replaying request bodies, metering response bodies.

pub mod metered;
pub mod replay;

pub use metered::{Metered, MeteredBody};
pub use replay::{BufferError, ReplayBody};
