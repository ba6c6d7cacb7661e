//! The HPEC challenge through the compiler: every layer planned and specialized, the layers in
//! parallel ([`spartac::program::hpec::compile_layer`]), the network lowered to the program of
//! one batch ([`spartac::program::hpec::lower`]), and that program run batch after batch on the CPU
//! executor (the simulation CI checks) or as one CUDA graph relaunched per batch with the
//! batch's first image as its parameter ([`run_gpu`]).
//!
//! Multi-GPU: [`run_gpu_devices`] gives every device its own copy of the program and graph,
//! loaded on all devices at once (`GpuProgram::load_all`); the devices take batches from one
//! shared atomic counter (SNIG's scheme). Batches are balanced by handing the images over in
//! hashed order (`spartac hpec run --hash-inputs`, seed `001_*`).
//!
//! Compiled layers can be kept on disk ([`compile_cached`]): keyed by the layer's content and
//! every setting the compile depends on, checksummed, rebuilt when damaged.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use spartac::program::hpec::{compile_layer, lower, HpecImages, HpecLowering, HpecOptions, LayerKernels, Precision};
use spartac::program::hpec_order::{boundary_orders, is_identity, relabel};
use spartac::program::Csr;
use spartac::sparse::CsrRef;

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::network::Network;
use crate::cuda::CudaDevice;
use crate::exec::{cpu, cuda::GpuProgram};

/// The network compiled for one batch size.
pub struct CompiledNetwork {
    pub lowering: HpecLowering,
    /// Seconds spent planning and specializing the layers (or reading them from the cache)
    /// and lowering.
    pub compile_seconds: f64,
    pub images: usize,
    /// Layers read from the layer cache rather than planned and specialized.
    pub layers_cached: usize,
    /// The first layer of the one-launch tail (the layer count when there is none): the
    /// options' `tail_from`, unless a tail layer has a column too long for the tail kernel.
    pub tail_start: usize,
    /// Layers whose neurons were relabelled ([`spartac::program::hpec_order`]).
    pub reordered_layers: usize,
    /// Boundaries whose activations a step permutes between two layers' orders.
    pub permuted_boundaries: usize,
}

/// The file of a layer's cache entry: keyed by the layer's content (pattern and values), what
/// compiling it depends on (batch, planning rows, engine, folding, fine tile, SM count, the
/// few-rows bound, the row-scatter width, element-sparse planning), the templates' hash and
/// the spartac version.
fn layer_cache_path(dir: &Path, layer: &Csr, batch: usize, options: &HpecOptions) -> PathBuf {
    let mut h = spartac::program::Fnv64::new();
    h.add(
        format!(
            "{}|{:016x}|{}x{}|{batch}|{:?}|{:?}|{}|{:?}|{}|{:?}|{:?}|{}|{:?}|",
            env!("CARGO_PKG_VERSION"),
            spartac::codegen::templates_hash(),
            layer.rows,
            layer.cols,
            options.plan_rows,
            options.engine,
            options.fold_values,
            options.fine_tile,
            options.sm_count,
            options.few_rows,
            options.scatter_from,
            options.fine_only,
            options.gather_from
        )
        .as_bytes(),
    );
    h.add_u32s(&layer.offsets);
    h.add_u32s(&layer.indices);
    h.add_f32s(&layer.values);
    dir.join(format!("{:016x}.layer", h.finish()))
}

/// Layer `l` compiled: from the cache in `cache` when a valid entry exists, else planned and
/// specialized (and the entry written). A corrupted entry fails its checksum and is rebuilt.
/// f64 layers are built from their tables alone (no planning: nothing worth caching).
fn compiled_layer(
    layer: &Csr,
    batch: usize,
    options: &HpecOptions,
    cache: Option<&Path>,
) -> Result<(LayerKernels, bool), String> {
    if options.precision == Precision::F64 {
        return compile_layer(layer, batch, true, options).map(|k| (k, false)).map_err(|e| e.to_string());
    }
    let path = cache.map(|d| layer_cache_path(d, layer, batch, options));
    if let Some(p) = &path {
        // Only a regular file is opened: a FIFO in the cache would block the read.
        if let Some(k) = spartac::contained::read_regular(p).ok().and_then(|b| LayerKernels::from_bytes(&b)) {
            return Ok((k, true));
        }
    }
    let k = compile_layer(layer, batch, true, options).map_err(|e| e.to_string())?;
    if let Some(p) = &path {
        crate::exec::write_cache_entry(p, &k.to_bytes());
    }
    Ok((k, false))
}

