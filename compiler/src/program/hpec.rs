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
//! [`SpmmSpec::live_rows`]: crate::codegen::SpmmSpec::live_rows

use super::{Arg, BufferId, Csr, Data, Elem, Launch, Op, Program, ProgramBuilder, ProgramError, Rows, Storage};
use crate::codegen::from_plan::{kernels_for_sparse_operator, PlannedKernel};
use crate::codegen::{
    rows, specialize, stride_live_rows, Activation, CodegenError, Dtype, Engine, Epilogue, Family, Mode,
};
use crate::plan::{plan_sparse_weight, PlanOptions};

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
    pub sm_count: usize,
    /// Tile of the 3xTF32 element-sparse (fine) layer kernels, which it selects unless `engine`
    /// is `Simt`; `None`: the specializer's choice.
    pub fine_tile: Option<crate::codegen::Tile>,
    /// Compactions after this layer and later also merge bitwise-identical rows (one row then
    /// stands for every image it equals; [`super::Merge`]); `None`: never. Activations of the
    /// challenge networks converge (past layer ~20 every surviving image of the 1024 and 4096
    /// networks holds the same row), so merging turns the late layers into one-row products.
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
    pub gather_from: Option<usize>,
    /// Relabel the neurons between the layers before the tail ([`super::hpec_order`]: the
    /// neurons both neighbouring layers treat alike sit together) in fp32; with f64 the layers
    /// keep the reference's k order. On the challenge networks the first block's layers then
    /// plan as dense 16×16 blocks (two per block column) instead of element-sparse parts, and a
    /// layer whose plan has blocks runs them even above `gather_from`.
    pub reorder: bool,
    /// With `reorder`, boundaries of layers at least this many neurons wide may permute
    /// ([`super::hpec_order`]: each layer keeps its own grouping and a [`Op::PermuteColumns`]
    /// step moves the activations between them); `None`: never.
    pub permute_from: Option<usize>,
    /// Compactions that do not merge drop the dead rows in place ([`Op::DropRows`]: only the
    /// rows that die and the rows that fill their places move) instead of packing every live
    /// row into the other buffer ([`Op::CompactRows`]).
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

/// One layer's kernels as the compiler planned and specialized them: everything the lowering
/// reads, and nothing else, so that a layer compiled once is stored and read back
/// ([`LayerKernels::to_bytes`]) instead of planned and specialized again.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerKernels {
    /// One per launch, in launch order.
    pub parts: Vec<LayerPart>,
    /// Labels of the planned sub-operators, e.g. `fine_tf32:1x1:32768`.
    pub summary: String,
}

/// One specialized sub-operator of a layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerPart {
    pub name: String,
    pub source: String,
    pub launch: crate::codegen::Launch,
    pub tma_a: Option<crate::codegen::TmaBox>,
    /// The `ptr` and `idx` tables as the launch reads them (one unread word when the pattern
    /// is in the code).
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    /// The packed weight (empty when the values are embedded).
    pub weight: Vec<f32>,
}

const LAYER_MAGIC: &[u8; 8] = b"SPLAYER1";

