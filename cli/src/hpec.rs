//! `spartac hpec`: generate HPEC Sparse DNN Challenge networks and run them: on the GPU as the
//! compiled task graph (`--backend cuda`, the default when a GPU answers), on the CPU engine, or
//! as the compiled program simulated on the CPU (`--backend sim`).
//!
//! * `spartac hpec generate --neurons N --layers L --out DIR [--seed S] [--images COUNT]` writes
//!   `n{N}-l{k}.tsv` (plus, with `--images`, the inputs and their truth from the f64 reference).
//!   For N = 1024 the first 120 layers are the real challenge layers (bundled relabellings).
//! * `spartac hpec run` with no arguments runs the real 1024×120 network on the 1,200 bundled
//!   real images and checks the 19 published categories. `--network DIR|FILE.tar.gz` or
//!   `--neurons N --layers L` choose another network; the truth is `--categories FILE`, else the
//!   bundled truth for the real network, else an f64 reference run (`--no-check` skips it).
//!   Prints the inference seconds (file reading excluded) and edges/s = images × nonzeros / s;
//!   fails (non-zero exit) when the categories differ from the truth.
//! * `spartac hpec export` writes a network as an ONNX model (`hpec::onnx_export`, sparse
//!   initializers) that `spartac run` loads.

use std::path::PathBuf;
use std::time::Instant;

use crate::model_args::{parse_tile, FineTile};
use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use spartac::program::hpec::Precision;
use spartac_runtime::hpec::{
    self, bundled, CacheConfig, CacheStatus, GeneratorConfig, InferOptions, KernelChoice, NetworkSource,
};

#[derive(Args, Debug)]
pub struct HpecArgs {
    #[command(subcommand)]
    pub command: HpecCommand,
}