fn layer_view(m: &super::sparse::CompressedMatrix) -> CsrRef<'_> {
    CsrRef { rows: m.n_outer, cols: m.n_inner, offsets: &m.offsets, indices: &m.indices, values: &m.values }
}

fn layer_csr(network: &Network, l: usize) -> Csr {
    let m = &network.layers[l].csr;
    Csr {
        rows: m.n_outer,
        cols: m.n_inner,
        offsets: m.offsets.clone(),
        indices: m.indices.clone(),
        values: m.values.clone(),
    }
}

/// Plans and specializes every layer (in parallel; `progress` is called once per layer done)
/// and lowers the network to the program of one batch.
pub fn compile(
    network: &Network,
    images: &Images,
    options: &HpecOptions,
    progress: &(dyn Fn() + Sync),
) -> HpecResult<CompiledNetwork> {
    compile_cached(network, images, options, None, progress)
}

/// [`compile`] with compiled layers kept in (and read from) the folder `cache`.
pub fn compile_cached(
    network: &Network,
    images: &Images,
    options: &HpecOptions,
    cache: Option<&Path>,
    progress: &(dyn Fn() + Sync),
) -> HpecResult<CompiledNetwork> {
    if images.neurons() != network.neurons {
        return Err(HpecError::NeuronMismatch {
            message: format!("images have {} pixels, network has {} neurons", images.neurons(), network.neurons),
        });
    }
    let started = Instant::now();
    let batch = options.batch.min(images.n_images()).max(1);
    let views: Vec<CsrRef> = network.layers.iter().map(|l| layer_view(&l.csr)).collect();
    let options = &options.fitted_to(&views);
    // The tail's layers run in one launch from their nonzeros' tables (built straight from the
    // network: no copy of them is made), not planned or specialized.
    let tail_start = options.tail_start(views.len());
    let tail = (tail_start < views.len())
        .then(|| spartac::codegen::rows::tail_tables(&views[tail_start..]))
        .transpose()
        .map_err(|e| HpecError::InvalidArgument(format!("the tail layers: {e}")))?;
    // The neurons between the layers before the tail relabelled (fp32 only: f64 keeps the
    // reference's k order); the images' pixels follow the first boundary's order, and the
    // boundaries that permute get a step that moves the activations.
    let permutable = |_: usize| options.permute_from.is_some_and(|w| network.neurons >= w);
    let orders = (options.reorder && options.precision == Precision::F32)
        .then(|| boundary_orders(&views[..tail_start], &permutable))
        .filter(|o| !o.iter().all(|b| is_identity(&b.read) && is_identity(&b.written)));
    let relabels =
        |l: usize| orders.as_ref().is_some_and(|o| !(is_identity(&o[l].read) && is_identity(&o[l + 1].written)));
    let layers: Vec<Csr> = (0..tail_start)
        .into_par_iter()
        .map(|l| match &orders {
            Some(o) if relabels(l) => relabel(views[l], &o[l].read, &o[l + 1].written),
            _ => layer_csr(network, l),
        })
        .collect();
    let reordered_layers = (0..tail_start).filter(|&l| relabels(l)).count();
    let permutations: Vec<(usize, Vec<u32>)> = orders
        .as_ref()
        .map(|o| (1..tail_start).filter_map(|l| o[l].columns().map(|c| (l, c))).collect())
        .unwrap_or_default();
    let compiled: Vec<(LayerKernels, bool)> = layers
        .par_iter()
        .enumerate()
        .map(|(l, layer)| {
            let k = compiled_layer(layer, batch, options, cache)
                .map_err(|e| HpecError::InvalidArgument(format!("layer {l}: {e}")));
            progress();
            k
        })
        .collect::<HpecResult<_>>()?;
    (tail_start..network.n_layers()).for_each(|_| progress());
    let permuted_boundaries = permutations.len();
    let layers_cached = compiled.iter().filter(|(_, hit)| *hit).count();
    let kernels: Vec<LayerKernels> = compiled.into_iter().map(|(k, _)| k).collect();
    let px = &images.pixels;
    let relabelled = orders.as_ref().filter(|o| !is_identity(&o[0].read)).map(|o| {
        let pixels = CsrRef {
            rows: px.n_outer,
            cols: px.n_inner,
            offsets: &px.offsets,
            indices: &px.indices,
            values: &px.values,
        };
        relabel(pixels, &(0..px.n_outer as u32).collect::<Vec<_>>(), &o[0].read)
    });
    let view = match &relabelled {
        Some(r) => HpecImages { n_images: r.rows, offsets: &r.offsets, indices: &r.indices, values: &r.values },
        None => {
            HpecImages { n_images: images.n_images(), offsets: &px.offsets, indices: &px.indices, values: &px.values }
        }
    };
    let lowering = lower(network.neurons, network.bias, layers, kernels, tail, &view, options, &permutations)
        .map_err(|e| HpecError::InvalidArgument(e.to_string()))?;
    Ok(CompiledNetwork {
        lowering,
        compile_seconds: started.elapsed().as_secs_f64(),
        images: images.n_images(),
        layers_cached,
        tail_start,
        reordered_layers,
        permuted_boundaries,
    })
}

