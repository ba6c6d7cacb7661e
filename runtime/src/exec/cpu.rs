//! Runs a [`Program`] on the host: the same buffers, the same steps in the same order, each
//! op's semantics computed in f32 (f64 accumulation for matmuls); a product between f64
//! buffers computes as the f64 reference does, bit for bit (the HPEC f64 program). This is how a program is
//! tested without a GPU: a step that reads a weight slot before its copy landed, a counter
//! that was never set, or a row range past a buffer fails here as it would corrupt the GPU run.

use spartac::ir::{DType, Tensor};
use spartac::ops::{registry, NodeCtx};
use spartac::program::{BufferId, Data, Elem, Launch, NodeOp, Op, Operand, Program, Rows, Storage};
use std::collections::HashMap;

use super::ExecError;

/// Host memory of every buffer of a program, as little-endian bytes.
pub struct CpuMemory {
    bufs: Vec<Vec<u8>>,
    /// Whether each buffer's bytes were ever written (constants and inputs start written).
    written: Vec<bool>,
}

impl CpuMemory {
    /// Buffers allocated and constants filled; inputs, outputs and scratch zeroed.
    pub fn new(program: &Program) -> CpuMemory {
        let bufs = program
            .buffers
            .iter()
            .map(|b| match &b.storage {
                Storage::Constant(d) | Storage::Host(d) => d.to_bytes(),
                _ => vec![0u8; b.bytes()],
            })
            .collect();
        let written = program.buffers.iter().map(|b| !matches!(b.storage, Storage::Scratch)).collect();
        CpuMemory { bufs, written }
    }

    /// Sets a buffer's bytes (an input).
    pub fn set_bytes(&mut self, id: BufferId, bytes: Vec<u8>) -> Result<(), String> {
        let b = &mut self.bufs[id.0 as usize];
        if bytes.len() != b.len() {
            return Err(format!("buffer {}: {} bytes given for {}", id.0, bytes.len(), b.len()));
        }
        *b = bytes;
        self.written[id.0 as usize] = true;
        Ok(())
    }

    pub fn bytes(&self, id: BufferId) -> &[u8] {
        &self.bufs[id.0 as usize]
    }

    pub fn set(&mut self, id: BufferId, data: &Data) -> Result<(), ExecError> {
        let b = &mut self.bufs[id.0 as usize];
        let bytes = data.to_bytes();
        if bytes.len() != b.len() {
            return Err(ExecError::Shape(format!("buffer {}: {} bytes given for {}", id.0, bytes.len(), b.len())));
        }
        *b = bytes;
        self.written[id.0 as usize] = true;
        Ok(())
    }

