//! Bodies: replaying request bodies, metering response bodies.

pub(crate) mod decode;
pub mod metered;
pub mod replay;

pub use metered::{Metered, MeteredBody};
pub use replay::{BufferError, ReplayBody};
