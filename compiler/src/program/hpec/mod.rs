//! Lowering of an HPEC Sparse DNN Challenge network to a [`Program`]: the SNIG-style task
//! graph of one batch (SNIG §3), which the runtime captures once as a CUDA graph and relaunches
//! per batch with the batch's first image as its one [`Param`](super::Param).
//!
//! Each layer's weight goes through the compiler like any MatMul weight: its TeSA comes from its
//! nonzeros, the planner covers it ([`plan_single_weight`]), and every sub-operator is
//! specialized by `codegen` (values embedded as literals where the kernel family folds them and
//! [`HpecOptions::fold_values`] asks, never assumed). The last kernel of a layer fuses the bias,
//! the ReLU and the cap at 32 (`Clip(0, 32)`).
//!
//! One batch:
//! 1. `load_rows` scatters the batch's images (CSR, resident on the device) into dense rows of
//!    the first activation buffer and writes the live-row count;
//! 2. each layer multiplies the live rows of one activation buffer into the other; its fine
//!    kernels read the live count at run time and skip the dead row tiles ([`SpmmSpec::live_rows`]);
//!    layers from [`HpecOptions::gather_from`] neurons whose rows fit shared memory run instead as
//!    a gather from staged rows ([`compile_layer_gather`]), whose activation traffic does not
//!    grow with the width as the tiled kernels' does;
//! 3. after each of the first `compact_first` layers and then every `compact_every` layers
//!    ([`HpecOptions::compacts_after`]), the rows that are still nonzero are kept with their
//!    image ids (dead images dropped): in place ([`Op::DropRows`]: only the rows that die and
//!    the live rows that take their places move), or packed into the other buffer
//!    ([`Op::CompactRows`]) where the compaction also merges;
//! 4. the layers from [`HpecOptions::tail_from`] on (the converged tail: one merged row on the
//!    challenge networks) run in one launch of [`rows::tail_layers`], from tables of their
//!    nonzeros alone (nothing planned or specialized for them; [`Op::SpmmChain`]);
//! 5. `mark_rows` flags the images whose last row holds a nonzero: the categories, found on the
//!    GPU and read back once after every batch ran. Compactions after [`HpecOptions::merge_from`]
//!    also merge bitwise-identical rows ([`super::Merge`]: the activations converge, and one row
//!    then stands for every image it equals); a last step copies each merged image's category
//!    from the image that stood for it.
//!
//! The neurons between the layers before the tail are relabelled at compile time
//! ([`super::hpec_order`], [`HpecOptions::reorder`]): the layers arrive here relabelled, the
//! images' pixels too, and where a boundary permutes a [`Op::PermuteColumns`] step moves the
//! live rows from the order the layer before wrote to the order the layer after reads.
//!
//! With [`Precision::F64`] the activations are f64 and each layer before the tail is one
//! [`rows::gather_layer`] kernel ([`compile_layer_gather`]: the f64 reference's arithmetic bit
//! for bit, nothing planned); the tail runs the same arithmetic, and the row movers (load,
//! compact, merge, mark) see an f64 row as twice the 32-bit words.
//!
//! Weights stay resident when they fit `HpecOptions::weight_budget` (the tail's tables counted
//! with them); otherwise every layer's packed weight and tables live in pinned host memory and
//! stream through `stream_slots` rotating device slots, each copy ordered only after the layer
//! that last read its slot, and the tail runs in segments of [`TAIL_STREAM_LAYERS`] layers,
//! each segment's tables streamed the same way.
//!
//! [`Program`]: super::Program
//! [`SpmmSpec::live_rows`]: crate::codegen::SpmmSpec::live_rows
//! [`rows::tail_layers`]: crate::codegen::rows::tail_layers
//! [`rows::gather_layer`]: crate::codegen::rows::gather_layer
//! [`Op::DropRows`]: super::Op::DropRows
//! [`Op::CompactRows`]: super::Op::CompactRows
//! [`Op::SpmmChain`]: super::Op::SpmmChain
//! [`Op::PermuteColumns`]: super::Op::PermuteColumns

mod layer;
mod lower;
mod options;

pub use layer::{compile_layer, compile_layer_gather, LayerKernels, LayerPart};
pub use lower::{lower, HpecImages, HpecLowering};
pub use options::{
    default_fine_tile, default_fine_tile_for, HpecOptions, Precision, DEFAULT_FEW_ROWS, DEFAULT_GATHER_FROM,
    DEFAULT_MERGE_FROM, DEFAULT_PERMUTE_FROM, DEFAULT_PLAN_ROWS, DEFAULT_TAIL_FROM, TAIL_STREAM_LAYERS, YMAX,
};
