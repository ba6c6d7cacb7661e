//! How an HPEC network is lowered ([`HpecOptions`], [`Precision`]) and the defaults of its
//! options, with the rules that follow from them (where the tail starts, which layers compact
//! and merge after them).

use crate::codegen::{rows, Engine};

/// The challenge's cap on activations.
pub const YMAX: f32 = 32.0;

/// How a network is lowered.
#[derive(Clone, Debug, PartialEq)]
pub struct HpecOptions {
    /// Images per batch (rows of the activation buffers).
    pub batch: usize,
    /// Drop all-zero rows after every this many layers (0: never).
    pub compact_every: usize,
    /// Also drop them after each of the first this many layers, where most images die; past
    /// them the survivors are few and stable, and compaction every layer costs more than the
    /// dead rows it drops.
    pub compact_first: usize,
    /// Most bytes of packed weights kept on the device; above it they stream from host memory.
    pub weight_budget: usize,
    /// Device slots the streamed weights rotate through.
    pub stream_slots: usize,
    /// Hand the weight values to the specializer so families that embed them do.
    pub fold_values: bool,
    /// Tensor-core path of the fine kernels (`Auto`: the specializer's rule).
    pub engine: Engine,
    /// Rows the planner prices a layer at (`None`: the batch). Images die in the first layers,
    /// so most layers run on far fewer rows than the batch holds.
    pub plan_rows: Option<usize>,
    /// Multiprocessors of the GPU the program will run on: the live-row kernels' grids are
    /// sized for them ([`stride_live_rows`]).
    ///
    /// [`stride_live_rows`]: crate::codegen::stride_live_rows
    pub sm_count: usize,
    /// Tile of the 3xTF32 element-sparse (fine) layer kernels, which it selects unless `engine`
    /// is `Simt`; `None`: the specializer's choice.
    pub fine_tile: Option<crate::codegen::Tile>,
    /// Compactions after this layer and later also merge bitwise-identical rows (one row then
    /// stands for every image it equals; [`Merge`]); `None`: never. Activations of the
    /// challenge networks converge (past layer ~20 every surviving image of the 1024 and 4096
    /// networks holds the same row), so merging turns the late layers into one-row products.
    ///
    /// [`Merge`]: crate::program::Merge
    pub merge_from: Option<usize>,
    /// Each layer also gets a kernel for at most this many live rows ([`few_rows`]: a thread per
    /// output element), and its tiled kernels skip the product at or below it; `None`: the
    /// tiled kernels always run. Once the activations converge and identical rows are merged,
    /// most layers hold a handful of rows, where the tiled kernels' per-warp k chain is the
    /// whole layer time.
    ///
    /// [`few_rows`]: crate::codegen::few_rows
    pub few_rows: Option<usize>,
    /// Layers at least this many neurons wide run their element-sparse product on the
    /// row-scatter kernel ([`row_scatter`]: each activation row read once, only the weight rows
    /// its nonzeros select) instead of the 3xTF32 fine kernel, whose activation traffic grows
    /// with the width; `None` (the default): never. Measured slower so far (H100, MNIST inputs,
    /// 16384x120: 1178 ms against 389 with the tiled kernel; see the kernel's module docs).
    ///
    /// [`row_scatter`]: crate::codegen::row_scatter
    pub scatter_from: Option<usize>,
    /// Plan every layer with element-sparse (1x1) parts only: no block covers and no dense
    /// alternative. It skips the covers, most of a wide layer's compile time (a 65536-neuron
    /// layer 2.7 s instead of 8-11 on one core). Where the planner would pick blocks that hold
    /// few elements (16 in a 16x16 block on the structured 65536-neuron layers), the packed
    /// 3xTF32 block form takes ~136 bytes a nonzero against ~47 element-sparse; the relabelled
    /// layers of every size plan element-sparse anyway (16384: ~84 bytes a nonzero, most of it
    /// the fine kernel's k8 x n8 padding).
    pub fine_only: bool,
    /// Layers from this one on run in one launch ([`rows::tail_layers`]: every remaining layer
    /// on the live rows, a grid barrier between layers, no per-layer graph nodes and no
    /// compactions), with only each layer's nonzeros as tables (8 bytes each) and nothing
    /// planned or specialized for them; `None`: every layer gets its own kernels. Past ~layer 22
    /// the challenge networks hold one merged row, where a layer's own kernels cost ~5 µs of
    /// launches for ~1 µs of work; the tail kernel is slow on many rows, so it starts late.
    pub tail_from: Option<usize>,
    /// Arithmetic of the activations ([`Precision`]).
    pub precision: Precision,
    /// fp32 layers at least this many neurons wide, whose rows fit the staging buffer
    /// ([`rows::gather_stages`]: up to 51,200 neurons) and whose plan has element-sparse parts,
    /// run as a gather from rows staged in shared memory ([`compile_layer_gather`]) instead of
    /// the planned kernels (a layer planned as blocks alone keeps them); `None`: never.
    /// Measured on the H200 in the natural neuron order (2026-11-27, calls 19-20): 16384×120
    /// 215 ms against 337 with the planned 3xTF32 kernels, 4096×120 23.8 against 29.7;
    /// 1024×120 2.81 against 2.67 (the planned kernels stay there).
    ///
    /// [`compile_layer_gather`]: super::compile_layer_gather
    pub gather_from: Option<usize>,
    /// Relabel the neurons between the layers before the tail ([`hpec_order`]: the
    /// neurons both neighbouring layers treat alike sit together) in fp32; with f64 the layers
    /// keep the reference's k order. On the challenge networks the first block's layers then
    /// plan as dense 16×16 blocks (two per block column) instead of element-sparse parts, and a
    /// layer whose plan has blocks runs them even above `gather_from`.
    ///
    /// [`hpec_order`]: crate::program::hpec_order
    pub reorder: bool,
    /// With `reorder`, boundaries of layers at least this many neurons wide may permute
    /// ([`hpec_order`]: each layer keeps its own grouping and a [`Op::PermuteColumns`]
    /// step moves the activations between them); `None`: never.
    ///
    /// [`hpec_order`]: crate::program::hpec_order
    /// [`Op::PermuteColumns`]: crate::program::Op::PermuteColumns
    pub permute_from: Option<usize>,
    /// Compactions that do not merge drop the dead rows in place ([`Op::DropRows`]: only the
    /// rows that die and the rows that fill their places move) instead of packing every live
    /// row into the other buffer ([`Op::CompactRows`]).
    ///
    /// [`Op::DropRows`]: crate::program::Op::DropRows
    /// [`Op::CompactRows`]: crate::program::Op::CompactRows
    pub compact_in_place: bool,
}

