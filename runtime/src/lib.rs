//! Execution engines.