#[derive(Subcommand, Debug)]
pub enum HpecCommand {
    /// Write a generated challenge network (and optionally inputs and truth) as TSV files.
    Generate(GenerateArgs),
    /// Run a network (on the GPU as the compiled task graph, or on the CPU) and check its categories.
    #[command(after_help = "Examples:
  spartac hpec run                                   the real 1024x120 network, 1,200 real images
  spartac hpec run --backend cuda --repeat-images --image-count 60000
                                                     the 60,000 inputs the peers are measured on
  spartac hpec run --backend cuda --neurons 1024 --layers 1920 --repeat-images --image-count 60000 --profile
                                                     a generated 1920-layer network, with where the time goes
  spartac hpec run --backend sim --image-count 300   the compiled program on the CPU (no GPU)
  spartac hpec run --network DIR --categories T.tsv  your own layer files and truth")]
    Run(Box<RunArgs>),
    /// Write a network as an ONNX model (sparse initializers) that `spartac run` loads.
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Neurons per layer: 16·2^k (1024, 4096, 16384, 65536, …).
    #[arg(long)]
    pub neurons: usize,
    /// Number of layers.
    #[arg(long)]
    pub layers: usize,
    /// Output directory (created when missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random row relabellings.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also write this many real input images (the bundled challenge images for N = 1024, at most
    /// 1,200; MNIST-derived ones for other N, at most 60,000) and their categories computed by the
    /// f64 reference.
    #[arg(long)]
    pub images: Option<usize>,
    /// For N = 1024, draw every block from the seed instead of the real network's relabellings.
    #[arg(long)]
    pub no_real_relabellings: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The exact fp32 CPU engine.
    Cpu,
    /// The compiled task graph on the GPU: every layer planned and specialized, the batch's
    /// work one CUDA graph relaunched per batch.
    Cuda,
    /// The same compiled program run by the CPU executor (a simulation of the GPU's buffers and
    /// order; slow, for checking without a GPU).
    Sim,
    /// The compiled task graph on GPU 0 when a GPU and its driver answer, else the CPU engine.
    Auto,
    /// Only the f64 reference: compute the truth of the network and images (or read it from
    /// the cache, where it is then kept for later runs) and check it against --categories or the
    /// bundled truth when one applies. Precomputes the truth of a large network, e.g. on a
    /// machine with more cores than the GPU machine's spare time allows.
    Reference,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelArg {
    Auto,
    /// Row-wise left SpMM over CSR.
    Row,
    /// Column-wise right SpMM over CSC.
    Column,
}

/// Which network a command works on.
#[derive(Args, Debug)]
pub struct NetworkArgs {
    /// A directory of n{N}-l{k}.tsv files, a .tar.gz holding them, or one layer file.
    #[arg(long, conflicts_with = "neurons")]
    pub network: Option<PathBuf>,
    /// Generate an N-neuron network in memory (needs --layers); default: the real 1024x120.
    #[arg(long, requires = "layers")]
    pub neurons: Option<usize>,
    /// Layer count (with --network: use the first L layers).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed for generated networks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub net: NetworkArgs,
    /// Image TSV (`image pixel value`, optionally .gz); default: the bundled real images (1,200
    /// challenge images for 1024 neurons, MNIST-derived images for other sizes).
    #[arg(long)]
    pub images: Option<PathBuf>,
    /// Use only the first COUNT images (default for bundled images: 1,200; MNIST-derived
    /// images go up to 60,000).
    #[arg(long)]
    pub image_count: Option<usize>,
    /// Repeat the images in order up to --image-count (image i is image i mod n): how the GPU
    /// peers' published runs (SNICIT, SNIG) made 60,000 inputs from the 1,200 real challenge
    /// images. The truth of the distinct images is repeated with them.
    #[arg(long)]
    pub repeat_images: bool,
    /// Truth: one 1-based image id per line.
    #[arg(long)]
    pub categories: Option<PathBuf>,
    /// Skip the truth check when no truth file or bundled truth applies.
    #[arg(long)]
    pub no_check: bool,
    /// Run as one rank of an MPI job: `mpirun -np R spartac hpec run --mpi ...`. Every rank
    /// loads the network; the images are dealt to the ranks by a hash of their id (seed 001's
    /// input hashing); each rank runs its share on its backend (with cuda, GPUs local rank x
    /// --gpus onward); rank 0 gathers the categories, checks them and prints one summary. A
    /// failing rank fails the job with its error on rank 0. libmpi is opened at run time
    /// (Open MPI or MPICH; $SPARTAC_MPI_LIB names another).
    #[cfg(feature = "mpi")]
    #[arg(long)]
    pub mpi: bool,
    /// With --mpi: make this rank fail before its share (tests the failure path).
    #[cfg(feature = "mpi")]
    #[arg(long, hide = true, requires = "mpi")]
    pub mpi_fail_rank: Option<usize>,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[arg(long, value_enum, default_value_t = KernelArg::Auto)]
    pub kernel: KernelArg,
    /// Worker threads (default: one per core; at most 1024).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Images per block.
    #[arg(long, default_value_t = 32)]
    pub block_images: usize,
    /// Relabel neurons by bucket hashing with this many buckets (layer hashing).
    #[arg(long)]
    pub layer_hashing: Option<usize>,
    /// Cache directory for parsed networks (default ~/.cache/spartac/hpec).
    #[arg(long, conflicts_with = "no_cache")]
    pub cache_dir: Option<PathBuf>,
    /// Read and write no cache: parsed networks, compiled layers and reference categories are
    /// all rebuilt.
    #[arg(long)]
    pub no_cache: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// Settings of the compiled backends (`--backend cuda` and `sim`).
#[derive(Args, Debug)]
pub struct GpuArgs {
    /// Images per batch (rows of the activation buffers; default: the images split evenly over the GPUs, one batch each).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Drop dead images (all-zero rows) after every N layers; 0 keeps every row to the end.
    #[arg(long, default_value_t = 8)]
    pub compact_every: usize,
    /// Also drop dead images after each of the first L layers (where most of them die).
    #[arg(long, default_value_t = 20)]
    pub compact_first: usize,
    /// Compactions after layer L and later also merge images whose activation rows are
    /// bitwise identical (one row then stands for all of them; exact). The activations of the
    /// challenge networks converge, so late layers run on a handful of rows.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_MERGE_FROM, value_name = "L")]
    pub merge_from: usize,
    /// Never merge identical rows (every surviving image computed to the end).
    #[arg(long)]
    pub no_merge: bool,
    /// Layers from L on run in one launch (a thread per output element, the GPU's CTAs meeting
    /// at a barrier between layers): no per-layer launches, compactions or planning, only the
    /// layers' nonzeros as tables. For the converged tail, where a few merged rows are left; on
    /// many rows it is slower than the layers' own kernels.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_TAIL_FROM, value_name = "L")]
    pub tail_from: usize,
    /// Give every layer its own kernels to the end (no one-launch tail).
    #[arg(long)]
    pub no_tail: bool,
    /// Layers with at most R live rows run a kernel made for few rows (a thread per output
    /// element) instead of the tiled tensor-core kernel; 0 always runs the tiled one.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_FEW_ROWS, value_name = "R")]
    pub few_rows: usize,
    /// Layers at least W neurons wide run on the row-scatter kernel (each activation row read
    /// once, only the weight rows its nonzeros select, deterministic fixed-point sums) instead of
    /// the tiled 3xTF32 kernel, whose activation traffic grows with the width; 0 (the default)
    /// never: it measured 3x slower at 16384 neurons so far.
    #[arg(long, default_value_t = 0, value_name = "W")]
    pub scatter_from: usize,
    /// Layers at least W neurons wide (up to 51,200, whose rows fit shared memory) whose plan
    /// has element-sparse parts run as a gather from staged rows (a thread per column, its
    /// nonzeros' k in registers, up to 8 rows at a time) instead of the planned tensor-core
    /// kernels, whose activation traffic grows with the width; layers planned as blocks alone
    /// (the reordered challenge layers) keep them; 0 never.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_GATHER_FROM, value_name = "W")]
    pub gather_from: usize,
    /// Keep the neurons in the network's order. By default (fp32) the neurons between the layers
    /// before the tail are relabelled once at compile time so that those both neighbouring
    /// layers treat alike sit together (nothing moves at run time): the challenge networks'
    /// first-block layers then plan as dense 16x16 blocks.
    #[arg(long)]
    pub no_reorder: bool,
    /// Compactions that do not merge copy every live row into the other buffer (the packing
    /// form) instead of dropping the dead rows in place (only the rows that die and those that
    /// fill their places move).
    #[arg(long)]
    pub packing_compaction: bool,
    /// Networks at least W neurons wide may also permute the activations between two layers
    /// whose groupings are unrelated (the relabelled blocks): each layer keeps its own order
    /// and one pass over the live rows moves them between the two; 0 never.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_PERMUTE_FROM, value_name = "W")]
    pub permute_from: usize,
    /// Tile of the element-sparse layer kernels, ROWS,GROUPS,K_ROWS,N_TILES (3xTF32: rows of A
    /// per CTA, column groups per CTA, chunk depth in 32s of k, 8-column tiles per group), or
    /// "auto" for the specializer's general choice [default: 64,16,6,1; 64,24,6,1 from 4096
    /// neurons]
    #[arg(long, value_parser = parse_tile)]
    pub fine_tile: Option<FineTile>,
    /// Stream every layer's weights from pinned host memory, even when they fit on the device.
    #[arg(long)]
    pub stream_weights: bool,
    /// Most MiB of packed weights to keep on the device; above it every layer's weights stream
    /// (default: what the GPU has free after the activations and images).
    #[arg(long)]
    pub weight_budget_mib: Option<usize>,
    /// Device slots streamed weights rotate through.
    #[arg(long, default_value_t = 4)]
    pub stream_slots: usize,
    /// Do not hand weight values to the specializer (no value folding).
    #[arg(long)]
    pub no_fold: bool,
    /// Activations and arithmetic. screened (the default): the layers before the tail in fp32
    /// with weights and bias rounded up, so that no activation falls below the f64 reference's
    /// (an image dead there is dead); the survivors through every layer rounded down (an image
    /// alive there is alive); f64 for the few survivors neither decides. The reference's
    /// categories, at fp32 speed plus a second pass over the surviving images. f32: fp32 throughout, fastest, but an image
    /// at an unstable fixed point may end on the other side of zero than in the reference (one
    /// image of the generated 4096-neuron networks does). f64: every layer computed as the f64
    /// reference computes it, bit for bit.
    #[arg(long, default_value = "screened", value_parser = hpec::screen::Arithmetic::parse)]
    pub precision: hpec::screen::Arithmetic,
    /// Fine-kernel engine: auto (the specializer's rule), simt (FP32 FMAs) or tf32x3 (tensor
    /// cores at fp32 accuracy).
    #[arg(long, default_value = "auto", value_parser = parse_engine)]
    pub engine: spartac::codegen::Engine,
    /// Rows the planner prices each layer at (at most the batch). Images die in the first
    /// layers, so most layers run on far fewer rows than the batch holds.
    #[arg(long, default_value_t = spartac::program::hpec::DEFAULT_PLAN_ROWS)]
    pub plan_rows: usize,
    /// Plan every layer with element-sparse parts only (no block covers, no dense): faster to
    /// compile (a 65536-neuron layer 2.7 s instead of 8-11 on one core), and where the planner
    /// would cover a layer with sparse 16x16 blocks (structured 65536-neuron layers), ~47 bytes
    /// of tables a nonzero instead of ~136.
    #[arg(long)]
    pub fine_only: bool,
    /// Issue the batch's work as plain stream launches instead of the CUDA graph.
    #[arg(long)]
    pub no_graph: bool,
    /// Deal the images to batches by a hash of their id (seed 001's input hashing), so that
    /// batches of similar images (early-dying or long-lived) do not leave one GPU the long ones.
    #[arg(long)]
    pub hash_inputs: bool,
    /// GPUs to spread batches over (one graph each, a shared batch counter).
    #[arg(long, default_value_t = 1)]
    pub gpus: usize,
    /// Timed inferences (the median is reported), after --warmup untimed ones.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// After the timed runs, time every step of one more run (stream launches with events) and
    /// print where the time goes: per kind of step, and per layer in the JSON.
    #[arg(long)]
    pub profile: bool,
    /// For 1024 neurons, use the 60,000 MNIST-derived challenge images instead of the 1,200 bundled
    /// real ones (truth: the f64 reference).
    #[arg(long)]
    pub mnist_images: bool,
}

pub fn run(args: HpecArgs) -> anyhow::Result<()> {
    match args.command {
        HpecCommand::Generate(args) => generate(args),
        HpecCommand::Run(args) => run_network(*args),
        HpecCommand::Export(args) => export(args),
    }
}

fn generator_config(
    neurons: usize,
    layers: usize,
    seed: u64,
    real_relabellings: bool,
) -> anyhow::Result<GeneratorConfig> {
    let relabellings =
        if neurons == 1024 && real_relabellings { Some(bundled::real_1024_relabellings()?) } else { None };
    Ok(GeneratorConfig { neurons, layers, seed, relabellings })
}

fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let config = generator_config(args.neurons, args.layers, args.seed, !args.no_real_relabellings)?;
    let network = hpec::generate_with(&config)?;
    // The images are drawn (and their count checked) before anything is written.
    let images = args.images.map(|count| bundled::images_for_neurons(args.neurons, count)).transpose()?;
    let paths = hpec::write_network_tsv(&network, &args.out)?;
    println!("wrote {} layers of {} neurons to {}", paths.len(), network.neurons, args.out.display());
    if let Some(images) = images {
        let image_path = args.out.join(format!("sparse-images-{}.tsv", args.neurons));
        hpec::write_images_tsv(&images, &image_path)?;
        let truth = hpec::reference_categories(&network, &images)?;
        let truth_path = args.out.join(format!("neuron{}-l{}-categories.tsv", args.neurons, args.layers));
        hpec::write_categories(&truth, &truth_path)?;
        println!(
            "wrote {} images to {} and their {} categories (f64 reference) to {}",
            images.n_images(),
            image_path.display(),
            truth.len(),
            truth_path.display()
        );
    }
    Ok(())
}

/// The network a command names: loaded from `--network`, or generated from
/// `--neurons/--layers` (default: the real 1024x120 network from the bundled relabellings).
/// Returns the network, a description, and whether it is the real 1024x120 network.
fn select_network(net: &NetworkArgs, cache: &CacheConfig) -> anyhow::Result<(hpec::Network, String, bool)> {
    let (path, neurons, layers, seed) = (&net.network, net.neurons, net.layers, net.seed);
    if let Some(path) = path {
        let source = NetworkSource::from_path(path);
        let (network, status) = hpec::load_network_with_status(&source, layers, cache)
            .with_context(|| format!("cannot load the network {}", path.display()))?;
        let cache_note = match status {
            CacheStatus::Disabled => "no cache".to_string(),
            CacheStatus::Hit(file) => format!("from cache {}", file.display()),
            CacheStatus::Written { path: file, .. } => format!("parsed, cached to {}", file.display()),
            CacheStatus::WriteFailed { reason, .. } => format!("parsed, cache not written: {reason}"),
        };
        return Ok((network, format!("{} ({cache_note})", path.display()), false));
    }
    let neurons = neurons.unwrap_or(1024);
    let layers = layers.unwrap_or(120);
    let config = generator_config(neurons, layers, seed, true)?;
    let real = neurons == 1024 && layers == 120;
    let name = if real {
        "real 1024x120 (regenerated from the bundled relabellings)".to_string()
    } else {
        format!("generated {neurons}x{layers} seed {seed}")
    };
    Ok((hpec::generate_with(&config)?, name, real))
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub net: NetworkArgs,
    /// Batch size (images) of the model's input `images: f32[BATCH, N]`: 1 to 16,777,216 (the
    /// most images an image file holds).
    #[arg(long, default_value_t = 1, value_parser = parse_export_batch)]
    pub batch: usize,
    /// The ONNX file to write (written atomically).
    #[arg(long)]
    pub out: PathBuf,
}

fn export(args: ExportArgs) -> anyhow::Result<()> {
    crate::outputs::check_outputs([("--out", Some(args.out.as_path()))])?;
    let (network, name, _) = select_network(&args.net, &CacheConfig::Default)?;
    let graph = hpec::network_to_graph(&network, args.batch);
    spartac::frontend::save_model(&graph, &args.out)?;
    println!(
        "wrote {} ({} layers as MatMul with sparse initializers + Add + Relu + Min, input images: f32[{}, {}]) from {name}",
        args.out.display(),
        network.n_layers(),
        args.batch,
        network.neurons
    );
    Ok(())
}

enum Truth {
    File(PathBuf),
    Bundled,
    Reference,
    Unchecked,
}

fn run_network(args: RunArgs) -> anyhow::Result<()> {
    let cache = match (&args.cache_dir, args.no_cache) {
        (_, true) => CacheConfig::Disabled,
        (Some(dir), false) => CacheConfig::Directory(dir.clone()),
        (None, false) => CacheConfig::Default,
    };
    // A generated network and drawn images are estimated together before either is built.
    if let (Some(n), Some(l), None) = (args.net.neurons, args.net.layers, &args.images) {
        let count =
            args.image_count.unwrap_or(if args.gpu.mnist_images { 60_000 } else { bundled::DEFAULT_IMAGE_COUNT });
        let drawn =
            if n != 1024 || args.gpu.mnist_images { hpec::mnist::images_bytes_bound(count.min(60_000), n) } else { 0 };
        hpec::generator::check_fits(
            &format!("a {n}x{l} network with {count} images"),
            hpec::generator::network_bytes(n, l) + drawn,
            hpec::generator::available_memory(),
        )?;
    }
    // The truth file is read after the run: one that cannot be read (a FIFO, a device) is refused first.
    if let Some(path) = &args.categories {
        spartac::contained::check_regular(path)
            .with_context(|| format!("cannot read the categories {}", path.display()))?;
    }
    let load_start = Instant::now();
    let (network, network_name, real_network) = select_network(&args.net, &cache)?;
    // With --repeat-images the source's own images are the base the count repeats.
    let wanted = |default: usize| match args.image_count {
        Some(c) if args.repeat_images => c.min(default),
        Some(c) => c,
        None => default,
    };
    let images = match &args.images {
        Some(path) => hpec::load_images(path, network.neurons)
            .with_context(|| format!("cannot read the images {}", path.display()))?,
        None if args.gpu.mnist_images => {
            hpec::mnist::mnist_images(&bundled::mnist_digits()?, network.neurons, wanted(60_000))?
        }
        None if network.neurons == 1024 => bundled::images_for_neurons(1024, wanted(bundled::DEFAULT_IMAGE_COUNT))?,
        None => bundled::images_for_neurons(
            network.neurons,
            wanted(if args.repeat_images { 60_000 } else { bundled::DEFAULT_IMAGE_COUNT }),
        )?,
    };
    // Truth is computed on the distinct images; repeated copies share their original's category.
    let base_images = match args.image_count {
        Some(count) if !args.repeat_images => images.first(count),
        _ => images,
    };
    let images = if args.repeat_images {
        let count = args.image_count.context("--repeat-images needs --image-count")?;
        base_images.tiled(count)?
    } else {
        base_images.clone()
    };
    let load_seconds = load_start.elapsed().as_secs_f64();
    if images.n_images() == 0 {
        bail!("no images to run (--image-count 0 or an empty image file)");
    }
    let truth_kind =
        match (&args.categories, real_network && args.images.is_none() && !args.gpu.mnist_images, args.no_check) {
            (Some(path), _, _) => Truth::File(path.clone()),
            (None, true, _) => Truth::Bundled,
            (None, false, false) => Truth::Reference,
            (None, false, true) => Truth::Unchecked,
        };

    // Auto: the compiled task graph when a GPU and its driver answer, else the CPU engine.
    if args.gpu.gpus == 0 || args.gpu.repeat == 0 {
        bail!("--gpus and --repeat must be at least 1");
    }
    #[cfg(feature = "mpi")]
    if args.mpi {
        return run_mpi(&args, &network, &network_name, &images, &base_images, &truth_kind);
    }
    // The GPUs are opened once, here: no driver or too few devices is a one-line error (or,
    // for auto, the CPU engine) before anything is compiled.
    let (backend, devices) = match args.backend {
        Backend::Cuda => (Backend::Cuda, open_gpus(args.gpu.gpus)?),
        Backend::Auto => match open_gpus(args.gpu.gpus) {
            Ok(devices) => (Backend::Cuda, devices),
            Err(_) => (Backend::Cpu, vec![]),
        },
        other => (other, vec![]),
    };
    if backend == Backend::Reference {
        return reference_only(&args, &network, &network_name, &base_images, images.n_images(), &truth_kind);
    }
    if matches!(backend, Backend::Cuda | Backend::Sim) {
        return run_compiled(&args, devices, &network, &network_name, &images, &base_images, load_seconds, &truth_kind);
    }
    let (result, summary) = cpu_engine(&args, &network, &images)?;
    if let (Some(line), false) = (summary, args.json) {
        println!("{line}");
    }
    let (truth, truth_name) = truth_categories(&truth_kind, &network, &base_images, images.n_images(), args.no_cache)?;
    let verdict = truth.as_ref().map(|t| *t == result.categories);
    report(&args, &network_name, &network, &images, load_seconds, &result, &truth_name, verdict)?;
    match verdict {
        Some(false) => bail!("{}", mismatch(&result.categories, truth.as_deref().unwrap_or(&[]), &truth_name)),
        _ => Ok(()),
    }
}

/// The CPU engine on `images` in the precision `args` asks for (the f64 reference stands in
/// for f64), with the screened run's one-line summary.
fn cpu_engine(
    args: &RunArgs,
    network: &hpec::Network,
    images: &hpec::Images,
) -> anyhow::Result<(hpec::InferResult, Option<String>)> {
    let options = InferOptions {
        threads: args.threads.map(usize::from),
        kernel: match args.kernel {
            KernelArg::Auto => KernelChoice::Auto,
            KernelArg::Row => KernelChoice::RowWiseCsr,
            KernelArg::Column => KernelChoice::ColumnWiseCsc,
        },
        block_images: args.block_images,
        layer_hashing_buckets: args.layer_hashing,
        ..InferOptions::default()
    };
    // The CPU engine is fp32; the f64 reference stands in for the f64 program.
    let reference = |net: &hpec::Network, imgs: &hpec::Images| -> anyhow::Result<hpec::InferResult> {
        let t0 = Instant::now();
        let categories = hpec::reference_categories(net, imgs)?;
        let seconds = t0.elapsed().as_secs_f64();
        let edges = imgs.n_images() as f64 * net.total_nonzeros() as f64;
        Ok(hpec::InferResult {
            categories,
            seconds,
            prepare_seconds: 0.0,
            images: imgs.n_images(),
            layers: net.n_layers(),
            edges,
            edges_per_second: edges / seconds.max(1e-12),
            row_wise_steps: 0,
            column_wise_steps: 0,
            threads: rayon::current_num_threads(),
        })
    };
    let mut line = None;
    let result = match args.gpu.precision {
        hpec::screen::Arithmetic::F32 => hpec::infer(network, images, &options)?,
        hpec::screen::Arithmetic::F64 => reference(network, images)?,
        hpec::screen::Arithmetic::Screened => {
            // The screen over the layers before the default tail start, as on the GPU.
            let layers = spartac::program::hpec::HpecOptions::default().tail_start(network.n_layers());
            let screened = hpec::screen::run_screened(network, images, layers, |net, imgs, precision| {
                let r = match precision {
                    Precision::F64 => reference(net, imgs)?,
                    Precision::F32 => hpec::infer(net, imgs, &options)?,
                };
                anyhow::Ok((r.categories.clone(), r))
            })?;
            let summary: Vec<String> = screened
                .stages
                .iter()
                .map(|s| format!("{} {} -> {} ({:.3} s)", s.name, s.images, s.found.len(), s.result.seconds))
                .collect();
            line = Some(format!("screened (fp32 bounds, f64 for what they leave open): {}", summary.join("; ")));
            let mut stages = screened.stages.into_iter();
            let mut result = stages.next().expect("the screen always runs").result;
            for s in stages {
                result.seconds += s.result.seconds;
                result.row_wise_steps += s.result.row_wise_steps;
                result.column_wise_steps += s.result.column_wise_steps;
            }
            result.edges = images.n_images() as f64 * network.total_nonzeros() as f64;
            result.edges_per_second = result.edges / result.seconds.max(1e-12);
            result.layers = network.n_layers();
            result.categories = screened.categories;
            result
        }
    };
    Ok((result, line))
}

/// `--mpi`: this process is one rank; rank 0 reports (module docs of `hpec::mpi`).
#[cfg(feature = "mpi")]
fn run_mpi(
    args: &RunArgs,
    network: &hpec::Network,
    network_name: &str,
    images: &hpec::Images,
    base_images: &hpec::Images,
    truth_kind: &Truth,
) -> anyhow::Result<()> {
    use hpec::mpi::{deal, Mpi, RankResult};
    let mpi = Mpi::init()?;
    let (rank, ranks) = (mpi.rank(), mpi.size());
    // The rank on this host (GPUs are numbered per host).
    let local = ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok())
        .unwrap_or(rank);
    let mine = deal(images.n_images(), rank, ranks);
    let started = Instant::now();
    let result = (|| -> anyhow::Result<RankResult> {
        if args.mpi_fail_rank == Some(rank) {
            bail!("failing on purpose (--mpi-fail-rank {rank})");
        }
        let part = images.reordered(&mine)?;
        let devices = match args.backend {
            Backend::Cuda => open_gpus_from(local * args.gpu.gpus, args.gpu.gpus)?,
            Backend::Auto => open_gpus_from(local * args.gpu.gpus, args.gpu.gpus).unwrap_or_default(),
            Backend::Reference => bail!("--backend reference does not take --mpi"),
            Backend::Sim | Backend::Cpu => vec![],
        };
        let (positions, seconds) = if devices.is_empty() && args.backend != Backend::Sim {
            let (r, _) = cpu_engine(args, network, &part)?;
            (r.categories, r.seconds)
        } else {
            let computed = compute_compiled(args, &devices, network, &part, &|| {})?;
            let seconds = computed.seconds().unwrap_or_else(|| started.elapsed().as_secs_f64());
            (computed.categories, seconds)
        };
        let categories = positions.iter().map(|&p| mine[p as usize - 1] + 1).collect();
        Ok(RankResult::Done { categories, seconds, images: part.n_images() })
    })()
    .unwrap_or_else(|e| RankResult::Failed(format!("{e:#}")));
    let gathered = mpi.gather(&result.to_bytes())?;
    let outcome = match gathered {
        Some(messages) => {
            let results = messages.iter().map(|m| RankResult::from_bytes(m)).collect::<Result<Vec<_>, _>>()?;
            mpi_report(args, network, network_name, images, base_images, truth_kind, ranks, &results)
        }
        None => Ok(()),
    };
    // Every rank ends with rank 0's verdict (mpirun's exit status then says it too).
    let failed = mpi.broadcast(i32::from(outcome.is_err()))?;
    drop(mpi);
    match (outcome, failed) {
        (Err(e), _) => Err(e),
        (Ok(()), 0) => Ok(()),
        // Rank 0 printed the error; the other ranks leave quietly with its status.
        (Ok(()), _) => std::process::exit(1),
    }
}

