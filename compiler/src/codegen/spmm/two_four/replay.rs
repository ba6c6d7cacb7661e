//! The 2:4 kernel's address arithmetic replayed on the CPU: for a specialized kernel, every
//! memory access `templates/spmm_two_four.cu.tera` makes (the zero fill of tiles past N, the
//! cp.async copies of A, W and the metadata, the 16-byte W fragment and metadata reads, the
//! `ldmatrix` row addresses, the fp32 staging, the bias and C traffic) is recomputed thread by
//! thread for a sample of CTAs (the corners, their neighbours and the middle) and checked:
//! inside its buffer or shared-memory array, that array inside the launch's dynamic shared
//! memory, aligned to its width, and (shared memory) reading only bytes the CTA wrote before.
//!
//! The replay takes its geometry from the rendered source (the `#define`s and the optional
//! blocks), its launch from [`Kernel::launch`], its buffer sizes from the kernel's shape and
//! tables, so a kernel that disagrees with what the Rust side reports fails here, on any
//! machine, instead of faulting on the GPU. Keep it in step with the template: every loop
//! below names the template loop it mirrors.

use crate::codegen::Kernel;

/// Bytes of one element of A, W, bias and C (16-bit dtypes).
const ELEM: usize = 2;

/// The kernel's compile-time constants as the rendered source defines them.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    bm: usize,
    bn: usize,
    bk: usize,
    wm: usize,
    wn: usize,
    warps_n: usize,
    threads: usize,
    stages: usize,
    a_ld: usize,
    c_ld: usize,
    ragged_n: bool,
    accumulate: bool,
    bias: bool,
}

impl Geometry {
    fn parse(source: &str) -> Result<Geometry, String> {
        let define = |name: &str| -> Result<usize, String> {
            let prefix = format!("#define {name} ");
            source
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .ok_or_else(|| format!("no #define {name} in the source"))?
                .trim()
                .parse()
                .map_err(|e| format!("#define {name}: {e}"))
        };
        Ok(Geometry {
            m: define("M")?,
            k: define("K")?,
            n: define("N")?,
            bm: define("BM")?,
            bn: define("BN")?,
            bk: define("BK")?,
            wm: define("WM")?,
            wn: define("WN")?,
            warps_n: define("WARPS_N")?,
            threads: define("THREADS")?,
            stages: define("STAGES")?,
            a_ld: define("A_LD")?,
            c_ld: define("C_LD")?,
            ragged_n: source.contains("if (t0 + t >= W_TILES) continue;"),
            accumulate: source.contains("const uint4 old = *dst;"),
            bias: source.contains("bias[col]"),
        })
    }
    fn ksteps(&self) -> usize {
        self.k / 32
    }
    fn ssteps(&self) -> usize {
        self.bk / 32
    }
    fn w_tiles(&self) -> usize {
        self.n / 16
    }
    fn c_tiles(&self) -> usize {
        self.bn / 16
    }
    fn tm(&self) -> usize {
        self.wn / 16
    }
    fn tn(&self) -> usize {
        self.wm / 8
    }
    fn kt(&self) -> usize {
        self.k / self.bk
    }
}

/// A device buffer or shared-memory array: its name, start (bytes into its space) and size.
#[derive(Clone, Copy, Debug)]
struct Region {
    name: &'static str,
    start: usize,
    bytes: usize,
}

/// What one replay checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// CTAs replayed.
    pub ctas: usize,
    /// Accesses checked.
    pub accesses: usize,
    /// Shared-memory bytes the kernel touches (its arrays' end), against `launch.smem_bytes`.
    pub smem_used: usize,
}

/// One CTA's replay: the shared-memory bytes written so far and the first failure.
struct Cta<'a> {
    g: Geometry,
    smem_bytes: usize,
    written: Vec<bool>,
    stats: &'a mut ReplayStats,
    label: String,
}

