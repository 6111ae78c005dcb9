//! Classification: one response (or transport failure) → cause, scope,
//! dimension, hints and evidence. Knows nothing of time budgets.

pub mod codes;
