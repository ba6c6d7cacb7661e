//! TeSA annotation: the `--tesa` attributes file (`attrs.rs`), applying it to a graph
//! (`annotate.rs`: masks by magnitude, block, N:M, channel; `masks.rs`), and named sparsity
//! patterns (`patterns.rs`). The [`Tesa`] type itself (per element a bit width, 0 = pruned,
//! and a format), its [`BitMask`] and its compact binary form are the IR's (`ir/tesa/`), a
//! value's annotation; they are re-exported here.

pub mod annotate;
pub mod attrs;
pub mod masks;
pub mod patterns;

pub use crate::ir::tesa::{bitmask, codec, BitMask, ElemAttr, Format, Tesa};
