//! The fine-grained kernel dismantled down to the element (SparTA §3.3, `dismantle` at the
//! innermost level): every nonzero of the weight becomes one multiply-add instruction whose
//! accumulator (the output column) and dense operand (the k) are fixed in the code, and whose
//! weight is an immediate operand when the values are known, else a warp-uniform vector load
//! of the weight packed in code order.
//!
//! Right orientation, fp32 (`C = A · W`, W element-sparse `K × N`). The loop kernel
//! (`spmm/fine.rs`, [`Family::Fine`]) spends one shared-memory load per multiply-add, plus the
//! broadcasts of each entry's offset and weight. Here each lane owns one row of A and `nt`
//! output columns in registers; one 16-byte shared load gives the lane four consecutive k of
//! its row, and every nonzero of W in those four rows of the warp's columns is then one FFMA
//! on values already in registers. The price is code size (one instruction per nonzero) and
//! instruction fetch where no other CTA on the SM runs the same code, so `Mode::Auto` takes it
//! only where it measured faster: under 1.5% kept, N ≤ 256, within `SpmmSpec::unroll_budget`
//! (run 12, `benches/results/spmm_gpu.md`). `Mode::Unrolled` or a dismantled `Tile` also
//! select it. That rule and the tiling are the planner's too, so they live in
//! [`crate::kernel_choice::dismantled`].
//!
//! Layout: a warp computes a 32-row × `nt`-column tile of C (a *segment* of `nt` columns);
//! the `ws` warps of a CTA take `ws` consecutive segments over the same 32 rows of A, which
//! stream into shared memory (rows as they are, `KC`-deep chunks, cp.async, a ring of
//! `stages` chunks, all of K when it fits). The code of one (segment, chunk) is one
//! `__noinline__` function (a *piece*) picked by a switch in the kernel's chunk loop, which
//! holds the barriers; the accumulators stay in shared memory between pieces, so NVRTC and
//! ptxas only ever see small functions (their time grows faster than linearly with length).

use crate::codegen::loopnest::{Level, LoopNest};
use crate::codegen::render::{render, KernelHead};
use crate::codegen::spmm::kernel::{entry_flops, packer, Family, FamilyOps, Kernel, Launch};
use crate::codegen::spmm::shared::{kernel_head, spec_err};
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};
use crate::kernel_choice::dismantled::{Tiling, BM};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// Shared memory the ring may take when K does not fit whole (bytes), leaving room for two
/// or three CTAs per SM.
const RING_BYTES: usize = 72 * 1024;
/// Shared memory that may hold all of K's chunks at once (bytes): one CTA per SM.
const RESIDENT_BYTES: usize = 160 * 1024;
/// SMs of the target GPU (H100/H200).
const SMS: usize = 132;
/// Most nonzeros any dismantled kernel holds (one instruction each: ~4 MB of code, minutes of
/// NVRTC and ptxas), whatever the mode asks.
const MAX_NONZEROS: usize = 1 << 18;

/// One multiply-add: `acc[j] += a.{comp} * weight`.
#[derive(Clone, Debug, Serialize)]
struct Fma {
    j: usize,
    /// Component of the lane's four k (`x`, `y`, `z`, `w`).
    a: &'static str,
    /// The weight's raw bits (embedded values), else empty.
    lit: String,
    /// Streamed values: the float4 of packed weights holding it, its component, and whether
    /// this multiply-add is the first to use that float4 (it loads it).
    q: usize,
    qc: &'static str,
    load: bool,
}

/// The live multiply-adds of four consecutive k of one chunk.
#[derive(Clone, Debug, Serialize)]
struct Group {
    /// Its number in the piece (names its registers).
    id: usize,
    /// Offset (floats) of the four k in the lane's row of the staged chunk.
    off: usize,
    fmas: Vec<Fma>,
}