/// The arithmetic a network runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// fp32 activations: the planned and specialized layer kernels (3xTF32 or SIMT fp32).
    #[default]
    F32,
    /// f64 activations, and every layer computed as the f64 reference computes it, bit for bit
    /// ([`rows::gather_layer`], [`compile_layer_gather`]): products, then sums in k order, then
    /// the bias, each rounded on its own. Twice the activation bytes and SIMT f64 arithmetic;
    /// the categories then equal the f64 reference's whatever the network. fp32 cannot promise
    /// that: an image near an unstable fixed point (x → 2x − 0.35 on the 4096 networks)
    /// follows its rounding, not the reference's.
    ///
    /// [`compile_layer_gather`]: super::compile_layer_gather
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

impl Default for HpecOptions {
    fn default() -> HpecOptions {
        HpecOptions {
            batch: 60_000,
            compact_every: 8,
            compact_first: 20,
            weight_budget: usize::MAX,
            stream_slots: 4,
            fold_values: true,
            engine: Engine::Auto,
            plan_rows: Some(DEFAULT_PLAN_ROWS),
            sm_count: 132,
            fine_tile: Some(default_fine_tile()),
            merge_from: Some(DEFAULT_MERGE_FROM),
            few_rows: Some(DEFAULT_FEW_ROWS),
            scatter_from: None,
            fine_only: false,
            tail_from: Some(DEFAULT_TAIL_FROM),
            precision: Precision::F32,
            gather_from: Some(DEFAULT_GATHER_FROM),
            reorder: true,
            permute_from: Some(DEFAULT_PERMUTE_FROM),
            compact_in_place: true,
        }
    }
}

/// First layer of the one-launch tail by default ([`HpecOptions::tail_from`]): every
/// challenge network measured holds one merged row by then (H200, 2026-11-27: before layer
/// 24, 1 to 5 rows from 1024 to 16384 neurons but 15 at 65536, where the tail then cost
/// 191 µs a layer against ~4-8 µs on one row).
pub const DEFAULT_TAIL_FROM: usize = 32;

/// Layers a streamed tail runs per launch: its tables for them are copied into one rotating
/// device slot (65536 neurons: 1 GiB a segment) before the launch.
pub const TAIL_STREAM_LAYERS: usize = 64;

/// Narrowest network whose boundaries may permute by default ([`HpecOptions::permute_from`]).
pub const DEFAULT_PERMUTE_FROM: usize = 4096;

/// Narrowest fp32 layer that runs as a staged-row gather by default ([`HpecOptions::gather_from`]).
pub const DEFAULT_GATHER_FROM: usize = 4096;

/// First layer after which compactions merge identical rows by default: the activations of
/// distinct images start to coincide around layer 9 (1024 and 4096 networks), so earlier
/// merges would only pay their two passes over the rows.
pub const DEFAULT_MERGE_FROM: usize = 8;

