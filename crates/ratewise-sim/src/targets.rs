//! targets (todo)