/// Rows of one batch (the length of its id buffers).
fn batch_rows(program: &spartac::program::Program) -> usize {
    program.buffers.iter().find(|b| b.name == "ids0").map_or(1, |b| b.len)
}

/// The 1-based ids of the images whose flag is set.
fn categories_of(flags: &[u8]) -> Vec<u32> {
    flags.iter().enumerate().filter(|(_, f)| **f != 0).map(|(i, _)| i as u32 + 1).collect()
}

/// Runs the compiled program batch after batch on the CPU executor; returns the categories.
pub fn run_cpu(compiled: &CompiledNetwork) -> HpecResult<Vec<u32>> {
    run_cpu_counted(compiled).map(|(categories, _)| categories)
}

/// [`run_cpu`], also returning the row counters of the last batch (element 0 the rows loaded,
/// element c + 1 the rows left after compaction c).
pub fn run_cpu_counted(compiled: &CompiledNetwork) -> HpecResult<(Vec<u32>, Vec<i32>)> {
    let program = &compiled.lowering.program;
    let batch = batch_rows(program);
    let mut mem = cpu::CpuMemory::new(program);
    for first in (0..compiled.images).step_by(batch) {
        cpu::run(program, &mut mem, &[first as i32]).map_err(|e| HpecError::InvalidArgument(e.to_string()))?;
    }
    let live = mem.bytes(compiled.lowering.live);
    let counts = live.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((categories_of(mem.bytes(compiled.lowering.flags)), counts))
}

/// What a GPU run measured.
#[derive(Clone, Debug)]
pub struct GpuRun {
    pub categories: Vec<u32>,
    /// Inference seconds (challenge definition: images on the device to categories found), the
    /// median over the timed repetitions.
    pub seconds: f64,
    pub seconds_all: Vec<f64>,
    /// Kernel loading (NVRTC or the PTX cache) and graph building, seconds.
    pub load_seconds: f64,
    pub kernels: usize,
    pub kernels_compiled: usize,
    pub kernels_cached: usize,
    /// Device bytes the program allocates.
    pub device_bytes: usize,
    /// Per batch: rows alive when loaded and after each compaction (the last batch's).
    pub live_rows: Vec<i32>,
    pub batches: usize,
    pub devices: usize,
    /// Per device, of the median timed inference: batches taken, images in them, and busy
    /// seconds (from the inference's start until the device's last batch finished; the rest of
    /// the inference it sat idle while another device still worked).
    pub batches_per_device: Vec<usize>,
    pub images_per_device: Vec<usize>,
    pub busy_seconds_per_device: Vec<f64>,
    /// With [`GpuRunOptions::profile`]: per step of the program (label, milliseconds summed
    /// over the batches of one inference run as timed stream launches on the first device).
    pub step_ms: Vec<(String, f64)>,
}

/// How the GPU run is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuRunOptions {
    /// Launch the CUDA graph (true) or the same work as plain stream launches.
    pub graph: bool,
    /// Untimed runs first, then timed ones.
    pub warmup: usize,
    pub repeats: usize,
    /// After the timed runs, one more inference with an event after every step.
    pub profile: bool,
}