/// The code of one (segment, chunk): a function of its own.
#[derive(Clone, Debug, Serialize)]
struct Piece {
    s: usize,
    c: usize,
    /// First output column and first k.
    n0: usize,
    k0: usize,
    /// The first chunk starts the accumulators at zero.
    first: bool,
    groups: Vec<Group>,
}

#[derive(Clone, Debug, Serialize)]
struct DismantledCtx {
    #[serde(flatten)]
    head: KernelHead,
    nt: usize,
    ws: usize,
    kc: usize,
    chunks: usize,
    stages: usize,
    a_ld: usize,
    c_ld: usize,
    stage_words: usize,
    /// Rows of A are a multiple of 4 long (16-byte copies); else one element per copy.
    vec: bool,
    /// Rows of C are a multiple of 4 long (16-byte stores).
    vec_out: bool,
    values_embedded: bool,
    nseg: usize,
    /// In table order: segment-major.
    pieces: Vec<Piece>,
}

const COMP: [&str; 4] = ["x", "y", "z", "w"];

/// The dismantled kernel of `spec`; `live[k * n + col]` marks the nonzeros.
pub(super) fn specialize(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.blocks.len() > MAX_NONZEROS {
        return Err(spec_err(format!(
            "the dismantled fine kernel holds at most {MAX_NONZEROS} nonzeros (one instruction each), this weight has {}: use mode Auto or IndexStream",
            spec.blocks.len()
        )));
    }
    if k.checked_mul(n).is_none_or(|e| e > i32::MAX as usize) {
        return Err(spec_err(format!("a {k}x{n} weight is too large for the dismantled fine kernel")));
    }
    let t = Tiling::choose(spec)?;
    let (nt, kc) = (t.nt, t.kc);
    let nseg = n.div_ceil(nt);
    let chunks = k.div_ceil(kc);
    let groups = kc / 4;
    let a_ld = kc + 4;
    let stage_words = BM * a_ld;
    // More CTAs than SMs: a two-stage ring, so that two CTAs share an SM (one's copies under the
    // other's FFMAs; with all of K resident, one CTA per SM ran 16384 × 1024 × 256 at 99% in
    // 0.062 ms, run 12). Otherwise all of K at once when it fits.
    let ctas = m.div_ceil(BM) * nseg.div_ceil(t.ws);
    let stages = if ctas > SMS {
        chunks.min(2)
    } else if chunks * stage_words * 4 <= RESIDENT_BYTES {
        chunks
    } else {
        (RING_BYTES / (stage_words * 4)).clamp(2, chunks)
    };
    let c_ld = nt + 4;
    // The ring, then each warp's accumulator tile (32 × nt, rows padded for conflict-free float4s).
    let smem = 4 * (stages * stage_words + t.ws * BM * c_ld);
    if smem > 227 * 1024 {
        return Err(spec_err(format!(
            "the dismantled fine kernel needs {smem} bytes of shared memory (at most {})",
            227 * 1024
        )));
    }
    // segment → chunk → group of four k → k → column: dismantled to the element; a chunk
    // is kept even when empty (every warp passes the same barriers), an empty group is deleted.
    let nest = LoopNest::new(vec![
        Level::new("segment", nseg, nt),
        Level::new("k_chunk", chunks, kc),
        Level::new("k_group", groups, 4),
        Level::new("k", 4, 1),
        Level::new("n", nt, 1),
    ]);
    let at = |s: usize, c: usize, g: usize, kq: usize, j: usize| -> bool {
        let (row, col) = (c * kc + 4 * g + kq, s * nt + j);
        row < k && col < n && live[row * n + col]
    };
    let d = nest.dismantle(nest.level("n")?, |p| match *p {
        [_] | [_, _] => true,
        [s, c, g] => (0..4).any(|kq| (0..nt).any(|j| at(s, c, g, kq, j))),
        [s, c, g, kq] => (0..nt).any(|j| at(s, c, g, kq, j)),
        [s, c, g, kq, j] => at(s, c, g, kq, j),
        _ => false,
    })?;
    // Entries in code order, each piece's weights padded to whole float4s (a piece loads its own):
    // `idx` holds `k × N + col` per entry (-1 for padding), `ptr` each segment's first entry.
    let mut ptr = Vec::with_capacity(nseg + 1);
    let mut idx: Vec<i32> = Vec::with_capacity(d.instances.len() + 4 * nseg * chunks);
    let mut pieces: Vec<Piece> = (0..nseg * chunks)
        .map(|p| {
            let (s, c) = (p / chunks, p % chunks);
            Piece { s, c, n0: s * nt, k0: c * kc, first: c == 0, groups: vec![] }
        })
        .collect();
    let values = spec.values.as_ref();
    let mut current = (usize::MAX, usize::MAX);
    for inst in &d.instances {
        let &[s, c, g, kq, j] = inst.as_slice() else { unreachable!("dismantled at the fifth level") };
        if (s, c) != current {
            idx.resize(idx.len().next_multiple_of(4), -1);
            while ptr.len() <= s {
                ptr.push(idx.len() as i32);
            }
            current = (s, c);
        }
        let (row, col) = (c * kc + 4 * g + kq, s * nt + j);
        let e = idx.len();
        idx.push((row * n + col) as i32);
        let piece = &mut pieces[s * chunks + c];
        let off = 4 * g;
        if piece.groups.last().is_none_or(|gr| gr.off != off) {
            let id = piece.groups.len();
            piece.groups.push(Group { id, off, fmas: vec![] });
        }
        let lit = values.map(|v| format!("0x{:08x}", v[row * n + col].to_bits())).unwrap_or_default();
        piece.groups.last_mut().expect("pushed above").fmas.push(Fma {
            j,
            a: COMP[kq],
            lit,
            q: e / 4,
            qc: COMP[e % 4],
            load: values.is_none() && e.is_multiple_of(4),
        });
    }
    idx.resize(idx.len().next_multiple_of(4), -1);
    while ptr.len() <= nseg {
        ptr.push(idx.len() as i32);
    }
    let live_n = d.instances.len();
    let embedded = spec.values.is_some();
    let name = format!("spmm_{}_f32{}", Family::FineDismantled.name(), if embedded { "_values" } else { "" });
    let launch = Launch {
        grid: (m.div_ceil(BM) as u32, nseg.div_ceil(t.ws) as u32, 1),
        block: ((32 * t.ws) as u32, 1, 1),
        smem_bytes: smem as u32,
    };
    let mut kernel = Kernel {
        ptr,
        idx,
        live_instances: live_n,
        dead_instances: d.dead_instances(),
        // One instruction per nonzero (its k, column and, embedded, value as operands).
        literal_words: live_n * if embedded { 2 } else { 1 },
        values_embedded: embedded,
        ..Kernel::new(name, Family::FineDismantled, Mode::Unrolled, launch, (m, k, n), Dtype::F32, (1, 1))
    };
    let ctx = DismantledCtx {
        head: kernel_head(&kernel.name, Dtype::F32, spec),
        nt,
        ws: t.ws,
        kc,
        chunks,
        stages,
        a_ld,
        c_ld,
        stage_words,
        vec: k % 4 == 0,
        vec_out: n % 4 == 0,
        values_embedded: embedded,
        nseg,
        pieces,
    };
    kernel.source = render("spmm_fine_dismantled.cu.tera", &ctx)?;
    Ok(kernel)
}

