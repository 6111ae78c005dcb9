//! plot (todo)