impl Cta<'_> {
    fn check(&mut self, what: &str, region: Region, offset: usize, width: usize) -> Result<(), String> {
        self.stats.accesses += 1;
        if !offset.is_multiple_of(width) {
            return Err(format!("{}: {what}: {} byte {offset} is not {width}-byte aligned", self.label, region.name));
        }
        if offset + width > region.bytes {
            return Err(format!(
                "{}: {what}: {} bytes {offset}..{} past its {} bytes",
                self.label,
                region.name,
                offset + width,
                region.bytes
            ));
        }
        Ok(())
    }
    /// A shared-memory access: inside its array, the array inside the allocation.
    fn smem(&mut self, what: &str, region: Region, offset: usize, width: usize, write: bool) -> Result<(), String> {
        self.check(what, region, offset, width)?;
        let at = region.start + offset;
        if at + width > self.smem_bytes {
            return Err(format!(
                "{}: {what}: shared bytes {at}..{} ({} + {offset}) past the launch's {} bytes of dynamic shared memory",
                self.label,
                at + width,
                region.name,
                self.smem_bytes
            ));
        }
        if write {
            self.written[at..at + width].iter_mut().for_each(|b| *b = true);
        } else if let Some(i) = (at..at + width).find(|&i| !self.written[i]) {
            return Err(format!("{}: {what}: reads shared byte {i} ({}) that nothing wrote", self.label, region.name));
        }
        Ok(())
    }
}

