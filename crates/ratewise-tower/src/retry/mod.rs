//! The retry middleware: [`RetryLayer`], [`RetryService`] and its
//! [`ResponseFuture`].

mod future;
mod layer;
mod run;
mod service;

pub use future::ResponseFuture;
pub use layer::RetryLayer;
pub use service::RetryService;