/// How [`deal_batches`] spread the batches.
#[derive(Clone, Debug, PartialEq)]
pub struct Dealt {
    /// Per worker, the batches it ran, in order.
    pub batches: Vec<Vec<usize>>,
    /// Per worker, seconds from the common start until its last batch was done.
    pub busy_seconds: Vec<f64>,
    /// Seconds from the common start until the last worker was done.
    pub seconds: f64,
}

/// SNIG's multi-GPU scheme, apart from the GPU: one thread per worker; each runs `prepare`
/// (binding its device), all start together, then each takes batch numbers `0..n_batches` from
/// one shared atomic counter and runs them (`run` returns once the worker may take another),
/// then `finish`. Every batch runs exactly once; a faster worker takes more. The first error
/// of any worker is returned (the others finish their current batch and stop taking more).
pub fn deal_batches<W: Send>(
    workers: &mut [W],
    n_batches: usize,
    prepare: impl Fn(&mut W) -> HpecResult<()> + Sync,
    run: impl Fn(&mut W, usize) -> HpecResult<()> + Sync,
    finish: impl Fn(&mut W) -> HpecResult<()> + Sync,
) -> HpecResult<Dealt> {
    if workers.is_empty() {
        return Err(HpecError::InvalidArgument("no device to run the batches on".into()));
    }
    let counter = AtomicUsize::new(0);
    let barrier = std::sync::Barrier::new(workers.len());
    let (counter, barrier, prepare, run, finish) = (&counter, &barrier, &prepare, &run, &finish);
    type WorkerRun = (Vec<usize>, Instant, Instant);
    let runs: Vec<HpecResult<WorkerRun>> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                scope.spawn(move || -> HpecResult<WorkerRun> {
                    // Every thread reaches the barrier, also when preparing failed.
                    let prepared = prepare(w);
                    barrier.wait();
                    prepared?;
                    let start = Instant::now();
                    let mut taken = vec![];
                    loop {
                        let b = counter.fetch_add(1, Ordering::Relaxed);
                        if b >= n_batches {
                            break;
                        }
                        if let Err(e) = run(w, b) {
                            // No other worker takes a batch after this one failed.
                            counter.store(n_batches, Ordering::Relaxed);
                            return Err(e);
                        }
                        taken.push(b);
                    }
                    finish(w)?;
                    Ok((taken, start, Instant::now()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(gpu_err("a device thread panicked")))).collect()
    });
    let runs = runs.into_iter().collect::<HpecResult<Vec<_>>>()?;
    let t0 = runs.iter().map(|r| r.1).min().expect("at least one worker");
    let busy_seconds: Vec<f64> = runs.iter().map(|r| r.2.duration_since(t0).as_secs_f64()).collect();
    let seconds = busy_seconds.iter().copied().fold(0.0, f64::max);
    Ok(Dealt { batches: runs.into_iter().map(|r| r.0).collect(), busy_seconds, seconds })
}

/// Runs the compiled program on one GPU (see [`run_gpu_devices`]).
pub fn run_gpu(dev: Arc<CudaDevice>, compiled: &CompiledNetwork, options: GpuRunOptions) -> HpecResult<GpuRun> {
    run_gpu_devices(vec![dev], compiled, options)
}

fn gpu_err(e: impl std::fmt::Display) -> HpecError {
    HpecError::InvalidArgument(e.to_string())
}