/// Packs a row-major `K × N` weight in code order (see `specialize`): one value per entry,
/// zero for padding.
pub(super) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    kernel.idx.iter().map(|&e| if e < 0 { T::default() } else { w.at(e as usize) }).collect()
}

/// The dismantled family's entry in the family table.
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: entry_flops };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::{specialize, Engine, Tile};

    /// A deterministic scatter of `nnz` distinct elements over `k × n` (a stride coprime to
    /// `k × n` visits each element once).
    fn pattern(k: usize, n: usize, nnz: usize) -> Vec<(usize, usize)> {
        let stride = (7919..).step_by(2).find(|s| gcd(*s, k * n) == 1).unwrap();
        let mut b: Vec<(usize, usize)> = (0..nnz).map(|i| (i * stride) % (k * n)).map(|e| (e / n, e % n)).collect();
        b.sort();
        assert_eq!(b.len(), nnz.min(k * n));
        b
    }

    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }

    /// Reads the kernel's code back: every FFMA line of every piece gives (k, column, packed
    /// weight slot); together they must be the pattern's nonzeros, each once, and the packed
    /// slot must hold that element (`idx`), so that `pack` feeds each FFMA its own weight.
    fn code_entries(kernel: &Kernel, nt: usize, kc: usize) -> Vec<(usize, usize, usize)> {
        let src = &kernel.source;
        let mut out = vec![];
        let (mut s, mut c) = (0, 0);
        let mut offs: std::collections::HashMap<String, usize> = Default::default();
        for line in src.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("__device__ __noinline__ void piece_") {
                let name: String = rest.chars().take_while(|ch| *ch != '(').collect();
                let (a, b) = name.split_once('_').unwrap();
                (s, c) = (a.parse().unwrap(), b.parse().unwrap());
                offs.clear();
            } else if let Some(rest) = line.strip_prefix("const float4 a") {
                // const float4 aG = *reinterpret_cast<const float4*>(Al + OFF);
                let g: String = rest.chars().take_while(|ch| ch.is_ascii_digit()).collect();
                let off = rest.rsplit_once("Al + ").unwrap().1.trim_end_matches(");").parse().unwrap();
                offs.insert(g, off);
            } else if line.starts_with("acc[") && line.contains("fmaf(") {
                // acc[J] = fmaf(aG.C, wQ.C, acc[J]);
                let j: usize = line[4..line.find(']').unwrap()].parse().unwrap();
                let args = &line[line.find("fmaf(").unwrap() + 5..];
                let mut parts = args.split(", ");
                let (g, comp) = parts.next().unwrap()[1..].split_once('.').unwrap();
                let kq = "xyzw".find(comp).unwrap();
                let (q, qc) = parts.next().unwrap()[1..].split_once('.').unwrap();
                let slot = 4 * q.parse::<usize>().unwrap() + "xyzw".find(qc).unwrap();
                out.push((c * kc + offs[g] + kq, s * nt + j, slot));
            }
        }
        out
    }

    #[test]
    fn every_nonzero_is_one_ffma_on_its_own_k_column_and_weight() {
        for (m, k, n, nnz, tile) in [
            (64, 512, 200, 3000, None),
            (70, 4096, 136, 2000, None),
            (40, 258, 100, 1500, Some(Tile { warps: 2, ..Tile::new(32, 1) })),
        ] {
            let mut s = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), pattern(k, n, nnz));
            s.mode = Mode::Unrolled;
            s.tile = tile;
            let kern = specialize(&s).unwrap();
            assert_eq!(kern.family, Family::FineDismantled);
            let t = Tiling::choose(&s).unwrap();
            let entries = code_entries(&kern, t.nt, t.kc);
            let mut got: Vec<(usize, usize)> = entries.iter().map(|&(r, c, _)| (r, c)).collect();
            got.sort();
            assert_eq!(got, s.blocks, "{m}x{k}x{n}");
            for &(r, c, slot) in &entries {
                assert_eq!(kern.idx[slot], (r * n + c) as i32);
            }
            // The packed weight gives every FFMA its element, zeros in the padding.
            let w: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
            let packed = kern.pack_weight(&w);
            assert_eq!(packed.len() % 4, 0);
            for &(r, c, slot) in &entries {
                assert_eq!(packed[slot], w[r * n + c]);
            }
            assert!(kern.idx.iter().zip(&packed).all(|(&e, &v)| e >= 0 || v == 0.0));
            assert_eq!(kern.flops(), 2.0 * m as f64 * s.blocks.len() as f64);
        }
    }

    #[test]
    fn embedded_values_are_immediates_and_the_ring_replaces_resident_chunks() {
        let (m, k, n) = (64, 4096, 64);
        let mut s = SpmmSpec::new(m, k, n, Dtype::F32, (1, 1), pattern(k, n, 800));
        s.mode = Mode::Unrolled;
        let w: Vec<f32> = (0..k * n).map(|i| 0.25 + i as f32).collect();
        s.values = Some(w.clone());
        let kern = specialize(&s).unwrap();
        assert!(kern.values_embedded && kern.name.ends_with("_values"));
        assert!(!kern.source.contains("__ldg(Wq"));
        let (r, c) = s.blocks[0];
        assert!(kern.source.contains(&format!("__int_as_float(0x{:08x})", w[r * n + c].to_bits())));
        // 32 chunks of 128 do not fit at once: a ring of 4 stages, reissued as chunks retire.
        assert!(kern.source.contains("#define CHUNKS 32") && kern.source.contains("#define STAGES 4"));
        assert!(kern.launch.smem_bytes as usize <= 227 * 1024);
    }

    #[test]
    fn the_loop_kernel_stays_the_default_and_bad_dismantled_tiles_are_errors() {
        // Auto dismantles under 1.5% kept when one CTA covers every column (N ≤ 256), within
        // the budget; 5% kept, wider weights and a zero budget keep the loop kernel (on the
        // SIMT engine; `Engine::Auto` would take the 3xTF32 fine kernel at these sizes).
        let s = SpmmSpec::new(64, 1024, 256, Dtype::F32, (1, 1), pattern(1024, 256, 2600));
        assert_eq!(specialize(&s).unwrap().family, Family::FineDismantled);
        let mut b = s.clone();
        b.unroll_budget = 0;
        b.engine = Engine::Simt;
        assert_eq!(specialize(&b).unwrap().family, Family::Fine);
        let mut dense = SpmmSpec::new(64, 1024, 256, Dtype::F32, (1, 1), pattern(1024, 256, 13000));
        dense.engine = Engine::Simt;
        assert_eq!(specialize(&dense).unwrap().family, Family::Fine);
        let mut wide = SpmmSpec::new(64, 1024, 512, Dtype::F32, (1, 1), pattern(1024, 512, 5200));
        wide.engine = Engine::Simt;
        assert_eq!(specialize(&wide).unwrap().family, Family::Fine);
        let s = SpmmSpec::new(64, 256, 128, Dtype::F32, (1, 1), pattern(256, 128, 500));
        for (tile, mode, dtype, needle) in [
            (Tile { warps: 4, ..Tile::new(64, 2) }, Mode::Auto, Dtype::F32, "32 rows"),
            (Tile { warps: 4, ..Tile::new(32, 4) }, Mode::Auto, Dtype::F32, "32 or 64 columns"),
            (Tile { warps: 4, ..Tile::new(32, 2) }, Mode::IndexStream, Dtype::F32, "pattern in the code"),
            (Tile { warps: 4, ..Tile::new(32, 2) }, Mode::Auto, Dtype::F16, "needs fp32"),
        ] {
            let mut t = s.clone();
            t.tile = Some(tile);
            t.mode = mode;
            t.dtype = dtype;
            let e = specialize(&t).unwrap_err().to_string();
            assert!(e.contains(needle), "{tile:?}: {e}");
        }
        // Forcing a weight past the hard cap is an error, not minutes of compiling.
        let mut huge = SpmmSpec::new(32, 2048, 256, Dtype::F32, (1, 1), pattern(2048, 256, MAX_NONZEROS + 1));
        huge.mode = Mode::Unrolled;
        assert!(specialize(&huge).unwrap_err().to_string().contains("at most 262144 nonzeros"));
    }
}
