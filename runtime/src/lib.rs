//! Execution engines.

pub mod hpec;
