//! # ratewise
//!
//! The facade crate: re-exports the member crates by feature.
//!
//! - [`core`] (always): the sans-IO parse → classify → decide pipeline and
//!   admission control.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use ratewise_core as core;