/// Runs the compiled program on every device in `devs`: each device loads the program and
/// builds its graph once; one inference = every batch taken from a shared atomic counter by the
/// devices' threads, each relaunching its graph with the batch's first image, with no host
/// synchronization inside a batch; then the flags of every device are read back and merged.
pub fn run_gpu_devices(
    devs: Vec<Arc<CudaDevice>>,
    compiled: &CompiledNetwork,
    options: GpuRunOptions,
) -> HpecResult<GpuRun> {
    let lowering = &compiled.lowering;
    let program = &lowering.program;
    let batch = batch_rows(program);
    let n_batches = compiled.images.div_ceil(batch);
    let started = Instant::now();
    // Every device loads the program at once (one thread each, the PTX compiled once).
    let mut gps = GpuProgram::load_all(&devs, program).map_err(gpu_err)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let mut times = vec![];
    let mut timed: Vec<Dealt> = vec![];
    for rep in 0..options.warmup + options.repeats {
        for gp in &gps {
            gp.zero(lowering.flags).map_err(gpu_err)?;
            gp.synchronize().map_err(gpu_err)?;
        }
        let several = gps.len() > 1;
        let dealt = deal_batches(
            &mut gps,
            n_batches,
            |gp| gp.device().bind().map_err(gpu_err),
            |gp, b| {
                let params = [(b * batch) as i32];
                if options.graph {
                    gp.launch(&params).map_err(gpu_err)?;
                } else {
                    gp.launch_stream(&params).map_err(gpu_err)?;
                }
                // With several devices one takes its next batch only once its last one
                // finished: launches return at once, and a device that queued ahead would take
                // batches an idle device should have had.
                if several {
                    gp.synchronize().map_err(gpu_err)?;
                }
                Ok(())
            },
            |gp| gp.synchronize().map_err(gpu_err),
        )?;
        if rep >= options.warmup {
            times.push(dealt.seconds);
            timed.push(dealt);
        }
    }
    // The per-device split of the median inference.
    timed.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let median = timed.get(timed.len() / 2);
    let images_in = |b: &usize| batch.min(compiled.images - b * batch);
    let mut step_ms = vec![];
    if options.profile {
        let gp = &mut gps[0];
        gp.device().bind().map_err(gpu_err)?;
        gp.zero(lowering.flags).map_err(gpu_err)?;
        let mut sums = vec![0.0; program.steps.len()];
        for b in 0..n_batches {
            for (sum, ms) in sums.iter_mut().zip(gp.profile_steps(&[(b * batch) as i32]).map_err(gpu_err)?) {
                *sum += ms;
            }
        }
        gp.synchronize().map_err(gpu_err)?;
        step_ms = program.steps.iter().map(|s| s.label.clone()).zip(sums).collect();
    }
    let mut flags = vec![0u8; compiled.images];
    for gp in &gps {
        for (f, g) in flags.iter_mut().zip(gp.read(lowering.flags).map_err(gpu_err)?) {
            *f |= g;
        }
    }
    let live_bytes = gps[0].read(lowering.live).map_err(gpu_err)?;
    let live_rows = live_bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let compile = &gps[0].compile;
    Ok(GpuRun {
        categories: categories_of(&flags),
        seconds: sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN),
        seconds_all: times,
        load_seconds,
        kernels: compile.kernels,
        kernels_compiled: compile.compiled,
        kernels_cached: compile.from_cache,
        device_bytes: program.device_bytes(),
        live_rows,
        batches: n_batches,
        devices: gps.len(),
        batches_per_device: median.map(|d| d.batches.iter().map(Vec::len).collect()).unwrap_or_default(),
        images_per_device: median
            .map(|d| d.batches.iter().map(|bs| bs.iter().map(images_in).sum()).collect())
            .unwrap_or_default(),
        busy_seconds_per_device: median.map(|d| d.busy_seconds.clone()).unwrap_or_default(),
        step_ms,
    })
}

/// Profiled step times (`GpuRun::step_ms`, one per step of `program`) summed by what each step
/// does: the layers' SpMMs (the first 10 layers, where most images are still alive, apart from
/// the rest; the one-launch tail), compactions, weight streaming (copies), loading the batch, the categories.
pub fn profile_by_kind(
    program: &spartac::program::Program,
    step_ms: &[(String, f64)],
) -> std::collections::BTreeMap<String, f64> {
    use spartac::program::Op;
    let mut kinds = std::collections::BTreeMap::new();
    let mut layer = 0;
    for (step, (_, ms)) in program.steps.iter().zip(step_ms) {
        let kind = match step.op {
            Op::Spmm { .. } => {
                layer += 1;
                if layer <= 10 {
                    "spmm layers 0-9"
                } else {
                    "spmm layers 10+"
                }
            }
            Op::SpmmChain { .. } => "tail layers (one launch)",
            Op::PermuteColumns { .. } => "neuron order",
            Op::DropRows { .. } => "compaction",
            Op::CompactRows { merge: None, .. } => "compaction",
            Op::CompactRows { merge: Some(_), .. } => "compaction + merge",
            Op::ResolveAliases { .. } => "categories",
            Op::LoadRows { .. } => "load batch",
            Op::MarkRows { .. } => "categories",
            Op::Move => "weight streaming (copies)",
            Op::Nodes(_) => "graph nodes",
        };
        *kinds.entry(kind.to_string()).or_insert(0.0) += ms;
    }
    kinds
}