/// Replays `kernel` (a [`crate::codegen::Family::TwoFour`] kernel) and returns what it
/// checked, or the first access that is out of bounds, misaligned, past the dynamic shared
/// memory or a read of shared memory nothing wrote (module docs).
pub fn replay(kernel: &Kernel) -> Result<ReplayStats, String> {
    let g = Geometry::parse(&kernel.source)?;
    let (m, k, n) = kernel.spec_shape;
    if (g.m, g.k, g.n) != (m, k, n) {
        return Err(format!("the source's {}x{}x{} is not the kernel's {m}x{k}x{n}", g.m, g.k, g.n));
    }
    let launch = kernel.launch;
    if launch.block != (g.threads as u32, 1, 1) {
        return Err(format!("block {:?} for a {}-thread kernel", launch.block, g.threads));
    }
    if g.threads != 32 * (g.bn / g.wn) * (g.bm / g.wm) || g.warps_n != g.bn / g.wn {
        return Err(format!(
            "{} threads do not split {} x {} into {} x {} warp tiles",
            g.threads, g.bn, g.bm, g.wn, g.wm
        ));
    }
    let grid = (launch.grid.0 as usize, launch.grid.1 as usize);
    if launch.grid.2 != 1 || grid.0 * g.bn < n || grid.1 * g.bm < m {
        return Err(format!("grid {:?} does not cover {m} x {n} in {} x {} tiles", launch.grid, g.bm, g.bn));
    }
    if (grid.1 * g.bm + g.bm) as u64 > i32::MAX as u64 || (grid.0 * g.bn + g.bn) as u64 > i32::MAX as u64 {
        return Err("row or column indices overflow the kernel's 32-bit ints".into());
    }
    // Global buffers (each its own allocation).
    let a_buf = Region { name: "A", start: 0, bytes: m * k * ELEM };
    let w_buf = Region { name: "W (packed)", start: 0, bytes: k * n / 2 * ELEM };
    let meta_buf = Region { name: "idx (metadata)", start: 0, bytes: kernel.device_idx().len() * 4 };
    let bias_buf = Region { name: "bias", start: 0, bytes: n * ELEM };
    let c_buf = Region { name: "C", start: 0, bytes: m * n * ELEM };
    // Shared arrays: the ring (As, Ws, Ms one after another), then Cs over it.
    let a_ring = Region { name: "As", start: 0, bytes: g.stages * g.bm * g.a_ld * ELEM };
    let w_ring = Region { name: "Ws", start: a_ring.bytes, bytes: g.stages * g.bn * (g.bk / 2) * ELEM };
    let m_ring =
        Region { name: "Ms", start: w_ring.start + w_ring.bytes, bytes: g.stages * g.c_tiles() * g.ssteps() * 16 * 4 };
    let c_stage = Region { name: "Cs", start: 0, bytes: g.bm * g.c_ld * 4 };
    let mut stats = ReplayStats { smem_used: (m_ring.start + m_ring.bytes).max(c_stage.bytes), ..Default::default() };

    let sample = |count: usize| {
        let mut v: Vec<usize> =
            [0, 1, count / 2, count.saturating_sub(2), count - 1].into_iter().filter(|&i| i < count).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let kt_all = g.kt();
    // The k stages whose addresses differ in kind: the first ring's worth and the last.
    let mut kts: Vec<usize> =
        (0..kt_all.min(g.stages + 1)).chain(kt_all.saturating_sub(g.stages + 1)..kt_all).collect();
    kts.sort_unstable();
    kts.dedup();

    for &by in &sample(grid.1) {
        for &bx in &sample(grid.0) {
            stats.ctas += 1;
            let mut cta = Cta {
                g,
                smem_bytes: launch.smem_bytes as usize,
                written: vec![false; (launch.smem_bytes as usize).max(stats.smem_used)],
                stats: &mut stats,
                label: format!("{} CTA ({bx}, {by})", kernel.name),
            };
            replay_cta(
                &mut cta,
                (bx, by),
                &kts,
                [a_buf, w_buf, meta_buf, bias_buf, c_buf],
                [a_ring, w_ring, m_ring, c_stage],
            )?;
        }
    }
    Ok(stats)
}

/// One CTA, thread by thread, in the template's order: fill, loads, math, staging, epilogue.
fn replay_cta(
    cta: &mut Cta,
    (bx, by): (usize, usize),
    kts: &[usize],
    [a_buf, w_buf, meta_buf, bias_buf, c_buf]: [Region; 5],
    [a_ring, w_ring, m_ring, c_stage]: [Region; 4],
) -> Result<(), String> {
    let g = cta.g;
    let (ssteps, c_tiles, ksteps, w_tiles) = (g.ssteps(), g.c_tiles(), g.ksteps(), g.w_tiles());
    let n0 = bx * g.bn;
    let m0 = by * g.bm;
    let t0 = n0 / 16;
    // {% if ragged_n %}: sparse tiles past N, every stage: Ms[i] and Ws[i*16 + j].
    if g.ragged_n {
        for tid in 0..g.threads {
            for i in (tid..g.stages * c_tiles * ssteps * 16).step_by(g.threads) {
                if t0 + (i / (ssteps * 16)) % c_tiles >= w_tiles {
                    cta.smem("zero fill Ms[i]", m_ring, 4 * i, 4, true)?;
                    for j in 0..16 {
                        cta.smem("zero fill Ws[i * 16 + j]", w_ring, ELEM * (i * 16 + j), ELEM, true)?;
                    }
                }
            }
        }
    }
    // load(slot, kt): A rows, W fragments, metadata, 16 bytes a cp.async.
    let load = |cta: &mut Cta, slot: usize, kt: usize| -> Result<(), String> {
        let k0 = kt * g.bk;
        for tid in 0..g.threads {
            for c in (tid..g.bm * (g.bk / 8)).step_by(g.threads) {
                let (r, q) = (c / (g.bk / 8), c % (g.bk / 8));
                let ok = m0 + r < g.m;
                let dst = slot * (g.bm * g.a_ld) + r * g.a_ld + q * 8;
                cta.smem("cp.async A dst", a_ring, ELEM * dst, 16, true)?;
                let src = (if ok { m0 + r } else { 0 }) * g.k + k0 + q * 8;
                cta.check("cp.async A src", a_buf, ELEM * src, 16)?;
            }
            for c in (tid..c_tiles * ssteps * 32).step_by(g.threads) {
                let (t, r) = (c / (ssteps * 32), c % (ssteps * 32));
                if g.ragged_n && t0 + t >= w_tiles {
                    continue;
                }
                let dst = slot * (g.bn * (g.bk / 2)) + t * (ssteps * 256) + r * 8;
                cta.smem("cp.async W dst", w_ring, ELEM * dst, 16, true)?;
                let src = ((t0 + t) * ksteps + kt * ssteps) * 256 + r * 8;
                cta.check("cp.async W src", w_buf, ELEM * src, 16)?;
            }
            for c in (tid..c_tiles * ssteps * 4).step_by(g.threads) {
                let (t, r) = (c / (ssteps * 4), c % (ssteps * 4));
                if g.ragged_n && t0 + t >= w_tiles {
                    continue;
                }
                let dst = slot * (c_tiles * ssteps * 16) + t * (ssteps * 16) + r * 4;
                cta.smem("cp.async meta dst", m_ring, 4 * dst, 16, true)?;
                let src = ((t0 + t) * ksteps + kt * ssteps) * 16 + r * 4;
                cta.check("cp.async meta src", meta_buf, 4 * src, 16)?;
            }
        }
        Ok(())
    };
    // The main loop's math on slot kt % STAGES: W fragments (uint4), metadata words, ldmatrix rows.
    let math = |cta: &mut Cta, kt: usize| -> Result<(), String> {
        let slot = kt % g.stages;
        for warp in 0..g.threads / 32 {
            let wn0 = (warp % g.warps_n) * g.wn;
            let wm0 = (warp / g.warps_n) * g.wm;
            for lane in 0..32 {
                let ws = slot * (g.bn * (g.bk / 2)) + (wn0 / 16) * (ssteps * 256) + lane * 8;
                let ms = slot * (c_tiles * ssteps * 16) + (wn0 / 16) * (ssteps * 16) + (lane >> 2) * 2 + (lane & 1);
                for q in 0..ssteps {
                    for i in 0..g.tm() {
                        cta.smem("W fragment (uint4)", w_ring, ELEM * (ws + (i * ssteps + q) * 256), 16, false)?;
                        cta.smem("metadata word", m_ring, 4 * (ms + (i * ssteps + q) * 16), 4, false)?;
                    }
                    for j in 0..g.tn() {
                        let row =
                            slot * (g.bm * g.a_ld) + (wm0 + j * 8 + (lane & 7)) * g.a_ld + q * 32 + (lane >> 3) * 8;
                        cta.smem("ldmatrix row", a_ring, ELEM * row, 16, false)?;
                    }
                }
            }
        }
        Ok(())
    };
    // Prologue loads, then per kt: the load STAGES - 1 ahead (every stage) and this stage's
    // math (the sampled stages).
    for s in 0..g.stages - 1 {
        if s < g.kt() {
            load(cta, s, s)?;
        }
    }
    for kt in 0..g.kt() {
        let ahead = kt + g.stages - 1;
        if ahead < g.kt() {
            load(cta, ahead % g.stages, ahead)?;
        }
        if kts.contains(&kt) {
            math(cta, kt)?;
        }
    }
    // The fp32 tile through shared memory, over the ring: nothing in it counts as written.
    cta.written.iter_mut().for_each(|b| *b = false);
    for warp in 0..g.threads / 32 {
        let wn0 = (warp % g.warps_n) * g.wn;
        let wm0 = (warp / g.warps_n) * g.wm;
        for lane in 0..32 {
            let (grp, tg) = (lane >> 2, lane & 3);
            for i in 0..g.tm() {
                for j in 0..g.tn() {
                    let col = wn0 + i * 16 + grp;
                    let row = wm0 + j * 8 + 2 * tg;
                    for (r, c) in [(row, col), (row + 1, col), (row, col + 8), (row + 1, col + 8)] {
                        cta.smem("Cs accumulator store", c_stage, 4 * (r * g.c_ld + c), 4, true)?;
                    }
                }
            }
        }
    }
    // The epilogue: 8 columns of one row a thread, bias per column, one 16-byte C access.
    for tid in 0..g.threads {
        for c in (tid..g.bm * (g.bn / 8)).step_by(g.threads) {
            let (r, q) = (c / (g.bn / 8), c % (g.bn / 8));
            let (row, col) = (m0 + r, n0 + q * 8);
            if row >= g.m || col >= g.n {
                continue;
            }
            let src = r * g.c_ld + q * 8;
            cta.smem("Cs float4", c_stage, 4 * src, 16, false)?;
            cta.smem("Cs float4", c_stage, 4 * (src + 4), 16, false)?;
            if g.accumulate {
                cta.check("C load (accumulate)", c_buf, ELEM * (row * g.n + col), 16)?;
            }
            if g.bias {
                for e in 0..8 {
                    cta.check("bias", bias_buf, ELEM * (col + e), ELEM)?;
                }
            }
            cta.check("C store", c_buf, ELEM * (row * g.n + col), 16)?;
        }
    }
    Ok(())
}