impl LayerKernels {
    /// The binary form: magic, the fields in order (strings and arrays length-prefixed, little
    /// endian), then the FNV-1a checksum of everything before it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = LAYER_MAGIC.to_vec();
        let u32s = |out: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        let bytes = |out: &mut Vec<u8>, b: &[u8]| {
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(b);
        };
        bytes(&mut out, self.summary.as_bytes());
        out.extend_from_slice(&(self.parts.len() as u64).to_le_bytes());
        for p in &self.parts {
            bytes(&mut out, p.name.as_bytes());
            bytes(&mut out, p.source.as_bytes());
            let (g, b) = (p.launch.grid, p.launch.block);
            u32s(&mut out, &[g.0, g.1, g.2, b.0, b.1, b.2, p.launch.smem_bytes]);
            match p.tma_a {
                Some(t) => u32s(&mut out, &[1, t.rows, t.cols, t.swizzle_bytes]),
                None => u32s(&mut out, &[0, 0, 0, 0]),
            }
            for words in [&p.ptr, &p.idx] {
                bytes(&mut out, &words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
            }
            bytes(&mut out, &p.weight.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
        }
        let sum = super::checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads [`LayerKernels::to_bytes`]' form back; `None` when it is truncated, corrupted (the
    /// checksum fails) or of another version.
    pub fn from_bytes(data: &[u8]) -> Option<LayerKernels> {
        let body_len = data.len().checked_sub(8)?;
        let (body, sum) = data.split_at(body_len);
        if !body.starts_with(LAYER_MAGIC) || super::checksum(body).to_le_bytes() != sum {
            return None;
        }
        let mut r = Reader { data: body, at: LAYER_MAGIC.len() };
        let summary = String::from_utf8(r.bytes()?.to_vec()).ok()?;
        let n_parts = r.u64()? as usize;
        let mut parts = Vec::with_capacity(n_parts.min(64));
        for _ in 0..n_parts {
            let name = String::from_utf8(r.bytes()?.to_vec()).ok()?;
            let source = String::from_utf8(r.bytes()?.to_vec()).ok()?;
            let v: Vec<u32> = (0..11).map(|_| r.u32()).collect::<Option<_>>()?;
            let launch =
                crate::codegen::Launch { grid: (v[0], v[1], v[2]), block: (v[3], v[4], v[5]), smem_bytes: v[6] };
            let tma_a = (v[7] == 1).then_some(crate::codegen::TmaBox { rows: v[8], cols: v[9], swizzle_bytes: v[10] });
            let words = |b: &[u8]| b.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect::<Vec<[u8; 4]>>();
            let ptr = words(r.bytes()?).into_iter().map(i32::from_le_bytes).collect();
            let idx = words(r.bytes()?).into_iter().map(i32::from_le_bytes).collect();
            let weight = words(r.bytes()?).into_iter().map(f32::from_le_bytes).collect();
            parts.push(LayerPart { name, source, launch, tma_a, ptr, idx, weight });
        }
        (r.at == body.len()).then_some(LayerKernels { parts, summary })
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len())?;
        let s = &self.data[self.at..end];
        self.at = end;
        Some(s)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
}

/// The launch of a row kernel (`k` rendered, `kernel` its id in the program) with `args`.
fn rows_launch(kernel: super::KernelId, k: &rows::RowsKernel, args: Vec<Arg>) -> Launch {
    Launch::Kernel { kernel, grid: k.launch.grid, block: k.launch.block, args }
}

fn spec_err(message: String) -> CodegenError {
    CodegenError::Spec(message)
}

/// Layers up to this many elements (4096²) may give their kernels the dense values to fold;
/// larger ones keep them in device memory (the 3xTF32 fine kernel they run on reads them
/// there anyway, and a 16384² dense copy is 1 GiB per layer).
const FOLD_MAX_ELEMENTS: usize = 1 << 24;

fn fits_dense(k: usize, n: usize) -> bool {
    k * n <= FOLD_MAX_ELEMENTS
}

/// The largest sum of `|w|` over one column: with activations bounded by `a`, no output of the
/// product exceeds `a` times it.
fn max_column_abs_sum(w: &Csr) -> f64 {
    let mut sums = vec![0f64; w.cols];
    for (&c, &v) in w.indices.iter().zip(&w.values) {
        sums[c as usize] += f64::from(v.abs());
    }
    sums.into_iter().fold(0.0, f64::max)
}

/// Plans and specializes one `n × n` layer for `batch` rows (see the module docs); f64 layers and
/// fp32 layers under [`HpecOptions::gather_from`] go to [`compile_layer_gather`].
pub fn compile_layer(
    layer: &Csr,
    batch: usize,
    bias: bool,
    options: &HpecOptions,
) -> Result<LayerKernels, CodegenError> {
    let (k, n) = (layer.rows, layer.cols);
    if options.precision == Precision::F64 {
        return compile_layer_gather(layer, batch, options);
    }
    let gather = options.gather_from.is_some_and(|w| n >= w) && rows::gather_stages(n, false);
    layer.validate(true).map_err(spec_err)?;
    let plan_rows = options.plan_rows.unwrap_or(batch).clamp(1, batch);
    // The layer never takes its dense form (a 65,536-neuron layer's would be 16 GiB): it is
    // planned on its sparse mask and packed from the CSR.
    let mut plan_options = PlanOptions::default();
    if options.fine_only {
        plan_options.shapes = vec![crate::plan::cover::BlockShape::new(1, 1)];
        plan_options.dense = false;
    }
    let op = plan_sparse_weight("layer", layer, plan_rows, Default::default(), &plan_options)
        .map_err(|e| spec_err(e.to_string()))?;
    let planned: Vec<PlannedKernel<Csr>> = kernels_for_sparse_operator(&op, layer)?;
    if planned.is_empty() {
        return Err(spec_err("the planner gave no kernel for a layer".into()));
    }
    // A wide layer with element-sparse parts gathers from staged rows instead (its tiled
    // kernels' activation traffic grows with the width); one covered by blocks alone keeps them.
    if gather && planned.iter().any(|pk| pk.spec.block == (1, 1)) {
        return compile_layer_gather(layer, batch, options);
    }
    let last = planned.len() - 1;
    let mut parts = vec![];
    let mut labels = vec![];
    for (i, pk) in planned.into_iter().enumerate() {
        let mut spec = pk.spec;
        spec.m = batch;
        if i == last {
            spec.epilogue = Epilogue { bias, activation: Activation::Clip { lo: 0.0, hi: YMAX } };
        }
        spec.live_rows = true;
        spec.live_above = options.few_rows.unwrap_or(0);
        spec.engine = options.engine;
        if spec.block == (1, 1) && options.fine_tile.is_some() && options.engine != Engine::Simt {
            // The tile is a 3xTF32 fine tile: the engine follows it.
            spec.tile = options.fine_tile;
            spec.engine = Engine::Tf32x3;
        }
        let scatter = spec.block == (1, 1) && !spec.accumulate && options.scatter_from.is_some_and(|w| n >= w);
        let mut kernel = if scatter {
            // Inputs are capped at YMAX like every activation (checked in `lower`).
            let bound = f64::from(YMAX) * max_column_abs_sum(&pk.weight);
            crate::codegen::row_scatter::specialize(&spec, bound, options.sm_count)?
        } else {
            if options.fold_values && fits_dense(k, n) {
                spec.values = Some(pk.weight.to_dense());
            }
            specialize(&spec)?
        };
        stride_live_rows(&mut kernel, &spec, options.sm_count);
        if kernel.family == Family::Epilogue || kernel.prepass.is_some() {
            return Err(spec_err(format!(
                "layer kernel family {} is not built into the HPEC program",
                kernel.family.name()
            )));
        }
        labels.push(format!(
            "{}:{}x{}:{}{}",
            kernel.family.name(),
            kernel.block.0,
            kernel.block.1,
            kernel.live_instances,
            if kernel.values_embedded { ":folded" } else { "" }
        ));
        let weight = if kernel.values_embedded { vec![] } else { kernel.pack_weight(&pk.weight) };
        parts.push(LayerPart {
            ptr: tables(&kernel, true),
            idx: tables(&kernel, false),
            weight,
            name: kernel.name,
            source: kernel.source,
            launch: kernel.launch,
            tma_a: kernel.tma_a,
        });
    }
    if let Some(max_rows) = options.few_rows.filter(|&r| r > 0) {
        // The whole product (every nonzero, bias and cap) for few live rows; the parts above
        // skip it there.
        let nonzeros: Vec<(usize, usize)> = (0..k)
            .flat_map(|r| (layer.offsets[r] as usize..layer.offsets[r + 1] as usize).map(move |e| (r, e)))
            .map(|(r, e)| (r, layer.indices[e] as usize))
            .collect();
        let mut spec = crate::codegen::SpmmSpec::new(batch, k, n, Dtype::F32, (1, 1), nonzeros);
        spec.live_rows = true;
        spec.epilogue = Epilogue { bias, activation: Activation::Clip { lo: 0.0, hi: YMAX } };
        let kernel = crate::codegen::few_rows::specialize(&spec, max_rows.min(batch))?;
        labels.push(format!("{}<={max_rows}", kernel.family.name()));
        parts.push(LayerPart {
            ptr: vec![0],
            idx: kernel.device_idx(),
            weight: kernel.pack_weight(layer),
            name: kernel.name,
            source: kernel.source,
            launch: kernel.launch,
            tma_a: None,
        });
    }
    Ok(LayerKernels { parts, summary: labels.join(" + ") })
}

/// Label prefix of the f64 layers [`compile_layer_gather`] builds.
const EXACT_LABEL: &str = "exact_f64";

/// One `n × n` layer as [`rows::gather_layer`] (bias, ReLU and the cap fused) and its tables,
/// the layer's nonzeros as ELL slots in k order: k as u16 below 65,535 neurons, and the values
/// folded into the code when the layer has one value and `fold_values` asks (otherwise a value
/// table). With [`Precision::F64`] it is the f64 reference's arithmetic bit for bit; in fp32 it
/// is the layer kernel of layers at least [`HpecOptions::gather_from`] wide. Nothing is planned:
/// the rows' staging fixes the kernel.
pub fn compile_layer_gather(layer: &Csr, batch: usize, options: &HpecOptions) -> Result<LayerKernels, CodegenError> {
    layer.validate(true).map_err(spec_err)?;
    let t = rows::tail_tables(&[layer.view()])?;
    let f64 = options.precision == Precision::F64;
    let first = layer.values.first().copied();
    let value = first.filter(|v| options.fold_values && layer.values.iter().all(|x| x.to_bits() == v.to_bits()));
    let narrow = layer.cols < 0xffff;
    let g = rows::GatherLayer {
        n: layer.cols,
        slots: t.slots,
        max_rows: batch.max(1),
        clip_hi: YMAX,
        sm_count: options.sm_count,
        f64,
        value,
        narrow,
    };
    let k = rows::gather_layer(&g)?;
    let label = if f64 { EXACT_LABEL } else { "gather_f32" };
    Ok(LayerKernels {
        summary: format!("{label}:{}slots{}", t.slots, if value.is_some() { ":folded" } else { "" }),
        parts: vec![LayerPart {
            name: k.name,
            source: k.source,
            launch: k.launch,
            tma_a: None,
            ptr: vec![0],
            idx: if narrow { rows::narrow_idx(&t.idx) } else { t.idx },
            weight: if value.is_some() { vec![] } else { t.values },
        }],
    })
}

/// Where a layer kernel's constant inputs are: packed weight, `ptr`, `idx` (and their lengths).
struct PartBuffers {
    w: (BufferId, usize),
    ptr: (BufferId, usize),
    idx: (BufferId, usize),
}

/// The images of a run, as the program reads them (CSR over `neurons` columns).
pub struct HpecImages<'a> {
    pub n_images: usize,
    pub offsets: &'a [u32],
    pub indices: &'a [u32],
    pub values: &'a [f32],
}

/// What [`lower`] produced besides the program.
#[derive(Clone, Debug)]
pub struct HpecLowering {
    pub program: Program,
    /// The buffer of per-image category flags (u8, one per image).
    pub flags: BufferId,
    /// The counters buffer: element 0 the batch's rows, element c + 1 the rows after compaction c.
    pub live: BufferId,
    /// Packed weight bytes (values, tables) over all layers.
    pub weight_bytes: usize,
    pub streamed: bool,
    /// Per layer, what the planner and the specializer chose.
    pub layer_summaries: Vec<String>,
}

fn u32_data(v: &[u32]) -> Data {
    Data::I32(v.iter().map(|&x| x as i32).collect())
}

/// Lowers a network whose layers are compiled already (see [`compile_layer`]) to the program
/// of one batch. `layers[l]` is layer l's weight (kept in the program for the CPU executor)
/// for the layers before the tail, `kernels[l]` its kernels; `tail` the tables of the layers
/// after them ([`rows::tail_tables`]), which must start at [`HpecOptions::tail_start`];
/// `permutations` the boundaries that permute (`(l, columns)`: before layer `l`, the
/// activations move by [`Op::PermuteColumns`] with `columns`).
#[allow(clippy::too_many_arguments)] // the lowering's inputs are the compile's outputs, one each
pub fn lower(
    neurons: usize,
    bias: f32,
    layers: Vec<Csr>,
    kernels: Vec<LayerKernels>,
    tail: Option<rows::TailTables>,
    images: &HpecImages,
    options: &HpecOptions,
    permutations: &[(usize, Vec<u32>)],
) -> Result<HpecLowering, ProgramError> {
    let invalid = |message: String| ProgramError::Invalid { program: "hpec".into(), message };
    let n_tail = tail.as_ref().map_or(0, |t| t.layers);
    let n_layers = layers.len() + n_tail;
    let tail_start = options.tail_start(n_layers);
    if kernels.len() != layers.len() || tail_start != layers.len() || n_layers == 0 {
        return Err(invalid(format!(
            "{} layers before the tail ({tail_start} wanted), {n_tail} in it, {} compiled",
            layers.len(),
            kernels.len()
        )));
    }
    let f64 = options.precision == Precision::F64;
    if let Some(l) = kernels.iter().position(|k| k.summary.starts_with(EXACT_LABEL) != f64) {
        return Err(invalid(format!(
            "layer {l} was compiled for the other precision than {} ({})",
            options.precision.name(),
            kernels[l].summary
        )));
    }
    // The row kernels that only move or test rows see an f64 row as twice the 32-bit words.
    let words = if f64 { 2 * neurons } else { neurons };
    if let Some(t) = tail.as_ref().filter(|t| t.neurons != neurons) {
        return Err(invalid(format!("the tail's layers are {0}x{0}, the network has {neurons} neurons", t.neurons)));
    }
    if options.batch == 0 || images.n_images == 0 {
        return Err(invalid("a batch needs at least one image".into()));
    }
    if kernels.iter().any(|k| k.summary.contains("row_scatter")) && images.values.iter().any(|v| v.abs() > YMAX) {
        // The row-scatter kernels' fixed-point range assumes every input is within the cap.
        return Err(invalid(format!("an image value exceeds {YMAX} in magnitude (the row-scatter layers assume it)")));
    }
    let batch = options.batch.min(images.n_images);
    let name = format!("hpec_n{neurons}_l{}_b{batch}", layers.len());
    let mut b = ProgramBuilder::new(&name);
    let codegen = |e: CodegenError| invalid(e.to_string());

    // Inputs on the device: every image, as CSR.
    let img_off = b.constant("images.offsets", u32_data(images.offsets), false);
    let img_idx = b.constant("images.indices", u32_data(images.indices), false);
    let img_val = b.constant("images.values", Data::F32(images.values.to_vec()), false);
    let act_elem = if f64 { Elem::F64 } else { Elem::F32 };
    let act = [
        b.buffer("act0", act_elem, batch * neurons, Storage::Scratch),
        b.buffer("act1", act_elem, batch * neurons, Storage::Scratch),
    ];
    let ids =
        [b.buffer("ids0", Elem::I32, batch, Storage::Scratch), b.buffer("ids1", Elem::I32, batch, Storage::Scratch)];
    let compactions = (0..n_layers).filter(|&l| options.compacts_after(l, n_layers)).count();
    let live = b.buffer("live", Elem::I32, compactions + 1, Storage::Scratch);
    let bias_buf = b.constant("bias", Data::F32(vec![bias; neurons]), false);
    let flags = b.buffer("categories", Elem::U8, images.n_images, Storage::Output);
    let first = b.param("first_image", 0);
    // Merging compactions: the hash table, each row's slot, and per image its alias.
    let merging = (0..n_layers).any(|l| options.merges_after(l, n_layers));
    let merge = merging.then(|| {
        let slots = rows::merge_slots(batch);
        super::Merge {
            table: b.buffer("merge.table", Elem::I32, 3 * slots, Storage::Scratch),
            slots,
            row_slot: b.buffer("merge.row_slot", Elem::I32, batch, Storage::Scratch),
            alias: b.buffer("alias", Elem::I32, images.n_images, Storage::Scratch),
        }
    });

    // Weights: resident or streamed.
    let mut weight_bytes: usize =
        kernels.iter().flat_map(|l| &l.parts).map(|p| 4 * (p.weight.len() + p.ptr.len() + p.idx.len())).sum();
    // The tail's tables count toward the budget too: over it, they stream with the layers'.
    let tail_bytes = tail.as_ref().map_or(0, |t| 4 * (t.idx.len() + t.values.len()));
    let streamed = weight_bytes + tail_bytes > options.weight_budget;
    let slots = options.stream_slots.max(1);
    let max_parts = kernels.iter().map(|l| l.parts.len()).max().unwrap_or(0);
    // Streaming: per slot and part position, device buffers as large as the largest layer's.
    let mut slot_bufs: Vec<Vec<PartBuffers>> = vec![];
    if streamed {
        for s in 0..slots {
            let mut per_part = vec![];
            for p in 0..max_parts {
                let size = |f: &dyn Fn(&LayerPart) -> usize| {
                    kernels.iter().filter_map(|l| l.parts.get(p)).map(f).max().unwrap_or(1).max(1)
                };
                let (wl, pl, il) = (size(&|x| x.weight.len()), size(&|x| x.ptr.len()), size(&|x| x.idx.len()));
                per_part.push(PartBuffers {
                    w: (b.buffer(&format!("slot{s}.p{p}.w"), Elem::F32, wl, Storage::Scratch), wl),
                    ptr: (b.buffer(&format!("slot{s}.p{p}.ptr"), Elem::I32, pl, Storage::Scratch), pl),
                    idx: (b.buffer(&format!("slot{s}.p{p}.idx"), Elem::I32, il, Storage::Scratch), il),
                });
            }
            slot_bufs.push(per_part);
        }
    }

    let load = rows::load_rows(batch, neurons, images.n_images, compactions, merge.is_some(), f64).map_err(codegen)?;
    let load_k = b.kernel(&load.name, &load.source, 0);
    b.step(
        "load batch",
        Op::LoadRows {
            offsets: img_off,
            indices: img_idx,
            values: img_val,
            images: images.n_images,
            first,
            count: batch,
            cols: neurons,
            dst: act[0],
            ids: ids[0],
            live,
            at: 0,
            clear: compactions,
            alias: merge.map(|m| m.alias),
        },
        vec![rows_launch(
            load_k,
            &load,
            [Arg::Buf(img_off, 0), Arg::Buf(img_idx, 0), Arg::Buf(img_val, 0)]
                .into_iter()
                .chain([Arg::Buf(act[0], 0), Arg::Buf(ids[0], 0), Arg::Buf(live, 0)])
                .chain(merge.map(|m| Arg::Buf(m.alias, 0)))
                .chain([Arg::Param(first)])
                .collect(),
        )],
    );
    let compact = rows::compact_rows(batch, words).map_err(codegen)?;
    let compact_k = b.kernel(&compact.name, &compact.source, 0);
    let drop = match options.compact_in_place {
        true => {
            let ks = rows::drop_rows(batch, words).map_err(codegen)?;
            let ids = [0, 1, 2].map(|i| b.kernel(&ks[i].name, &ks[i].source, 0));
            let scratch = b.buffer("drop.scratch", Elem::I32, 3 * batch + 2, Storage::Scratch);
            Some((ks, ids, scratch))
        }
        false => None,
    };
    let merge_ks = match merge {
        Some(_) => {
            let (hash, pack) = rows::merge_rows(batch, words).map_err(codegen)?;
            let ids = (b.kernel(&hash.name, &hash.source, 0), b.kernel(&pack.name, &pack.source, 0));
            Some((hash, pack, ids))
        }
        None => None,
    };

    if let Some((l, c)) = permutations.iter().find(|(l, c)| *l == 0 || *l >= layers.len() || c.len() != neurons) {
        return Err(invalid(format!(
            "a permutation of {} columns before layer {l} (1..{} allowed)",
            c.len(),
            layers.len()
        )));
    }
    if f64 && !permutations.is_empty() {
        return Err(invalid("permuted boundaries need fp32 activations".into()));
    }
    let permute = match permutations.is_empty() {
        true => None,
        false => {
            let k = rows::permute_columns(batch, neurons, options.sm_count).map_err(codegen)?;
            let id = b.kernel(&k.name, &k.source, k.launch.smem_bytes);
            Some((k, id))
        }
    };

    let (mut cur, mut cur_ids, mut count_at) = (0usize, 0usize, 0usize);
    let mut summaries = vec![];
    for (l, (layer, lk)) in layers.into_iter().zip(kernels).enumerate() {
        if layer.rows != neurons || layer.cols != neurons {
            return Err(invalid(format!(
                "layer {l} is {}x{}, the network has {neurons} neurons",
                layer.rows, layer.cols
            )));
        }
        if let (Some(columns), Some((k, kid))) = (permutations.iter().find(|(at, _)| *at == l), &permute) {
            let table = b.constant(&format!("l{l}.columns"), u32_data(&columns.1), false);
            let (src, dst) = (act[cur], act[1 - cur]);
            b.step(
                &format!("neuron order before layer {l}"),
                Op::PermuteColumns { src, dst, cols: neurons, columns: table, live, at: count_at },
                vec![rows_launch(
                    *kid,
                    k,
                    vec![Arg::Buf(src, 0), Arg::Buf(table, 0), Arg::Buf(dst, 0), Arg::Buf(live, count_at)],
                )],
            );
            cur = 1 - cur;
        }
        summaries.push(lk.summary);
        let matrix = b.matrix(layer);
        let (a, c) = (act[cur], act[1 - cur]);
        let rows = Rows::Live { max: batch, count: live, at: count_at };
        let mut launches = vec![];
        let mut packed = vec![];
        for (p, kernel) in lk.parts.into_iter().enumerate() {
            // The packed tables move into the program (a 65,536-neuron layer's are ~100 MB:
            // no copy is kept beside them).
            let (pl, il) = (kernel.ptr.len(), kernel.idx.len());
            let wdata = if kernel.weight.is_empty() { vec![0.0] } else { kernel.weight };
            let wl = wdata.len();
            let (wdata, ptr, idx) = (Data::F32(wdata), Data::I32(kernel.ptr), Data::I32(kernel.idx));
            let sums = [wdata.checksum(), ptr.checksum(), idx.checksum()];
            let bufs = if streamed {
                // Host copies, then a copy step per table into this layer's slot.
                let slot = &slot_bufs[l % slots][p];
                let hw = b.constant(&format!("l{l}.p{p}.w"), wdata, true);
                let hp = b.constant(&format!("l{l}.p{p}.ptr"), ptr, true);
                let hi = b.constant(&format!("l{l}.p{p}.idx"), idx, true);
                for (src, dst, len) in [(hw, slot.w.0, wl), (hp, slot.ptr.0, pl), (hi, slot.idx.0, il)] {
                    b.step(
                        &format!("layer {l} stream in"),
                        Op::Move,
                        vec![Launch::Copy { src, src_at: 0, dst, dst_at: 0, len }],
                    );
                }
                PartBuffers { w: (slot.w.0, wl), ptr: (slot.ptr.0, pl), idx: (slot.idx.0, il) }
            } else {
                PartBuffers {
                    w: (b.constant(&format!("l{l}.p{p}.w"), wdata, false), wl),
                    ptr: (b.constant(&format!("l{l}.p{p}.ptr"), ptr, false), pl),
                    idx: (b.constant(&format!("l{l}.p{p}.idx"), idx, false), il),
                }
            };
            packed.push((bufs.w.0, bufs.w.1, sums[0]));
            packed.push((bufs.ptr.0, bufs.ptr.1, sums[1]));
            packed.push((bufs.idx.0, bufs.idx.1, sums[2]));
            let kid = b.kernel(&kernel.name, &kernel.source, kernel.launch.smem_bytes);
            let mut args = vec![
                Arg::Buf(a, 0),
                Arg::Buf(bufs.w.0, 0),
                Arg::Buf(bufs.ptr.0, 0),
                Arg::Buf(bufs.idx.0, 0),
                Arg::Buf(bias_buf, 0),
                Arg::Buf(c, 0),
            ];
            if let Some(tma) = kernel.tma_a {
                args.push(Arg::TensorMap { buf: a, rows: batch, cols: neurons, tma });
            }
            args.push(Arg::Buf(live, count_at));
            launches.push(Launch::Kernel { kernel: kid, grid: kernel.launch.grid, block: kernel.launch.block, args });
        }
        if launches.is_empty() {
            return Err(invalid(format!("layer {l} has no kernel")));
        }
        b.step(
            &format!("layer {l}"),
            Op::Spmm {
                a,
                c,
                rows,
                weight: matrix,
                packed,
                bias: Some(bias_buf),
                epilogue: Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: YMAX } },
                accumulate: false,
            },
            launches,
        );
        cur = 1 - cur;
        let in_place = drop.as_ref().filter(|_| !options.merges_after(l, n_layers));
        if let (true, Some((ks, kids, scratch))) = (options.compacts_after(l, n_layers), in_place) {
            let (buf, row_ids, scratch) = (act[cur], ids[cur_ids], *scratch);
            let (flags, holes, movers, counters) = (0, batch, 2 * batch, 3 * batch);
            b.step(
                &format!("compact after layer {l}"),
                Op::DropRows { buf, ids: row_ids, cols: neurons, live, at: count_at, scratch },
                vec![
                    Launch::Zero { dst: scratch, at: counters, len: 2 },
                    rows_launch(
                        kids[0],
                        &ks[0],
                        vec![Arg::Buf(buf, 0), Arg::Buf(live, count_at), Arg::Buf(scratch, flags)],
                    ),
                    rows_launch(
                        kids[1],
                        &ks[1],
                        vec![
                            Arg::Buf(live, count_at),
                            Arg::Buf(scratch, flags),
                            Arg::Buf(scratch, holes),
                            Arg::Buf(scratch, movers),
                            Arg::Buf(scratch, counters),
                        ],
                    ),
                    rows_launch(
                        kids[2],
                        &ks[2],
                        vec![
                            Arg::Buf(buf, 0),
                            Arg::Buf(row_ids, 0),
                            Arg::Buf(scratch, holes),
                            Arg::Buf(scratch, movers),
                            Arg::Buf(scratch, counters),
                        ],
                    ),
                ],
            );
            count_at += 1;
        } else if options.compacts_after(l, n_layers) {
            let (src, dst) = (act[cur], act[1 - cur]);
            let (sids, dids) = (ids[cur_ids], ids[1 - cur_ids]);
            let this_merge = merge.filter(|_| options.merges_after(l, n_layers));
            let launches = match (this_merge, &merge_ks) {
                (Some(m), Some((hash, pack, (hash_k, pack_k)))) => vec![
                    Launch::Zero { dst: m.table, at: 0, len: 3 * m.slots },
                    rows_launch(
                        *hash_k,
                        hash,
                        vec![
                            Arg::Buf(src, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(m.table, 0),
                            Arg::Buf(m.table, 2 * m.slots),
                            Arg::Buf(m.row_slot, 0),
                        ],
                    ),
                    rows_launch(
                        *pack_k,
                        pack,
                        vec![
                            Arg::Buf(src, 0),
                            Arg::Buf(sids, 0),
                            Arg::Buf(dst, 0),
                            Arg::Buf(dids, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(m.table, 2 * m.slots),
                            Arg::Buf(m.row_slot, 0),
                            Arg::Buf(m.alias, 0),
                        ],
                    ),
                ],
                _ => vec![rows_launch(
                    compact_k,
                    &compact,
                    vec![
                        Arg::Buf(src, 0),
                        Arg::Buf(sids, 0),
                        Arg::Buf(dst, 0),
                        Arg::Buf(dids, 0),
                        Arg::Buf(live, count_at),
                    ],
                )],
            };
            b.step(
                &format!("{} after layer {l}", if this_merge.is_some() { "compact + merge" } else { "compact" }),
                Op::CompactRows {
                    src,
                    src_ids: sids,
                    dst,
                    dst_ids: dids,
                    cols: neurons,
                    live,
                    at: count_at,
                    merge: this_merge,
                },
                launches,
            );
            cur = 1 - cur;
            cur_ids = 1 - cur_ids;
            count_at += 1;
        }
    }
    if let Some(t) = tail.filter(|t| t.layers > 0) {
        let slots = t.slots;
        weight_bytes += tail_bytes;
        summaries.extend((0..n_tail).map(|_| format!("tail:{slots}slots")));
        let table = slots * neurons;
        // Resident: one launch for the whole tail. Streamed: a launch per segment of
        // TAIL_STREAM_LAYERS layers, each segment's tables copied from pinned host memory into
        // one of `stream_slots` rotating device slots first (ordered after the segment that
        // last read the slot).
        let seg = if streamed { TAIL_STREAM_LAYERS.min(n_tail) } else { n_tail };
        let (idx_src, w_src) =
            (b.constant("tail.idx", Data::I32(t.idx), streamed), b.constant("tail.w", Data::F32(t.values), streamed));
        let tail_slots: Vec<(BufferId, BufferId)> = if streamed {
            (0..options.stream_slots.max(1))
                .map(|s| {
                    (
                        b.buffer(&format!("tail.slot{s}.idx"), Elem::I32, seg * table, Storage::Scratch),
                        b.buffer(&format!("tail.slot{s}.w"), Elem::F32, seg * table, Storage::Scratch),
                    )
                })
                .collect()
        } else {
            vec![(idx_src, w_src)]
        };
        let barrier = b.buffer("tail.barrier", Elem::I32, 1, Storage::Scratch);
        for (i, start) in (0..n_tail).step_by(seg).enumerate() {
            let len = seg.min(n_tail - start);
            let (idx_buf, w_buf) = tail_slots[i % tail_slots.len()];
            if streamed {
                for (src, dst) in [(idx_src, idx_buf), (w_src, w_buf)] {
                    b.step(
                        &format!("tail layers {} stream in", tail_start + start),
                        Op::Move,
                        vec![Launch::Copy { src, src_at: start * table, dst, dst_at: 0, len: len * table }],
                    );
                }
            }
            let kernel = rows::tail_layers(neurons, slots, len, batch, YMAX, options.sm_count, f64).map_err(codegen)?;
            let tail_k = b.kernel(&kernel.name, &kernel.source, 0);
            let (x, y) = (act[cur], act[1 - cur]);
            let (first_l, end_l) = (tail_start + start, tail_start + start + len);
            b.step(
                &if len == n_tail {
                    format!("layers {first_l}..{end_l} (one launch)")
                } else {
                    format!("layers {first_l}..{end_l} (one launch, streamed)")
                },
                Op::SpmmChain {
                    a: x,
                    c: y,
                    rows: Rows::Live { max: batch, count: live, at: count_at },
                    layers: len,
                    n: neurons,
                    slots,
                    idx: idx_buf,
                    w: w_buf,
                    bias: bias_buf,
                    epilogue: Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: YMAX } },
                },
                vec![
                    Launch::Zero { dst: barrier, at: 0, len: 1 },
                    rows_launch(
                        tail_k,
                        &kernel,
                        vec![
                            Arg::Buf(x, 0),
                            Arg::Buf(y, 0),
                            Arg::Buf(idx_buf, 0),
                            Arg::Buf(w_buf, 0),
                            Arg::Buf(bias_buf, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(barrier, 0),
                        ],
                    ),
                ],
            );
            if len % 2 == 1 {
                cur = 1 - cur;
            }
        }
    }
    let mark = rows::mark_rows(batch, words).map_err(codegen)?;
    let mark_k = b.kernel(&mark.name, &mark.source, 0);
    b.step(
        "categories",
        Op::MarkRows { src: act[cur], ids: ids[cur_ids], cols: neurons, live, at: count_at, flags },
        vec![rows_launch(
            mark_k,
            &mark,
            vec![Arg::Buf(act[cur], 0), Arg::Buf(ids[cur_ids], 0), Arg::Buf(live, count_at), Arg::Buf(flags, 0)],
        )],
    );
    if let Some(m) = merge {
        let resolve = rows::resolve_aliases(batch, images.n_images).map_err(codegen)?;
        let resolve_k = b.kernel(&resolve.name, &resolve.source, 0);
        b.step(
            "categories of merged images",
            Op::ResolveAliases { alias: m.alias, flags, first, count: batch, images: images.n_images },
            vec![rows_launch(resolve_k, &resolve, vec![Arg::Buf(m.alias, 0), Arg::Buf(flags, 0), Arg::Param(first)])],
        );
    }
    let program = b.finish()?;
    Ok(HpecLowering { program, flags, live, weight_bytes, streamed, layer_summaries: summaries })
}

/// A kernel's `ptr` (or `idx`) table as its launch reads it: the table when it streams, one
/// unread word when the pattern is in the code.
fn tables(kernel: &crate::codegen::Kernel, ptr: bool) -> Vec<i32> {
    let t = if ptr { kernel.ptr.clone() } else { kernel.device_idx() };
    if kernel.mode == Mode::IndexStream && !t.is_empty() {
        t
    } else {
        vec![0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