/// Rank 0 of `--mpi`: the gathered results checked and printed (one line, or JSON).
#[cfg(feature = "mpi")]
#[allow(clippy::too_many_arguments)]
fn mpi_report(
    args: &RunArgs,
    network: &hpec::Network,
    network_name: &str,
    images: &hpec::Images,
    base_images: &hpec::Images,
    truth_kind: &Truth,
    ranks: usize,
    results: &[hpec::mpi::RankResult],
) -> anyhow::Result<()> {
    use hpec::mpi::RankResult;
    if let Some((r, message)) = results.iter().enumerate().find_map(|(r, x)| match x {
        RankResult::Failed(m) => Some((r, m)),
        RankResult::Done { .. } => None,
    }) {
        bail!("rank {r} of {ranks} failed: {message}");
    }
    let done: Vec<(&Vec<u32>, f64, usize)> = results
        .iter()
        .filter_map(|x| match x {
            RankResult::Done { categories, seconds, images } => Some((categories, *seconds, *images)),
            RankResult::Failed(_) => None,
        })
        .collect();
    let mut categories: Vec<u32> = done.iter().flat_map(|(c, _, _)| c.iter().copied()).collect();
    categories.sort_unstable();
    let (truth, truth_name) = truth_categories(truth_kind, network, base_images, images.n_images(), args.no_cache)?;
    let verdict = truth.as_ref().map(|t| *t == categories);
    let slowest = done.iter().map(|d| d.1).fold(0.0, f64::max);
    let fastest = done.iter().map(|d| d.1).fold(f64::INFINITY, f64::min);
    if args.json {
        let value = serde_json::json!({
            "network": network_name,
            "neurons": network.neurons,
            "layers": network.n_layers(),
            "images": images.n_images(),
            "mpi_ranks": ranks,
            "precision": args.gpu.precision.name(),
            "seconds": slowest,
            "seconds_per_rank": done.iter().map(|d| d.1).collect::<Vec<_>>(),
            "images_per_rank": done.iter().map(|d| d.2).collect::<Vec<_>>(),
            "categories": categories.len(),
            "truth": truth_name,
            "verdict": verdict_word(verdict),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "mpi: {network_name}, {} images over {ranks} ranks ({}): slowest rank {:.3} ms, fastest {:.3} ms ({} precision); categories: {} images; truth: {truth_name}: {}",
            images.n_images(),
            done.iter().map(|d| d.2.to_string()).collect::<Vec<_>>().join(" + "),
            slowest * 1e3,
            fastest * 1e3,
            args.gpu.precision.name(),
            categories.len(),
            verdict_word(verdict)
        );
    }
    match verdict {
        Some(false) => bail!("{}", mismatch(&categories, truth.as_deref().unwrap_or(&[]), &truth_name)),
        _ => Ok(()),
    }
}

/// `--backend reference`: the f64 reference categories of `base` (from the cache or computed and
/// cached), checked against the given truth when there is one besides the reference.
fn reference_only(
    args: &RunArgs,
    network: &hpec::Network,
    network_name: &str,
    base: &hpec::Images,
    count: usize,
    truth_kind: &Truth,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let (reference, name) = truth_categories(&Truth::Reference, network, base, count, args.no_cache)?;
    let reference = reference.expect("the reference always gives categories");
    let seconds = start.elapsed().as_secs_f64();
    let other = match truth_kind {
        Truth::File(_) | Truth::Bundled => Some(truth_categories(truth_kind, network, base, count, args.no_cache)?),
        Truth::Reference | Truth::Unchecked => None,
    };
    let verdict = other.as_ref().map(|(t, _)| t.as_deref() == Some(&reference[..]));
    let verdict_text = verdict_word(verdict);
    if args.json {
        let value = serde_json::json!({
            "network": network_name,
            "neurons": network.neurons,
            "layers": network.n_layers(),
            "images": count,
            "backend": "reference",
            "seconds": seconds,
            "reference": name,
            "categories": reference,
            "truth": other.as_ref().map(|(_, n)| n.clone()),
            "verdict": verdict_text,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("network: {network_name}: {} neurons, {} layers", network.neurons, network.n_layers());
        println!("reference: {name}: {} of {count} images in {seconds:.1} s", reference.len());
        if let Some((_, truth_name)) = &other {
            println!("checked against {truth_name}: {verdict_text}");
        }
    }
    match (verdict, other) {
        (Some(false), Some((truth, truth_name))) => {
            bail!("{}", mismatch(&reference, truth.as_deref().unwrap_or(&[]), &truth_name))
        }
        _ => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &RunArgs,
    network_name: &str,
    network: &hpec::Network,
    images: &hpec::Images,
    load_seconds: f64,
    result: &hpec::InferResult,
    truth_name: &str,
    verdict: Option<bool>,
) -> anyhow::Result<()> {
    let verdict_text = verdict_word(verdict);
    if args.json {
        let value = serde_json::json!({
            "network": network_name,
            "neurons": network.neurons,
            "layers": network.n_layers(),
            "nonzeros": network.total_nonzeros(),
            "images": images.n_images(),
            "backend": "cpu",
            "precision": args.gpu.precision.name(),
            "threads": result.threads,
            "load_seconds": load_seconds,
            "prepare_seconds": result.prepare_seconds,
            "seconds": result.seconds,
            "edges_per_second": result.edges_per_second,
            "row_wise_steps": result.row_wise_steps,
            "column_wise_steps": result.column_wise_steps,
            "categories": result.categories,
            "truth": truth_name,
            "verdict": verdict_text,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "network: {network_name}: {} neurons, {} layers, {} nonzeros",
        network.neurons,
        network.n_layers(),
        network.total_nonzeros()
    );
    println!("images: {} ({} nonzeros); loading took {:.3} s", images.n_images(), images.n_nonzeros(), load_seconds);
    println!(
        "inference (cpu, {} threads): {:.4} s, {:.3e} edges/s ({} row-wise CSR and {} column-wise CSC block-layer steps)",
        result.threads, result.seconds, result.edges_per_second, result.row_wise_steps, result.column_wise_steps
    );
    println!("categories: {} images; truth: {truth_name}: {verdict_text}", result.categories.len());
    Ok(())
}

/// `hpec export --batch`: 1 to [`hpec::tsv_reader::MAX_IMAGES`] images (a batch past every image
/// file would write a model nothing can run).
fn parse_export_batch(s: &str) -> Result<usize, String> {
    let max = hpec::tsv_reader::MAX_IMAGES;
    match s.trim().parse::<usize>() {
        Ok(b) if (1..=max).contains(&b) => Ok(b),
        _ => Err(format!("{s:?}: expected a batch of 1 to {max} images")),
    }
}

fn parse_engine(s: &str) -> Result<spartac::codegen::Engine, String> {
    use spartac::codegen::Engine;
    match s {
        "auto" => Ok(Engine::Auto),
        "simt" => Ok(Engine::Simt),
        "tf32x3" => Ok(Engine::Tf32x3),
        other => Err(format!("unknown engine {other:?} (choose auto, simt or tf32x3)")),
    }
}

/// The truth a run of `count` images is checked against, with its name: the truth of the
/// distinct `base` images, repeated when the run's images are copies of them (`--repeat-images`).
fn truth_categories(
    kind: &Truth,
    network: &hpec::Network,
    base: &hpec::Images,
    count: usize,
    no_cache: bool,
) -> anyhow::Result<(Option<Vec<u32>>, String)> {
    let (truth, name) = base_truth(kind, network, base, no_cache)?;
    let n = base.n_images();
    Ok(match truth {
        Some(t) if count > n => {
            (Some(hpec::images::tile_categories(&t, n, count)), format!("{name}, repeated to {count} images"))
        }
        other => (other, name),
    })
}

fn base_truth(
    kind: &Truth,
    network: &hpec::Network,
    images: &hpec::Images,
    no_cache: bool,
) -> anyhow::Result<(Option<Vec<u32>>, String)> {
    Ok(match kind {
        Truth::File(path) => (
            Some(
                hpec::load_categories(path)
                    .with_context(|| format!("cannot read the categories {}", path.display()))?,
            ),
            path.display().to_string(),
        ),
        Truth::Bundled => {
            let mut truth = bundled::real_1024_categories()?;
            let count = images.n_images() as u32;
            truth.retain(|&id| id <= count);
            (Some(truth), "bundled neuron1024-l120-categories-first1200.tsv".to_string())
        }
        Truth::Reference => {
            let dir = if no_cache { None } else { spartac_runtime::exec::cache_root().map(|r| r.join("reference")) };
            let (ids, cached) = hpec::reference_categories_cached(network, images, dir.as_deref())?;
            (Some(ids), if cached { "f64 reference (cached)" } else { "f64 reference run" }.to_string())
        }
        Truth::Unchecked => (None, "none".to_string()),
    })
}

/// One compiled program and what running it gave: categories as 1-based positions among its
/// images, and the GPU's measurements (none on the CPU executor).
struct Stage {
    compiled: spartac_runtime::hpec::task_graph::CompiledNetwork,
    categories: Vec<u32>,
    run: Option<spartac_runtime::hpec::task_graph::GpuRun>,
}

/// The lowering options `g` asks for, for `n_images` images in `precision`.
fn hpec_options(
    g: &GpuArgs,
    devices: &[std::sync::Arc<spartac_runtime::cuda::CudaDevice>],
    network: &hpec::Network,
    images: &hpec::Images,
    precision: Precision,
) -> anyhow::Result<spartac::program::hpec::HpecOptions> {
    use spartac::program::hpec::HpecOptions;
    // One batch per GPU by default: a batch's layers cost a launch chain whatever its rows, so
    // fewer, larger batches win while they fit (`--batch` cuts them smaller).
    let per_gpu = images.n_images().div_ceil(devices.len().max(1));
    let batch = g.batch.unwrap_or(per_gpu).min(images.n_images()).max(1);
    // Weights stay resident while they fit: by default the budget is what the first GPU has
    // free (less a tenth for the driver and fragmentation) after the activation buffers and the
    // images; a network over it streams its weights from pinned host memory instead of failing.
    let weight_budget = match (g.stream_weights, g.weight_budget_mib, devices.first()) {
        (true, _, _) => 0,
        (false, Some(mib), _) => mib << 20,
        (false, None, Some(d)) => {
            let (free, _) = d.memory()?;
            let elem = if precision == Precision::F64 { 8 } else { 4 };
            let activations = 2 * batch * network.neurons * elem + 2 * batch * 4;
            let inputs = 4 * (images.pixels.offsets.len() + 2 * images.n_nonzeros()) + images.n_images();
            (free / 10 * 9).saturating_sub(activations + inputs)
        }
        (false, None, None) => usize::MAX,
    };
    Ok(HpecOptions {
        batch,
        compact_every: g.compact_every,
        compact_first: g.compact_first,
        fine_tile: match &g.fine_tile {
            Some(t) => t.0,
            None => Some(spartac::program::hpec::default_fine_tile_for(network.neurons)),
        },
        weight_budget,
        stream_slots: g.stream_slots,
        fold_values: !g.no_fold,
        engine: g.engine,
        plan_rows: Some(g.plan_rows),
        sm_count: match devices.first() {
            Some(d) => d.sm_count()?,
            None => HpecOptions::default().sm_count,
        },
        merge_from: (!g.no_merge).then_some(g.merge_from),
        few_rows: (g.few_rows > 0).then_some(g.few_rows),
        // The row-scatter kernel's fixed-point sums err by an absolute amount, which the
        // screen's relative widening does not cover.
        scatter_from: (g.scatter_from > 0 && g.precision != hpec::screen::Arithmetic::Screened)
            .then_some(g.scatter_from),
        fine_only: g.fine_only,
        tail_from: (!g.no_tail).then_some(g.tail_from),
        precision,
        gather_from: (g.gather_from > 0).then_some(g.gather_from),
        reorder: !g.no_reorder,
        permute_from: (g.permute_from > 0).then_some(g.permute_from),
        compact_in_place: !g.packing_compaction,
    })
}

/// Compiles `network` for `images` and runs it on `devices` (the CPU executor when there are
/// none).
fn run_stage(
    args: &RunArgs,
    devices: &[std::sync::Arc<spartac_runtime::cuda::CudaDevice>],
    network: &hpec::Network,
    images: &hpec::Images,
    options: &spartac::program::hpec::HpecOptions,
    progress: &(dyn Fn() + Sync),
) -> anyhow::Result<Stage> {
    use spartac_runtime::hpec::task_graph;
    let g = &args.gpu;
    // Compiled layers are kept under the cache root's layers/ (not with --no-cache).
    let layer_cache = if args.no_cache { None } else { spartac_runtime::exec::cache_root().map(|r| r.join("layers")) };
    let mut compiled = task_graph::compile_cached(network, images, options, layer_cache.as_deref(), progress)?;
    if devices.is_empty() {
        let t0 = Instant::now();
        let categories = task_graph::run_cpu(&compiled)?;
        eprintln!("simulated on the CPU executor in {:.2} s", t0.elapsed().as_secs_f64());
        return Ok(Stage { compiled, categories, run: None });
    }
    let run = task_graph::run_gpu_devices(
        devices.to_vec(),
        &compiled,
        task_graph::GpuRunOptions { graph: !g.no_graph, warmup: g.warmup, repeats: g.repeat, profile: g.profile },
    )?;
    // The constants live on the device now: their host copies (the packed tables, ~45 GB
    // for 16384x1920) go before the next stage and the reference runs.
    compiled.lowering.program = compiled.lowering.program.skeleton();
    Ok(Stage { compiled, categories: run.categories.clone(), run: Some(run) })
}

/// What the compiled backends computed: the first stage (the whole run unless screened), the
/// screen with its survivor count, the later stages, the categories (1-based positions among
/// the images), and the first stage's options.
struct Computed {
    first: Stage,
    screen: Option<(hpec::screen::Screen, usize)>,
    later: Vec<hpec::screen::Stage<Stage>>,
    categories: Vec<u32>,
    options: spartac::program::hpec::HpecOptions,
}

impl Computed {
    /// Inference seconds: the stages' GPU medians summed (none on the CPU executor).
    fn seconds(&self) -> Option<f64> {
        let later: f64 = self.later.iter().filter_map(|s| s.result.run.as_ref()).map(|r| r.seconds).sum();
        self.first.run.as_ref().map(|r| r.seconds + later)
    }
}

/// Compiles and runs `network` on `images` on `devices` (the CPU executor when there are none)
/// in the precision `args` asks for; `progress` is called once per layer of the first stage.
fn compute_compiled(
    args: &RunArgs,
    devices: &[std::sync::Arc<spartac_runtime::cuda::CudaDevice>],
    network: &hpec::Network,
    images: &hpec::Images,
    progress: &(dyn Fn() + Sync),
) -> anyhow::Result<Computed> {
    let g = &args.gpu;
    let precision = match g.precision {
        hpec::screen::Arithmetic::F64 => Precision::F64,
        _ => Precision::F32,
    };
    let options = hpec_options(g, devices, network, images, precision)?;
    let mut started = false;
    let mut stage = |net: &hpec::Network, imgs: &hpec::Images, precision: Precision| -> anyhow::Result<_> {
        let options = hpec_options(g, devices, net, imgs, precision)?;
        // Only the first stage's layers are counted: the bar counts the network's layers once.
        let first = !std::mem::replace(&mut started, true);
        let s = run_stage(args, devices, net, imgs, &options, if first { progress } else { &|| {} })?;
        Ok((s.categories.clone(), s))
    };
    Ok(if g.precision == hpec::screen::Arithmetic::Screened {
        // The screen: the layers before the tail, rounded up; the bound: every layer for its
        // survivors, rounded down; the settle: f64 for the survivors the bound lost.
        let s = hpec::screen::run_screened(network, images, options.tail_start(network.n_layers()), &mut stage)?;
        let mut stages = s.stages.into_iter();
        let first = stages.next().expect("the screen always runs");
        let screen = Some((s.screen, first.found.len()));
        Computed { first: first.result, screen, later: stages.collect(), categories: s.categories, options }
    } else {
        let (categories, first) = stage(network, images, precision)?;
        Computed { first, screen: None, later: vec![], categories, options }
    })
}

/// `--backend cuda|sim`: compile every layer, lower to the batch program, run it.
/// GPUs 0..count, each with its own context.
fn open_gpus(count: usize) -> anyhow::Result<Vec<std::sync::Arc<spartac_runtime::cuda::CudaDevice>>> {
    open_gpus_from(0, count)
}

/// GPUs first..first + count.
fn open_gpus_from(
    first: usize,
    count: usize,
) -> anyhow::Result<Vec<std::sync::Arc<spartac_runtime::cuda::CudaDevice>>> {
    (first..first + count)
        .map(|ordinal| {
            spartac_runtime::cuda::CudaDevice::open(ordinal)
                .map(std::sync::Arc::new)
                .with_context(|| format!("cannot open GPU {ordinal} (asked for {count} with --gpus)"))
        })
        .collect()
}

/// `--backend cuda` on `devices`, or `sim` (the CPU executor) when there are none.
#[allow(clippy::too_many_arguments)]
fn run_compiled(
    args: &RunArgs,
    devices: Vec<std::sync::Arc<spartac_runtime::cuda::CudaDevice>>,
    network: &hpec::Network,
    network_name: &str,
    images: &hpec::Images,
    base_images: &hpec::Images,
    load_seconds: f64,
    truth_kind: &Truth,
) -> anyhow::Result<()> {
    use spartac_runtime::hpec::task_graph;
    let g = &args.gpu;
    let backend = if devices.is_empty() { Backend::Sim } else { Backend::Cuda };
    let screened = g.precision == hpec::screen::Arithmetic::Screened;
    let bar = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(network.n_layers() as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("compiling layers {bar:30} {pos}/{len} [{elapsed} < {eta}]")
            .expect("static template"),
    );
    // Input hashing: the program runs the images in hashed order; categories map back below.
    let order = g.hash_inputs.then(|| hpec::hashing::hashed_image_order(images.n_images(), 0));
    let hashed = order.as_ref().map(|o| images.reordered(o)).transpose()?;
    let run_images = hashed.as_ref().unwrap_or(images);
    let Computed { first, screen, later, categories, options } =
        compute_compiled(args, &devices, network, run_images, &|| bar.inc(1))?;
    if let Some((s, _)) = &screen {
        (s.layers..network.n_layers()).for_each(|_| bar.inc(1));
    }
    bar.finish_and_clear();
    let first_layers = screen.as_ref().map_or(network.n_layers(), |(s, _)| s.layers);
    let compiled = &first.compiled;
    let run = first.run.as_ref();
    let edges = images.n_images() as f64 * network.total_nonzeros() as f64;
    // The inference: the screen's and the settle's medians (the settle's program is built
    // and loaded between them, like any program before its first run).
    let settle_seconds: f64 = later.iter().filter_map(|s| s.result.run.as_ref()).map(|r| r.seconds).sum();
    let seconds = run.map(|r| r.seconds + settle_seconds);
    let categories = match &order {
        Some(order) => {
            let mut ids: Vec<u32> = categories.iter().map(|&pos| order[pos as usize - 1] + 1).collect();
            ids.sort_unstable();
            ids
        }
        None => categories,
    };
    let (truth, truth_name) = truth_categories(truth_kind, network, base_images, images.n_images(), args.no_cache)?;
    let verdict = truth.as_ref().map(|t| *t == categories);
    let low = &compiled.lowering;
    let verdict_text = verdict_word(verdict);
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for s in &low.layer_summaries {
        for part in s.split(" + ") {
            *kinds.entry(part.split(':').take(2).collect::<Vec<_>>().join(" ")).or_default() += 1;
        }
    }
    let profile = run.map(|r| task_graph::profile_by_kind(&compiled.lowering.program, &r.step_ms)).unwrap_or_default();
    // The settle's steps, apart from the screen's.
    let mut profile = profile;
    for st in &later {
        if let Stage { compiled, run: Some(r), .. } = &st.result {
            for (kind, ms) in task_graph::profile_by_kind(&compiled.lowering.program, &r.step_ms) {
                *profile.entry(format!("{}: {kind}", st.name)).or_insert(0.0) += ms;
            }
        }
    }
    if args.json {
        let r = run;
        let mut value = serde_json::json!({
            "network": network_name,
            "neurons": network.neurons,
            "layers": network.n_layers(),
            "nonzeros": network.total_nonzeros(),
            "images": images.n_images(),
            "backend": if backend == Backend::Cuda { "cuda" } else { "sim" },
            "batch": options.batch,
            "compact_every": options.compact_every,
            "compact_first": options.compact_first,
            "fine_tile": options.fine_tile.map(|t| [t.rows, t.group, t.k_rows, t.n_tiles]),
            "streamed_weights": low.streamed,
            "fold_values": options.fold_values,
            "graph": !g.no_graph,
            "engine": format!("{:?}", g.engine),
            "plan_rows": options.plan_rows,
            "fine_only": options.fine_only,
            "sm_count": options.sm_count,
            "gpus": g.gpus,
            "hash_inputs": g.hash_inputs,
            "load_seconds": load_seconds,
            "compile_seconds": compiled.compile_seconds,
            "layers_from_cache": compiled.layers_cached,
            "kernel_load_seconds": r.map(|r| r.load_seconds),
            "kernels": low.program.kernels.len(),
            "kernels_compiled": r.map(|r| r.kernels_compiled),
            "kernels_cached": r.map(|r| r.kernels_cached),
            "layer_kernels": kinds,
            "weight_bytes": low.weight_bytes,
            "device_bytes": low.program.device_bytes(),
            "seconds": seconds,
            "seconds_all": r.map(|r| r.seconds_all.clone()),
            "edges_per_second": seconds.map(|s| edges / s),
            "live_rows_last_batch": r.map(|r| r.live_rows.clone()),
            "batches_per_gpu": r.map(|r| r.batches_per_device.clone()),
            "categories": categories.len(),
            "truth": truth_name,
            "verdict": verdict_text,
            "profile_ms_by_kind": profile,
            "profile_ms_per_step": r.map(|r| r.step_ms.iter().map(|(l, ms)| serde_json::json!([l, ms])).collect::<Vec<_>>()),
        });
        // The multi-GPU split of the median inference (one macro call holds only so many keys).
        value["images_per_gpu"] = serde_json::json!(r.map(|r| r.images_per_device.clone()));
        value["busy_seconds_per_gpu"] = serde_json::json!(r.map(|r| r.busy_seconds_per_device.clone()));
        value["merge_from"] = serde_json::json!(options.merge_from);
        value["tail_from"] =
            serde_json::json!((compiled.tail_start < network.n_layers()).then_some(compiled.tail_start));
        value["few_rows"] = serde_json::json!(options.few_rows);
        value["precision"] = serde_json::json!(g.precision.name());
        if let Some((sc, survivors)) = &screen {
            let stage_json = |name: &str, images: usize, found: usize, st: &Stage| {
                serde_json::json!({
                    "name": name,
                    "images": images,
                    "found": found,
                    "seconds": st.run.as_ref().map(|r| r.seconds),
                    "seconds_all": st.run.as_ref().map(|r| r.seconds_all.clone()),
                    "compile_seconds": st.compiled.compile_seconds,
                    "kernel_load_seconds": st.run.as_ref().map(|r| r.load_seconds),
                })
            };
            let mut stages = vec![stage_json("screen", run_images.n_images(), *survivors, &first)];
            stages.extend(later.iter().map(|s| stage_json(s.name, s.images, s.found.len(), &s.result)));
            value["screen"] = serde_json::json!({
                "layers": sc.layers,
                "weight_scale": sc.weight_scale,
                "bias": sc.network.bias,
                "survivors": survivors,
                "stages": stages,
            });
        }
        value["gather_from"] = serde_json::json!(options.gather_from);
        value["scatter_from"] = serde_json::json!(options.scatter_from);
        value["reordered_layers"] = serde_json::json!(compiled.reordered_layers);
        value["permuted_boundaries"] = serde_json::json!(compiled.permuted_boundaries);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "network: {network_name}: {} neurons, {} layers, {} nonzeros; {} images (loading {:.2} s)",
            network.neurons,
            network.n_layers(),
            network.total_nonzeros(),
            images.n_images(),
            load_seconds
        );
        let kinds: Vec<String> = kinds.iter().map(|(k, v)| format!("{v} x {k}")).collect();
        println!(
            "compiled ({}): {:.2} s ({} of {} planned layers from the cache, {} with neurons reordered, {} permuting steps); layer kernels: {}; {} distinct kernels; weights {:.1} MiB {}; batch {}; {} compactions ({} merging identical rows)",
            if screened { "f32 screen" } else { g.precision.name() },
            compiled.compile_seconds,
            compiled.layers_cached,
            compiled.tail_start,
            compiled.reordered_layers,
            compiled.permuted_boundaries,
            kinds.join(", "),
            low.program.kernels.len(),
            low.weight_bytes as f64 / (1 << 20) as f64,
            if low.streamed { "streamed" } else { "resident" },
            options.batch,
            (0..first_layers).filter(|&l| options.compacts_after(l, first_layers)).count(),
            (0..first_layers).filter(|&l| options.merges_after(l, first_layers)).count()
        );
        if let Some(r) = &run {
            println!(
                "kernels loaded in {:.2} s ({} compiled, {} from the PTX cache); device memory {:.1} MiB",
                r.load_seconds,
                r.kernels_compiled,
                r.kernels_cached,
                low.program.device_bytes() as f64 / (1 << 20) as f64
            );
            println!(
                "inference (cuda x{}, {}): {:.3} ms median of {}, {:.3e} edges/s",
                r.devices,
                if g.no_graph { "stream launches" } else { "CUDA graph" },
                (r.seconds + settle_seconds) * 1e3,
                r.seconds_all.len(),
                edges / (r.seconds + settle_seconds)
            );
            if r.devices > 1 {
                for (d, ((b, n), busy)) in
                    r.batches_per_device.iter().zip(&r.images_per_device).zip(&r.busy_seconds_per_device).enumerate()
                {
                    println!(
                        "  GPU {d}: {b} batches, {n} images, busy {:.3} ms ({:.1}% of the run idle)",
                        busy * 1e3,
                        100.0 * (1.0 - busy / r.seconds).max(0.0)
                    );
                }
            }
        }
        if let Some((sc, survivors)) = &screen {
            let ms = |st: &Stage| st.run.as_ref().map(|r| format!(" ({:.3} ms)", r.seconds * 1e3)).unwrap_or_default();
            let mut line = format!(
                "screened: layers 0-{} in fp32 rounded up (weights x{:.6}, bias {}): {} of {} images survive{}",
                sc.layers.saturating_sub(1),
                sc.weight_scale,
                sc.network.bias,
                survivors,
                run_images.n_images(),
                ms(&first)
            );
            for st in &later {
                line += &match st.name {
                    "bound" => format!(
                        "; all {} layers rounded down: {} of them alive{}",
                        network.n_layers(),
                        st.found.len(),
                        ms(&st.result)
                    ),
                    _ => format!(
                        "; the other {} in f64: {} alive{}, compiled in {:.2} s",
                        st.images,
                        st.found.len(),
                        ms(&st.result),
                        st.result.compiled.compile_seconds
                    ),
                };
            }
            println!("{line}");
        }
        if !profile.is_empty() {
            let total: f64 = profile.values().sum();
            println!("profile (one run as stream launches with events, {total:.3} ms):");
            for (kind, ms) in &profile {
                println!("  {kind:<22} {ms:>9.3} ms  {:>5.1}%", 100.0 * ms / total);
            }
        }
        println!("categories: {} images; truth: {truth_name}: {verdict_text}", categories.len());
    }
    match verdict {
        Some(false) => {
            let hint = if g.precision == hpec::screen::Arithmetic::F32 && truth_name.contains("f64") {
                " (fp32 rounding cannot follow an f64 truth on every image; the default --precision screened computes as the reference does)"
            } else {
                ""
            };
            bail!("{}{hint}", mismatch(&categories, truth.as_deref().unwrap_or(&[]), &truth_name))
        }
        _ => Ok(()),
    }
}

/// The one-line message of a failed check: how many images are missing and extra, and the first
/// few of each (a handful suggests rounding at the zero threshold, thousands a wrong kernel).
/// How a run's check reads: PASS, FAIL, or UNCHECKED when there was no truth.
fn verdict_word(verdict: Option<bool>) -> &'static str {
    match verdict {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "UNCHECKED",
    }
}

fn mismatch(got: &[u32], truth: &[u32], truth_name: &str) -> String {
    let (g, t): (std::collections::BTreeSet<u32>, std::collections::BTreeSet<u32>) =
        (got.iter().copied().collect(), truth.iter().copied().collect());
    let missing: Vec<u32> = t.difference(&g).copied().collect();
    let extra: Vec<u32> = g.difference(&t).copied().collect();
    let first = |v: &[u32]| v.iter().take(5).map(|x| x.to_string()).collect::<Vec<_>>().join(" ");
    format!(
        "categories differ from the truth ({truth_name}): got {} images, expected {}; {} missing (first: {}), {} extra (first: {})",
        got.len(),
        truth.len(),
        missing.len(),
        first(&missing),
        extra.len(),
        first(&extra)
    )
}