    fn f32s(&self, id: BufferId) -> Vec<f32> {
        self.bufs[id.0 as usize].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
    /// A float buffer (f32, f16 or bf16) widened to f32.
    fn floats(&self, id: BufferId, elem: Elem) -> Vec<f32> {
        let b = &self.bufs[id.0 as usize];
        match elem {
            Elem::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Elem::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            _ => self.f32s(id),
        }
    }
    /// Stores `values` into a float buffer of `elem` (rounded to nearest for 16 bits).
    fn store_floats(&mut self, id: BufferId, elem: Elem, values: &[f32]) {
        let dst = &mut self.bufs[id.0 as usize];
        for (i, v) in values.iter().enumerate() {
            match elem {
                Elem::F16 => dst[2 * i..2 * i + 2].copy_from_slice(&half::f16::from_f32(*v).to_le_bytes()),
                Elem::BF16 => dst[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes()),
                _ => dst[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
            }
        }
    }
    fn f64s(&self, id: BufferId) -> Vec<f64> {
        self.bufs[id.0 as usize].chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
    }
    fn store_f64s(&mut self, id: BufferId, values: &[f64]) {
        let dst = &mut self.bufs[id.0 as usize];
        for (d, v) in dst.chunks_exact_mut(8).zip(values) {
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
    fn i32s(&self, id: BufferId) -> Vec<i32> {
        self.bufs[id.0 as usize].chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
    fn i32_at(&self, id: BufferId, at: usize) -> i32 {
        let b = &self.bufs[id.0 as usize][4 * at..4 * at + 4];
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn set_i32(&mut self, id: BufferId, at: usize, v: i32) {
        self.bufs[id.0 as usize][4 * at..4 * at + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn f32_at(&self, id: BufferId, at: usize) -> f32 {
        let b = &self.bufs[id.0 as usize][4 * at..4 * at + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn set_f32(&mut self, id: BufferId, at: usize, v: f32) {
        self.bufs[id.0 as usize][4 * at..4 * at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// Runs every step of `program` in order on `mem`, with the per-run parameters `params`.
pub fn run(program: &Program, mem: &mut CpuMemory, params: &[i32]) -> Result<(), ExecError> {
    if params.len() != program.params.len() {
        return Err(ExecError::Shape(format!(
            "{} parameters given, the program takes {}",
            params.len(),
            program.params.len()
        )));
    }
    for (i, step) in program.steps.iter().enumerate() {
        let fail = |m: String| ExecError::Step { step: i, label: step.label.clone(), message: m };
        for acc in program.accesses(i) {
            if !acc.write && !mem.written[acc.buf.0 as usize] {
                return Err(fail(format!("reads {} before any step wrote it", program.buffer(acc.buf).name)));
            }
        }
        run_op(program, mem, &step.op, params).map_err(fail)?;
        for l in &step.launches {
            match *l {
                Launch::Copy { src, src_at, dst, dst_at, len } => {
                    let e = program.buffer(src).elem.bytes();
                    let bytes = mem.bufs[src.0 as usize][e * src_at..e * (src_at + len)].to_vec();
                    mem.bufs[dst.0 as usize][e * dst_at..e * (dst_at + len)].copy_from_slice(&bytes);
                }
                Launch::Zero { dst, at, len } => {
                    let e = program.buffer(dst).elem.bytes();
                    mem.bufs[dst.0 as usize][e * at..e * (at + len)].fill(0);
                }
                // The step's op is what these compute; the executor ran it above.
                Launch::Kernel { .. } | Launch::Gemm { .. } => {}
            }
        }
        for acc in program.accesses(i) {
            if acc.write {
                mem.written[acc.buf.0 as usize] = true;
            }
        }
    }
    Ok(())
}

fn live_rows(mem: &CpuMemory, rows: &Rows) -> Result<usize, String> {
    match *rows {
        Rows::All(m) => Ok(m),
        Rows::Live { max, count, at } => {
            let v = mem.i32_at(count, at);
            usize::try_from(v).ok().filter(|&v| v <= max).ok_or_else(|| format!("live row count {v} outside 0..={max}"))
        }
    }
}

/// Whether row `r` of a float buffer of `elem` (`cols` elements a row) holds a nonzero.
fn row_nonzero(mem: &CpuMemory, buf: BufferId, elem: Elem, r: usize, cols: usize) -> bool {
    let e = elem.bytes();
    let row = &mem.bufs[buf.0 as usize][e * r * cols..e * (r + 1) * cols];
    match elem {
        Elem::F64 => row.chunks_exact(8).any(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) != 0.0),
        _ => row.chunks_exact(4).any(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 0.0),
    }
}

/// The tensor of an operand: a buffer's bytes decoded as its dtype, a temporary of the group,
/// or a scalar.
fn read_operand(mem: &CpuMemory, temps: &HashMap<u32, Tensor>, o: &Operand) -> Result<Tensor, String> {
    match o {
        Operand::Buf { buf, dtype, shape } => {
            // A value may live in the front of a longer (reused) buffer.
            let len = dtype.size_bytes() * shape.iter().product::<usize>();
            let bytes = mem.bytes(*buf);
            let front = bytes.get(..len).ok_or_else(|| format!("a buffer of {} bytes holds no {len}", bytes.len()))?;
            tensor_of_bytes(front, *dtype, shape)
        }
        Operand::Temp { id, .. } => {
            temps.get(id).cloned().ok_or_else(|| format!("temporary t{id} read before it was made"))
        }
        Operand::Scalar { dtype, value } => {
            Ok(Tensor::new(vec![], spartac::ir::Data::from_f64_iter(*dtype, std::iter::once(*value))).expect("scalar"))
        }
    }
}

/// A buffer's little-endian bytes as a tensor of `dtype` and `shape` (booleans from bytes).
pub fn tensor_of_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    let data = if dtype == DType::Bool {
        spartac::ir::Data::Bool(bytes.iter().take(n).map(|&b| b != 0).collect())
    } else {
        let size = dtype.size_bytes();
        let need = n * size;
        if bytes.len() < need {
            return Err(format!("buffer of {} bytes read as {n} {}", bytes.len(), dtype.name()));
        }
        spartac::ir::Data::from_le_bytes(dtype, &bytes[..need]).ok_or_else(|| format!("bytes as {}", dtype.name()))?
    };
    Tensor::new(shape.to_vec(), data).ok_or_else(|| "tensor shape".to_string())
}

/// A tensor's bytes as a buffer holds them (booleans as bytes 0/1).
pub fn bytes_of_tensor(t: &Tensor) -> Vec<u8> {
    match t.data() {
        spartac::ir::Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
        d => d.to_le_bytes(),
    }
}

/// Runs the nodes of one [`Op::Nodes`] step with the reference ops.
fn run_nodes(mem: &mut CpuMemory, nodes: &[NodeOp]) -> Result<(), String> {
    let mut temps: HashMap<u32, Tensor> = HashMap::new();
    for n in nodes {
        let def = registry().get(&n.op_type).ok_or_else(|| format!("node {}: unknown op {}", n.name, n.op_type))?;
        let ins: Vec<Option<Tensor>> = n
            .inputs
            .iter()
            .map(|o| o.as_ref().map(|o| read_operand(mem, &temps, o)).transpose())
            .collect::<Result<_, _>>()?;
        let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
        let ctx = NodeCtx { name: &n.name, attrs: &n.attrs, opset: n.opset, n_outputs: n.outputs.len() };
        let outs = (def.eval)(&ctx, &refs).map_err(|e| format!("node {} ({}): {e}", n.name, n.op_type))?;
        for (o, t) in n.outputs.iter().zip(outs) {
            let want: usize = o.shape().iter().product();
            if t.dtype() != o.dtype() || t.len() != want {
                return Err(format!(
                    "node {} ({}) made {}{:?}, the program expects {}{:?}",
                    n.name,
                    n.op_type,
                    t.dtype().name(),
                    t.shape(),
                    o.dtype().name(),
                    o.shape()
                ));
            }
            match o {
                Operand::Buf { buf, .. } => {
                    let bytes = bytes_of_tensor(&t);
                    let dst = &mut mem.bufs[buf.0 as usize];
                    if dst.len() < bytes.len() {
                        return Err(format!(
                            "node {}: output of {} bytes into a buffer of {}",
                            n.name,
                            bytes.len(),
                            dst.len()
                        ));
                    }
                    dst[..bytes.len()].copy_from_slice(&bytes);
                }
                Operand::Temp { id, .. } => {
                    temps.insert(*id, t);
                }
                Operand::Scalar { .. } => return Err(format!("node {}: writes a scalar", n.name)),
            }
        }
    }
    Ok(())
}

/// Fails when a packed weight buffer does not hold what the compiler packed (a copy that has
/// not landed).
fn check_packed(program: &Program, mem: &CpuMemory, packed: &[(BufferId, usize, u64)]) -> Result<(), String> {
    for &(buf, len, sum) in packed {
        let size = program.buffer(buf).elem.bytes();
        let got = spartac::program::checksum(&mem.bufs[buf.0 as usize][..size * len]);
        if got != sum {
            return Err(format!(
                "weight buffer {} does not hold the packed weight this layer reads (copy not landed?)",
                program.buffer(buf).name
            ));
        }
    }
    Ok(())
}

/// `epilogue(A[r, :] · w (+ prev[r, :]))` for the first `live` rows of `av`. Rows in parallel;
/// each row's sum in f64, in k order (a CSR scan, zero activations skipped: the f64
/// reference's order), whatever the threads. With `f32`, the rows are f32 ones: the sum is
/// rounded to f32 before the epilogue and after it; otherwise every product and sum is rounded
/// in f64 alone, as the f64 reference computes.
fn spmm_rows(
    w: &spartac::program::Csr,
    av: &[f64],
    live: usize,
    bias: &[f32],
    epilogue: &spartac::codegen::Epilogue,
    prev: Option<&[f64]>,
    f32: bool,
) -> Vec<f64> {
    use rayon::prelude::*;
    let n = w.cols;
    let mut out = vec![0.0f64; live * n];
    // Each weight row as runs of consecutive columns (a dense row is one run, a block row one
    // per block): a run's updates are one slice loop the compiler vectorizes, the same
    // products and sums in the same order as element by element.
    let mut runs: Vec<Vec<(usize, usize, usize)>> = Vec::with_capacity(w.rows);
    for kk in 0..w.rows {
        let (lo, hi) = (w.offsets[kk] as usize, w.offsets[kk + 1] as usize);
        let mut row = vec![];
        let mut e = lo;
        while e < hi {
            let mut end = e + 1;
            while end < hi && w.indices[end] == w.indices[end - 1] + 1 {
                end += 1;
            }
            row.push((w.indices[e] as usize, e, end - e));
            e = end;
        }
        runs.push(row);
    }
    out.par_chunks_mut(n).enumerate().for_each(|(r, acc)| {
        if let Some(prev) = prev {
            acc.copy_from_slice(&prev[r * n..(r + 1) * n]);
        }
        let arow = &av[r * w.rows..(r + 1) * w.rows];
        for (kk, &x) in arow.iter().enumerate() {
            if x == 0.0 {
                continue;
            }
            for &(j0, e0, len) in &runs[kk] {
                for (a, &v) in acc[j0..j0 + len].iter_mut().zip(&w.values[e0..e0 + len]) {
                    *a += x * v as f64;
                }
            }
        }
        for (o, b) in acc.iter_mut().zip(bias) {
            *o = if f32 {
                epilogue.apply(*o as f32 as f64, *b as f64) as f32 as f64
            } else {
                epilogue.apply(*o, *b as f64)
            };
        }
    });
    out
}

/// A product with LayerNorm work around its epilogue (`SpmmNorm`, in its order): the rows of
/// C's type as stored (values rounded to `elem`).
fn spmm_norm(
    program: &Program,
    mem: &CpuMemory,
    nm: &spartac::program::SpmmNorm,
    (w, av, live): (&spartac::program::Csr, &[f64], usize),
    bias: &[f32],
    epilogue: &spartac::codegen::Epilogue,
    elem: Elem,
) -> Vec<f64> {
    let n = w.cols;
    // C's type is a float one (f32, f16 or bf16): the caller checked it is not f64.
    let round = |x: f64| elem.round(x);
    let mut out = match &nm.input {
        Some(input) => {
            // The sums rounded to f32 as the kernel accumulates them, then the normalization.
            let plain = spartac::codegen::Epilogue { bias: false, activation: spartac::codegen::Activation::None };
            let mut out = spmm_rows(w, av, live, &vec![0.0; n], &plain, None, true);
            let stats = combined_stats(mem, &input.stats, live, w.rows);
            let colsum = mem.floats(input.colsum, Elem::F32);
            for (r, row) in out.chunks_mut(n).enumerate() {
                let (mean, rstd) = stats[r];
                for (j, o) in row.iter_mut().enumerate() {
                    *o = epilogue.apply(rstd * (*o - mean * colsum[j] as f64), bias[j] as f64);
                }
            }
            out
        }
        None => spmm_rows(w, av, live, bias, epilogue, None, true),
    };
    if let Some(res) = &nm.residual {
        let rv = mem.floats(res.buf, program.buffer(res.buf).elem);
        let affine = res.affine.map(|af| {
            (combined_stats(mem, &af.stats, live, n), mem.floats(af.gamma, Elem::F32), mem.floats(af.beta, Elem::F32))
        });
        for (r, row) in out.chunks_mut(n).enumerate() {
            for (j, o) in row.iter_mut().enumerate() {
                let x = rv[r * n + j] as f64;
                let x = match &affine {
                    Some((st, g, b)) => (x - st[r].0) * st[r].1 * g[j] as f64 + b[j] as f64,
                    None => x,
                };
                *o = round(round(*o) + x);
            }
        }
    } else {
        out.iter_mut().for_each(|o| *o = round(*o));
    }
    out
}

/// Each of the first `live` rows' (mean, 1/sqrt(var + eps)) from its sums in `st` (rows of `n`
/// columns).
fn combined_stats(mem: &CpuMemory, st: &spartac::program::RowStats, live: usize, n: usize) -> Vec<(f64, f64)> {
    let s = mem.f64s(st.sums);
    (0..live)
        .map(|r| {
            let mean = s[st.at + 2 * r] / n as f64;
            let var = (s[st.at + 2 * r + 1] / n as f64 - mean * mean).max(0.0);
            (mean, 1.0 / (var + st.eps as f64).sqrt())
        })
        .collect()
}

fn run_op(program: &Program, mem: &mut CpuMemory, op: &Op, params: &[i32]) -> Result<(), String> {
    match op {
        Op::Move => Ok(()),
        Op::Nodes(nodes) => run_nodes(mem, nodes),
        Op::Spmm { a, c, rows, weight, packed, bias, epilogue, accumulate, norm } => {
            check_packed(program, mem, packed)?;
            let w = &program.matrices[*weight];
            let live = live_rows(mem, rows)?;
            let (a_elem, c_elem) = (program.buffer(*a).elem, program.buffer(*c).elem);
            let bias: Vec<f32> =
                bias.map(|b| mem.floats(b, program.buffer(b).elem)).unwrap_or_else(|| vec![0.0; w.cols]);
            let f64 = a_elem == Elem::F64;
            if f64 != (c_elem == Elem::F64) || (f64 && *accumulate) {
                return Err(format!("a product from {} into {}", a_elem.name(), c_elem.name()));
            }
            let widened = |buf| -> Vec<f64> {
                if f64 {
                    mem.f64s(buf)
                } else {
                    mem.floats(buf, program.buffer(buf).elem).into_iter().map(f64::from).collect()
                }
            };
            let av = widened(*a);
            let prev = if *accumulate { widened(*c) } else { vec![] };
            let out = match norm {
                Some(nm) => {
                    if f64 || *accumulate {
                        return Err("LayerNorm work around an f64 or accumulating product".into());
                    }
                    spmm_norm(program, mem, nm, (w, &av, live), &bias, epilogue, c_elem)
                }
                None => spmm_rows(w, &av, live, &bias, epilogue, accumulate.then_some(&prev[..]), !f64),
            };
            if let Some(st) = norm.as_ref().and_then(|nm| nm.stats) {
                let mut sums = mem.f64s(st.sums);
                for (r, row) in out.chunks(w.cols).enumerate() {
                    sums[st.at + 2 * r] = row.iter().sum();
                    sums[st.at + 2 * r + 1] = row.iter().map(|x| x * x).sum();
                }
                mem.store_f64s(st.sums, &sums);
            }
            if f64 {
                mem.store_f64s(*c, &out);
            } else {
                mem.store_floats(*c, c_elem, &out.iter().map(|&x| x as f32).collect::<Vec<f32>>());
            }
            Ok(())
        }
        Op::SpmmChain { a, c, rows, layers, n, slots, idx, w, bias, epilogue } => {
            // From the tables the kernel reads: each column's slots in order (k ascending, as
            // a CSR scan adds them), sums in f64.
            let live = live_rows(mem, rows)?;
            let bias = mem.floats(*bias, program.buffer(*bias).elem);
            let ks = mem.i32s(*idx);
            let ws = mem.floats(*w, Elem::F32);
            let (n, slots) = (*n, *slots);
            let (elem, mut from, mut to) = (program.buffer(*a).elem, *a, *c);
            // f64 rows: every product and sum rounded in f64 (the f64 tail's arithmetic); f32
            // rows: the sum in f64, rounded to f32 before the epilogue and after it.
            let f64 = elem == Elem::F64;
            for l in 0..*layers {
                let av: Vec<f64> =
                    if f64 { mem.f64s(from) } else { mem.floats(from, elem).into_iter().map(f64::from).collect() };
                let (lk, lw) = (&ks[l * slots * n..(l + 1) * slots * n], &ws[l * slots * n..(l + 1) * slots * n]);
                let mut out = vec![0f64; live * n];
                use rayon::prelude::*;
                out.par_chunks_mut(n).enumerate().for_each(|(r, orow)| {
                    let arow = &av[r * n..(r + 1) * n];
                    for (col, o) in orow.iter_mut().enumerate() {
                        let mut acc = 0f64;
                        for s in 0..slots {
                            let k = lk[s * n + col];
                            if k >= 0 {
                                acc += arow[k as usize] * lw[s * n + col] as f64;
                            }
                        }
                        let b = bias[col] as f64;
                        *o = if f64 {
                            epilogue.apply(acc, b)
                        } else {
                            epilogue.apply(acc as f32 as f64, b) as f32 as f64
                        };
                    }
                });
                if f64 {
                    mem.store_f64s(to, &out);
                } else {
                    mem.store_floats(to, elem, &out.iter().map(|&x| x as f32).collect::<Vec<f32>>());
                }
                std::mem::swap(&mut from, &mut to);
            }
            Ok(())
        }
        Op::LoadRows { offsets, indices, values, images, first, count, cols, dst, ids, live, at, clear, alias } => {
            let first = params[first.0 as usize];
            let first = usize::try_from(first).map_err(|_| format!("negative first row {first}"))?;
            let avail = images.saturating_sub(first).min(*count);
            let elem = program.buffer(*dst).elem;
            let size = elem.bytes();
            for r in 0..avail {
                let row = first + r;
                let (b, e) = (mem.i32_at(*offsets, row) as usize, mem.i32_at(*offsets, row + 1) as usize);
                let base = r * cols;
                mem.bufs[dst.0 as usize][size * base..size * (base + cols)].fill(0);
                for i in b..e {
                    let col = mem.i32_at(*indices, i) as usize;
                    if col >= *cols {
                        return Err(format!("row {row} has column {col} of {cols}"));
                    }
                    let v = mem.f32_at(*values, i);
                    if elem == Elem::F64 {
                        let at = 8 * (base + col);
                        mem.bufs[dst.0 as usize][at..at + 8].copy_from_slice(&(v as f64).to_le_bytes());
                    } else {
                        mem.set_f32(*dst, base + col, v);
                    }
                }
                mem.set_i32(*ids, r, row as i32);
                if let Some(alias) = alias {
                    mem.set_i32(*alias, row, 0);
                }
            }
            mem.set_i32(*live, *at, avail as i32);
            for j in 1..=*clear {
                mem.set_i32(*live, at + j, 0);
            }
            Ok(())
        }
        Op::CompactRows { src, src_ids, dst, dst_ids, cols, live, at, merge } => {
            let n = live_rows(mem, &Rows::Live { max: program.buffer(*src_ids).len, count: *live, at: *at })?;
            if mem.i32_at(*live, at + 1) != 0 {
                return Err("the compaction's counter does not start at zero".into());
            }
            let mut slot = 0usize;
            let elem = program.buffer(*src).elem;
            let e = elem.bytes();
            // With a merge: the first row of each distinct content stands for the later ones.
            let mut kept: std::collections::HashMap<Vec<u8>, i32> = Default::default();
            for r in 0..n {
                if let Some(m) = merge {
                    mem.set_i32(m.row_slot, r, -1);
                }
                if !row_nonzero(mem, *src, elem, r, *cols) {
                    continue;
                }
                let bytes = mem.bufs[src.0 as usize][e * r * cols..e * (r + 1) * cols].to_vec();
                if let Some(m) = merge {
                    let id = mem.i32_at(*src_ids, r);
                    if let Some(&rep) = kept.get(&bytes) {
                        let at = usize::try_from(id).map_err(|_| format!("image id {id} out of range"))?;
                        if at >= program.buffer(m.alias).len {
                            return Err(format!("image id {id} out of range"));
                        }
                        mem.set_i32(m.alias, at, rep + 1);
                        continue;
                    }
                    kept.insert(bytes.clone(), id);
                }
                mem.bufs[dst.0 as usize][e * slot * cols..e * (slot + 1) * cols].copy_from_slice(&bytes);
                let id = mem.i32_at(*src_ids, r);
                mem.set_i32(*dst_ids, slot, id);
                slot += 1;
            }
            mem.set_i32(*live, at + 1, slot as i32);
            Ok(())
        }
        Op::ResolveAliases { alias, flags, first, count, images } => {
            let first = params[first.0 as usize];
            let first = usize::try_from(first).map_err(|_| format!("negative first row {first}"))?;
            let end = (first + count).min(*images);
            for i in first..end {
                let (mut x, mut hops) = (i, 0);
                while mem.i32_at(*alias, x) != 0 {
                    let next = mem.i32_at(*alias, x) - 1;
                    x = usize::try_from(next)
                        .ok()
                        .filter(|&j| j < *images)
                        .ok_or_else(|| format!("alias {next} out of range"))?;
                    hops += 1;
                    if hops > *count {
                        return Err(format!("image {i}: the aliases form a cycle"));
                    }
                }
                if x != i && mem.bufs[flags.0 as usize][x] != 0 {
                    mem.bufs[flags.0 as usize][i] = 1;
                }
            }
            Ok(())
        }
        Op::DropRows { buf, ids, cols, live, at, .. } => {
            let n = live_rows(mem, &Rows::Live { max: program.buffer(*ids).len, count: *live, at: *at })?;
            if mem.i32_at(*live, at + 1) != 0 {
                return Err("the drop's counter does not start at zero".into());
            }
            let elem = program.buffer(*buf).elem;
            let flags: Vec<bool> = (0..n).map(|r| row_nonzero(mem, *buf, elem, r, *cols)).collect();
            let kept = flags.iter().filter(|&&f| f).count();
            // Dropped places below the count, filled in order by the kept rows above it.
            let holes = (0..kept).filter(|&r| !flags[r]);
            let movers = (kept..n).filter(|&r| flags[r]);
            let row = elem.bytes() * cols;
            for (to, from) in holes.zip(movers) {
                mem.bufs[buf.0 as usize].copy_within(row * from..row * (from + 1), row * to);
                let id = mem.i32_at(*ids, from);
                mem.set_i32(*ids, to, id);
            }
            mem.set_i32(*live, at + 1, kept as i32);
            Ok(())
        }
        Op::PermuteColumns { src, dst, cols, columns, live, at } => {
            let n =
                live_rows(mem, &Rows::Live { max: program.buffer(*src).len / cols.max(&1), count: *live, at: *at })?;
            let map: Vec<usize> = (0..*cols).map(|p| mem.i32_at(*columns, p) as usize).collect();
            if map.iter().any(|&q| q >= *cols) {
                return Err("a column permutation points past the row".into());
            }
            for r in 0..n {
                for (p, &q) in map.iter().enumerate() {
                    let v = mem.f32_at(*src, r * cols + q);
                    mem.set_f32(*dst, r * cols + p, v);
                }
            }
            Ok(())
        }
        Op::MarkRows { src, ids, cols, live, at, flags } => {
            let n = live_rows(mem, &Rows::Live { max: program.buffer(*ids).len, count: *live, at: *at })?;
            let n_flags = program.buffer(*flags).len;
            let elem = program.buffer(*src).elem;
            for r in 0..n {
                if row_nonzero(mem, *src, elem, r, *cols) {
                    let id = mem.i32_at(*ids, r);
                    let id = usize::try_from(id)
                        .ok()
                        .filter(|&i| i < n_flags)
                        .ok_or_else(|| format!("image id {id} out of range"))?;
                    mem.bufs[flags.0 as usize][id] = 1;
                }
            }
            Ok(())
        }
    }
}

/// The elements of an output buffer as f32 (for `Elem::F32` buffers) or bytes.
pub fn read_u8(mem: &CpuMemory, id: BufferId) -> Vec<u8> {
    mem.bytes(id).to_vec()
}
