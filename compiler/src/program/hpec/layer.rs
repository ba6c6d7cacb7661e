//! One layer's kernels ([`LayerKernels`]): planned and specialized ([`compile_layer`]) or
//! built as a gather from staged rows ([`compile_layer_gather`]), and their binary form, which
//! stores a compiled layer so that it is read back instead of compiled again.

use super::{HpecOptions, Precision, YMAX};
use crate::codegen::from_plan::{kernels_for_sparse_operator, PlannedKernel};
use crate::codegen::{
    rows, specialize, stride_live_rows, Activation, CodegenError, Dtype, Engine, Epilogue, Family, Mode,
};
use crate::plan::{plan_sparse_weight, PlanOptions};
use crate::sparse::Csr;

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
        let sum = crate::program::checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads [`LayerKernels::to_bytes`]' form back; `None` when it is truncated, corrupted (the
    /// checksum fails) or of another version.
    pub fn from_bytes(data: &[u8]) -> Option<LayerKernels> {
        let body_len = data.len().checked_sub(8)?;
        let (body, sum) = data.split_at(body_len);
        if !body.starts_with(LAYER_MAGIC) || crate::program::checksum(body).to_le_bytes() != sum {
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
pub(super) const EXACT_LABEL: &str = "exact_f64";

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