/// Live rows at or below which a layer runs its few-rows kernel by default.
pub const DEFAULT_FEW_ROWS: usize = 64;

/// Rows the planner prices a layer at by default: about the images that stay alive past the
/// first layers (950 of the 60,000 challenge inputs of the real 1024 network). Priced at the
/// whole batch, the planner picks block covers of up to four kernels a layer, which cost 2x
/// more end to end (1024x120: 12.1 against 6.3 ms, H100).
pub const DEFAULT_PLAN_ROWS: usize = 1000;

/// The 3xTF32 fine tile of the layer kernels of a `neurons`-wide network: 64 rows × 16 groups
/// of 8 columns (24 groups from 4096 neurons), k in chunks of 192. With identical rows merged,
/// these kernels run the first ~20 layers, where most images are alive; measured on an H100
/// (MNIST inputs, 9 tiles): 4096x120 34.2 ms with 24 groups against 45.9 with 16 (and 37.6
/// with 28, 43.8 with 20); 1024x120 (repeated) 3.18 ms with 16 against 3.43 with 24.
pub fn default_fine_tile_for(neurons: usize) -> crate::codegen::Tile {
    let group = if neurons >= 4096 { 24 } else { 16 };
    crate::codegen::Tile { group, k_rows: 6, n_tiles: 1, ..crate::codegen::Tile::new(64, 0) }
}

/// [`default_fine_tile_for`] the 1024-neuron network.
pub fn default_fine_tile() -> crate::codegen::Tile {
    default_fine_tile_for(1024)
}

impl HpecOptions {
    /// The first layer of the one-launch tail ([`HpecOptions::tail_from`]); `n_layers` when
    /// there is none.
    pub fn tail_start(&self, n_layers: usize) -> usize {
        self.tail_from.map_or(n_layers, |t| t.min(n_layers))
    }

    /// These options for `layers`: without the tail when a column of a tail layer holds more
    /// nonzeros than the tail kernel takes ([`rows::TAIL_MAX_SLOTS`]).
    pub fn fitted_to(&self, layers: &[crate::sparse::CsrRef<'_>]) -> HpecOptions {
        let start = self.tail_start(layers.len());
        let too_long = rows::tail_slots(&layers[start..]) > rows::TAIL_MAX_SLOTS;
        HpecOptions { tail_from: if too_long { None } else { self.tail_from }, ..self.clone() }
    }

    /// Whether a compaction follows layer `l` of `n_layers` (never with `compact_every` 0, and
    /// never inside the tail; always before it, so the tail runs on the fewest rows).
    pub fn compacts_after(&self, l: usize, n_layers: usize) -> bool {
        let start = self.tail_start(n_layers);
        self.compact_every > 0
            && l < start
            && (l < self.compact_first || (l + 1).is_multiple_of(self.compact_every) || l + 1 == start)
    }

    /// Whether the compaction after layer `l` (if any) also merges identical rows.
    pub fn merges_after(&self, l: usize, n_layers: usize) -> bool {
        self.compacts_after(l, n_layers) && self.merge_from.is_some_and(|m| l >= m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::Csr;

    /// A `n × n` layer whose column 0 holds `long` nonzeros and every other column one.
    fn layer(n: usize, long: usize) -> Csr {
        let mut dense = vec![0f32; n * n];
        (0..long).for_each(|k| dense[k * n] = 0.0625);
        (1..n).for_each(|c| dense[c * n + c] = 0.0625);
        Csr::from_dense(&dense, n, n)
    }

    #[test]
    fn the_tail_is_dropped_when_a_tail_column_is_too_long_for_its_kernel() {
        let options = HpecOptions { tail_from: Some(1), ..HpecOptions::default() };
        let fits = [layer(80, 3), layer(80, rows::TAIL_MAX_SLOTS)];
        let views: Vec<_> = fits.iter().map(Csr::view).collect();
        assert_eq!(options.fitted_to(&views).tail_from, Some(1));
        // Too long, but before the tail: kept.
        let early = [layer(80, rows::TAIL_MAX_SLOTS + 1), layer(80, 3)];
        let views: Vec<_> = early.iter().map(Csr::view).collect();
        assert_eq!(options.fitted_to(&views).tail_from, Some(1));
        let late = [layer(80, 3), layer(80, rows::TAIL_MAX_SLOTS + 1)];
        let views: Vec<_> = late.iter().map(Csr::view).collect();
        let fitted = options.fitted_to(&views);
        assert_eq!(fitted.tail_from, None);
        assert_eq!(fitted.tail_start(2), 2);
        assert!(fitted.compacts_after(1, 2), "without a tail the last layer is followed by a compaction again");
    }
}
