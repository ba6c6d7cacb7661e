//! Runs a [`Program`] on one GPU as a CUDA graph.
//!
//! Loading ([`GpuProgram::load`]): every kernel is compiled by NVRTC in parallel, or read from the
//! on-disk PTX cache (keyed by the hash of its source, the arch and the spartac version; an entry
//! that fails its checksum is rebuilt); every buffer is allocated (device memory, or pinned host
//! memory for streamed constants) and the constants uploaded. Then one graph is built with the
//! driver's explicit graph API: a kernel node per kernel launch, a memcpy node per copy, a memset
//! node per fill, a child-graph node per library GEMM (the cuBLAS call captured on a stream of
//! its own, with a workspace the program owns so the capture allocates nothing), each node
//! depending on the last nodes of the steps its step waits for, and instantiated once. [`GpuProgram::launch`] sets the per-run parameters (an exec-graph update of
//! the kernel nodes that take one; nothing is re-instantiated) and launches the graph.
//! [`GpuProgram::launch_stream`] issues the same work as plain stream operations in step order,
//! the ablation the graph is measured against; [`GpuProgram::profile_steps`] does so with an
//! event after every step (where the time goes). A buffer that does not fit is a one-line error
//! naming it. [`GpuProgram::poison`] fills outputs and scratch with NaN bytes before a checked
//! run, so an element no kernel writes shows; [`GpuProgram::time_launches`] times graph
//! launches with events.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::sys;
use rayon::prelude::*;
use spartac::program::{Arg, Launch, Program, Storage};

use super::ExecError;
use crate::cuda::cublas::ProgramBlas;
use crate::cuda::tma::{encode_matrix, TensorMap};
use crate::cuda::{compile_ptx, CudaDevice, CudaError};

pub(crate) fn drv(what: &'static str, r: sys::CUresult) -> Result<(), CudaError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Driver { what, source: cudarc::driver::DriverError(r) })
    }
}

/// Where compiled PTX is kept between runs: `ptx/` under [`super::cache_root`].
pub fn ptx_cache_dir() -> Option<PathBuf> {
    super::cache_root().map(|r| r.join("ptx"))
}

/// The PTX of every kernel of `program` for `arch` (from the PTX cache where it has them,
/// compiled in parallel otherwise), in kernel order, with the counts.
fn program_ptx(program: &Program, arch: &str) -> Result<(Vec<String>, CompileStats), ExecError> {
    let dir = ptx_cache_dir();
    let ptxs: Vec<Result<(String, bool), CudaError>> =
        program.kernels.par_iter().map(|k| cached_ptx(&k.name, &k.source, arch, dir.as_ref())).collect();
    let mut compile = CompileStats { kernels: program.kernels.len(), ..Default::default() };
    let mut out = Vec::with_capacity(ptxs.len());
    for ptx in ptxs {
        let (ptx, hit) = ptx?;
        if hit {
            compile.from_cache += 1;
        } else {
            compile.compiled += 1;
        }
        out.push(ptx);
    }
    Ok((out, compile))
}

/// What kernel loading did.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    pub kernels: usize,
    pub compiled: usize,
    pub from_cache: usize,
    pub seconds: f64,
}

/// PTX of `source` for `arch`: from the disk cache when a valid entry exists, else NVRTC (and
/// the entry written atomically). Entries are `<checksum hex>\n<ptx>`.
fn cached_ptx(name: &str, source: &str, arch: &str, dir: Option<&PathBuf>) -> Result<(String, bool), CudaError> {
    let key = format!("{:016x}-{arch}-{}", spartac::codegen::source_hash(source), env!("CARGO_PKG_VERSION"));
    let path = dir.map(|d| d.join(format!("{key}.ptx")));
    if let Some(p) = &path {
        // Only a regular file is opened: a FIFO in the cache would block the read.
        if let Ok(text) = spartac::contained::read_regular_text(p) {
            if let Some((sum, ptx)) = text.split_once('\n') {
                if format!("{:016x}", spartac::program::checksum(ptx.as_bytes())) == sum {
                    return Ok((ptx.to_string(), true));
                }
            }
            // A corrupted entry: rebuilt below.
        }
    }
    let ptx = compile_ptx(name, source, arch)?.ptx;
    if let Some(p) = &path {
        let text = format!("{:016x}\n{ptx}", spartac::program::checksum(ptx.as_bytes()));
        super::write_cache_entry(p, text.as_bytes());
    }
    Ok((ptx, false))
}

/// Puts PTX compiled elsewhere (an artifact's) into the disk cache under the key
/// [`GpuProgram::load`] looks up, unless a valid entry is there; returns whether it wrote one.
pub fn seed_ptx_cache(source: &str, arch: &str, ptx: &str) -> bool {
    let Some(dir) = ptx_cache_dir() else { return false };
    let key = format!("{:016x}-{arch}-{}", spartac::codegen::source_hash(source), env!("CARGO_PKG_VERSION"));
    let path = dir.join(format!("{key}.ptx"));
    if std::fs::metadata(&path).is_ok() {
        return false;
    }
    let text = format!("{:016x}\n{ptx}", spartac::program::checksum(ptx.as_bytes()));
    super::write_cache_entry(&path, text.as_bytes());
    true
}

/// Seeds the PTX cache with an artifact's PTX for `arch` (the kernels of `program` it was
/// compiled from), so that loading the program compiles none of them again.
pub fn seed_artifact_ptx(
    program: &spartac::program::Program,
    ptx: &[spartac::program::artifact::PtxProto],
    arch: &str,
) {
    for p in ptx.iter().filter(|p| p.arch == arch) {
        if let Some(k) = program.kernels.get(p.kernel as usize) {
            seed_ptx_cache(&k.source, arch, &p.ptx);
        }
    }
}

/// CUDA events of the bound context, destroyed on drop.
struct Events(Vec<sys::CUevent>);

impl Events {
    fn new(n: usize) -> Result<Events, CudaError> {
        let mut events = Events(Vec::with_capacity(n));
        for _ in 0..n {
            let mut e: sys::CUevent = std::ptr::null_mut();
            // SAFETY: plain event creation in the bound context.
            drv("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, 0) })?;
            events.0.push(e);
        }
        Ok(events)
    }

    /// Waits for the last event and returns the milliseconds between consecutive ones (all
    /// recorded on one stream).
    fn gaps(&self) -> Result<Vec<f64>, ExecError> {
        let last = *self.0.last().expect("at least one event");
        // SAFETY: the events were recorded on this context's stream.
        drv("cuEventSynchronize", unsafe { sys::cuEventSynchronize(last) })?;
        self.0
            .windows(2)
            .map(|w| {
                let mut ms = 0f32;
                // SAFETY: both events recorded and complete.
                drv("cuEventElapsedTime", unsafe { sys::cuEventElapsedTime_v2(&mut ms, w[0], w[1]) })?;
                Ok(ms as f64)
            })
            .collect()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for &e in &self.0 {
            // SAFETY: created by `Events::new`, destroyed once.
            unsafe {
                sys::cuEventDestroy_v2(e);
            }
        }
    }
}

/// A device allocation, freed on drop.
struct DeviceBuf {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

/// Pinned host memory, freed on drop.
struct HostBuf {
    ptr: *mut std::ffi::c_void,
}

enum Mem {
    Device(DeviceBuf),
    Host(HostBuf),
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by cuMemAlloc_v2 in this context, freed once.
            unsafe {
                sys::cuMemFree_v2(self.ptr);
            }
        }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        unsafe {
            sys::cuMemFreeHost(self.ptr);
        }
    }
}

/// One kernel argument's bytes, kept alive while the node parameters point at them.
enum ArgValue {
    U64(u64),
    I32(i32),
    F32(f32),
    Map(Box<TensorMap>),
}

impl ArgValue {
    fn ptr(&mut self) -> *mut std::ffi::c_void {
        match self {
            ArgValue::U64(v) => v as *mut u64 as *mut _,
            ArgValue::I32(v) => v as *mut i32 as *mut _,
            ArgValue::F32(v) => v as *mut f32 as *mut _,
            ArgValue::Map(m) => &mut **m as *mut TensorMap as *mut _,
        }
    }
}

/// A kernel launch resolved to the device: function, geometry and the arguments (parameter
/// slots resolved at launch time).
struct KernelLaunch {
    func: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    args: Vec<Arg>,
    /// Whether an argument is a per-run parameter (the node is updated per launch).
    takes_param: bool,
}

/// A program loaded on a GPU, with its graph instantiated.
pub struct GpuProgram {
    dev: Arc<CudaDevice>,
    program: Program,
    mems: Vec<Mem>,
    /// Kernel functions, their modules kept alive.
    _modules: Vec<Arc<cudarc::driver::CudaModule>>,
    launches: Vec<Vec<Option<KernelLaunch>>>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// Kernel nodes that take a per-run parameter: (step, launch index, node).
    param_nodes: Vec<(usize, usize, sys::CUgraphNode)>,
    params: Vec<i32>,
    /// cuBLAS for the program's library GEMMs and the stream their calls are captured on
    /// (`None` when the program has none).
    blas: Option<(ProgramBlas, Arc<cudarc::driver::CudaStream>)>,
    /// The graph between copy nodes for a caller's tensors, made by the first
    /// [`GpuProgram::launch_with_io`] (and again when the buffers it copies change).
    io: Option<IoGraph>,
    pub compile: CompileStats,
}

/// The (buffer, bytes) of each output copy.
type IoKey = Vec<(spartac::program::BufferId, usize)>;

/// One copy of [`GpuProgram::launch_with_io`]: the program's buffer, the caller's address, bytes.
pub type IoCopy = (spartac::program::BufferId, u64, usize);

/// The program's graph as a child node between copy nodes: the caller's inputs into the
/// program's buffers before it, the program's outputs to the caller's tensors after it.
struct IoGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// (input copies, output copies) as (buffer, bytes): what the graph was built for.
    key: (Vec<(spartac::program::BufferId, usize)>, IoKey),
    /// Per copy node, inputs first: the node and the caller's address it copies from or to.
    nodes: Vec<(sys::CUgraphNode, u64)>,
}

impl IoGraph {
    fn destroy(&mut self) {
        // SAFETY: created by launch_with_io, destroyed once (the pointers nulled).
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
        }
        self.exec = std::ptr::null_mut();
        self.graph = std::ptr::null_mut();
    }
}

// SAFETY: the raw driver handles (context-owned graph, exec graph, functions, allocations) may be
// used from any thread that binds the device's context first; every public entry point that makes
// driver calls (launches, reads, writes, fills, drop) starts with `CudaDevice::bind`, so a
// program moved to another thread, or used after another device's program on the same thread,
// talks to its own context; a program is used by one thread at a time (`&mut self` launches).
unsafe impl Send for GpuProgram {}

impl Drop for GpuProgram {
    fn drop(&mut self) {
        // The graph and (after this) the buffers are freed in this device's context, whatever
        // thread drops the program (several GPUs are driven from one process).
        let _ = self.dev.bind();
        // SAFETY: created by this program, destroyed once, after the stream is idle.
        unsafe {
            let _ = self.dev.synchronize();
            if let Some(io) = &mut self.io {
                io.destroy();
            }
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

impl GpuProgram {
    /// Compiles, allocates, uploads and builds the graph (see the module docs). The loaded
    /// program keeps [`Program::skeleton`], not the constants' host copies: the caller's
    /// `program` may be dropped (or loaded on another device) afterwards.
    pub fn load(dev: Arc<CudaDevice>, program: &Program) -> Result<GpuProgram, ExecError> {
        program.verify().map_err(|e| ExecError::Shape(e.to_string()))?;
        dev.bind()?;
        let started = std::time::Instant::now();
        let (ptxs, compile) = program_ptx(program, dev.arch())?;
        Self::load_compiled(dev, program, &ptxs, compile, started)
    }

    /// [`GpuProgram::load`] on every device of `devs` at once, one thread each (module loads,
    /// allocations, uploads and graph builds overlap), the kernels compiled to PTX once per
    /// architecture. The first error, in device order, is returned.
    pub fn load_all(devs: &[Arc<CudaDevice>], program: &Program) -> Result<Vec<GpuProgram>, ExecError> {
        program.verify().map_err(|e| ExecError::Shape(e.to_string()))?;
        let started = std::time::Instant::now();
        let mut by_arch: HashMap<String, (Vec<String>, CompileStats)> = HashMap::new();
        for d in devs {
            if !by_arch.contains_key(d.arch()) {
                by_arch.insert(d.arch().to_string(), program_ptx(program, d.arch())?);
            }
        }
        let by_arch = &by_arch;
        std::thread::scope(|scope| {
            let handles: Vec<_> = devs
                .iter()
                .map(|d| {
                    scope.spawn(move || {
                        d.bind()?;
                        let (ptxs, compile) = &by_arch[d.arch()];
                        Self::load_compiled(d.clone(), program, ptxs, compile.clone(), started)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(ExecError::Shape("loading the program panicked".into()))))
                .collect()
        })
    }

    /// Loads the PTX of `program`'s kernels (in kernel order) on `dev`, bound by the caller,
    /// then allocates, uploads and builds the graph.
    fn load_compiled(
        dev: Arc<CudaDevice>,
        program: &Program,
        ptxs: &[String],
        mut compile: CompileStats,
        started: std::time::Instant,
    ) -> Result<GpuProgram, ExecError> {
        let mut modules = vec![];
        let mut funcs = vec![];
        for (k, ptx) in program.kernels.iter().zip(ptxs) {
            let m = dev.load_ptx(ptx.clone())?;
            let f =
                m.load_function(&k.name).map_err(|source| CudaError::Driver { what: "cuModuleGetFunction", source })?;
            if k.smem_bytes > 48 * 1024 {
                f.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    k.smem_bytes as i32,
                )
                .map_err(|source| CudaError::Driver { what: "cuFuncSetAttribute", source })?;
            }
            funcs.push(f.cu_function());
            modules.push(m);
        }
        compile.seconds = started.elapsed().as_secs_f64();

        // Memory: everything at once, with a one-line error naming what did not fit.
        let mut mems = Vec::with_capacity(program.buffers.len());
        for b in &program.buffers {
            let bytes = b.bytes().max(4);
            let mem = if b.on_device() {
                let mut ptr = 0;
                // SAFETY: plain allocation in the bound context.
                let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) };
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(ExecError::Shape(format!(
                        "out of GPU memory: buffer {} needs {:.1} MiB ({:.1} GiB for the whole program, {:?})",
                        b.name,
                        bytes as f64 / (1 << 20) as f64,
                        program.device_bytes() as f64 / (1u64 << 30) as f64,
                        r
                    )));
                }
                Mem::Device(DeviceBuf { ptr, bytes })
            } else {
                let mut ptr = std::ptr::null_mut();
                // SAFETY: pinned host allocation; freed by HostBuf.
                let r = unsafe { sys::cuMemHostAlloc(&mut ptr, bytes, 0) };
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(ExecError::Shape(format!(
                        "out of pinned host memory: buffer {} needs {:.1} MiB",
                        b.name,
                        bytes as f64 / (1 << 20) as f64
                    )));
                }
                Mem::Host(HostBuf { ptr })
            };
            match (&b.storage, &mem) {
                (Storage::Constant(d), Mem::Device(m)) => {
                    let bytes = d.to_bytes();
                    // SAFETY: m holds at least bytes.len() bytes.
                    drv("upload constant", unsafe {
                        sys::cuMemcpyHtoD_v2(m.ptr, bytes.as_ptr() as *const _, bytes.len())
                    })?;
                }
                (Storage::Host(d), Mem::Host(h)) => {
                    let bytes = d.to_bytes();
                    // SAFETY: h holds at least bytes.len() bytes.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), h.ptr as *mut u8, bytes.len()) };
                }
                (Storage::Output, Mem::Device(m)) => {
                    // SAFETY: m holds m.bytes bytes.
                    drv("zero output", unsafe { sys::cuMemsetD8_v2(m.ptr, 0, m.bytes) })?;
                }
                _ => {}
            }
            mems.push(mem);
        }

        let launches = program
            .steps
            .iter()
            .map(|s| {
                s.launches
                    .iter()
                    .map(|l| match l {
                        Launch::Kernel { kernel, grid, block, args } => Some(KernelLaunch {
                            func: funcs[kernel.0 as usize],
                            grid: *grid,
                            block: *block,
                            smem: program.kernels[kernel.0 as usize].smem_bytes,
                            takes_param: args.iter().any(|a| matches!(a, Arg::Param(_))),
                            args: args.clone(),
                        }),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let params = program.params.iter().map(|p| p.default).collect();
        let has_gemm = program.steps.iter().any(|s| s.launches.iter().any(|l| matches!(l, Launch::Gemm { .. })));
        let blas = if has_gemm { Some((ProgramBlas::new(&dev)?, dev.new_stream()?)) } else { None };
        let mut gp = GpuProgram {
            dev,
            program: program.skeleton(),
            mems,
            _modules: modules,
            launches,
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            param_nodes: vec![],
            params,
            blas,
            io: None,
            compile,
        };
        gp.build_graph()?;
        Ok(gp)
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    fn device_ptr(&self, buf: spartac::program::BufferId, at: usize) -> u64 {
        let e = self.program.buffer(buf).elem.bytes();
        match &self.mems[buf.0 as usize] {
            Mem::Device(d) => d.ptr + (at * e) as u64,
            Mem::Host(h) => h.ptr as u64 + (at * e) as u64,
        }
    }

    fn arg_values(&self, args: &[Arg]) -> Result<Vec<ArgValue>, CudaError> {
        args.iter()
            .map(|a| {
                Ok(match a {
                    Arg::Buf(b, at) => ArgValue::U64(self.device_ptr(*b, *at)),
                    Arg::I32(v) => ArgValue::I32(*v),
                    Arg::F32(v) => ArgValue::F32(*v),
                    Arg::Param(p) => ArgValue::I32(self.params[p.0 as usize]),
                    Arg::TensorMap { buf, rows, cols, tma } => {
                        // The map's element type is the buffer's (a 16-bit model's activations).
                        let dtype = match self.program.buffer(*buf).elem {
                            spartac::program::Elem::F16 => spartac::codegen::Dtype::F16,
                            spartac::program::Elem::BF16 => spartac::codegen::Dtype::Bf16,
                            spartac::program::Elem::U8 => spartac::codegen::Dtype::I8,
                            _ => spartac::codegen::Dtype::F32,
                        };
                        ArgValue::Map(Box::new(encode_matrix(self.device_ptr(*buf, 0), *rows, *cols, dtype, *tma)?))
                    }
                })
            })
            .collect()
    }

    fn node_params(&self, k: &KernelLaunch, ptrs: &mut [*mut std::ffi::c_void]) -> sys::CUDA_KERNEL_NODE_PARAMS {
        sys::CUDA_KERNEL_NODE_PARAMS {
            func: k.func,
            gridDimX: k.grid.0,
            gridDimY: k.grid.1,
            gridDimZ: k.grid.2,
            blockDimX: k.block.0,
            blockDimY: k.block.1,
            blockDimZ: k.block.2,
            sharedMemBytes: k.smem,
            kernelParams: ptrs.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        }
    }

    fn copy_params(&self, src: u64, src_host: bool, dst: u64, dst_host: bool, bytes: usize) -> sys::CUDA_MEMCPY3D {
        use sys::CUmemorytype as T;
        // A one-row, one-slice copy: every field named (the memory-type enums have no zero value).
        sys::CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: if src_host { T::CU_MEMORYTYPE_HOST } else { T::CU_MEMORYTYPE_DEVICE },
            srcHost: if src_host { src as *const _ } else { std::ptr::null() },
            srcDevice: if src_host { 0 } else { src },
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: 0,
            srcHeight: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: if dst_host { T::CU_MEMORYTYPE_HOST } else { T::CU_MEMORYTYPE_DEVICE },
            dstHost: if dst_host { dst as *mut _ } else { std::ptr::null_mut() },
            dstDevice: if dst_host { 0 } else { dst },
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: 0,
            dstHeight: 0,
            WidthInBytes: bytes,
            Height: 1,
            Depth: 1,
        }
    }

    fn build_graph(&mut self) -> Result<(), ExecError> {
        let ctx = self.dev.cu_ctx();
        // SAFETY: graph calls on handles this function creates; parameter arrays live across
        // each call (the driver copies them).
        unsafe {
            drv("cuGraphCreate", sys::cuGraphCreate(&mut self.graph, 0))?;
            // The last node of each step (its launches are chained in order).
            let mut last: Vec<Option<sys::CUgraphNode>> = vec![None; self.program.steps.len()];
            // Library calls share one workspace: each is ordered after the one before it.
            let mut last_gemm: Option<sys::CUgraphNode> = None;
            for (i, step) in self.program.steps.iter().enumerate() {
                let mut deps: Vec<sys::CUgraphNode> = step.after.iter().filter_map(|&j| last[j]).collect();
                for (li, l) in step.launches.iter().enumerate() {
                    let mut node: sys::CUgraphNode = std::ptr::null_mut();
                    match l {
                        Launch::Kernel { .. } => {
                            let k = self.launches[i][li].as_ref().expect("kernel launch resolved");
                            let mut values = self.arg_values(&k.args)?;
                            let mut ptrs: Vec<_> = values.iter_mut().map(|v| v.ptr()).collect();
                            let p = self.node_params(k, &mut ptrs);
                            drv(
                                "cuGraphAddKernelNode",
                                sys::cuGraphAddKernelNode_v2(&mut node, self.graph, deps.as_ptr(), deps.len(), &p),
                            )?;
                            if k.takes_param {
                                self.param_nodes.push((i, li, node));
                            }
                        }
                        Launch::Copy { src, src_at, dst, dst_at, len } => {
                            let bytes = len * self.program.buffer(*src).elem.bytes();
                            let p = self.copy_params(
                                self.device_ptr(*src, *src_at),
                                !self.program.buffer(*src).on_device(),
                                self.device_ptr(*dst, *dst_at),
                                !self.program.buffer(*dst).on_device(),
                                bytes,
                            );
                            drv(
                                "cuGraphAddMemcpyNode",
                                sys::cuGraphAddMemcpyNode(&mut node, self.graph, deps.as_ptr(), deps.len(), &p, ctx),
                            )?;
                        }
                        Launch::Gemm { .. } => {
                            let child = self.capture_gemm(l)?;
                            let mut deps = deps.clone();
                            if let Some(g) = last_gemm.filter(|g| !deps.contains(g)) {
                                deps.push(g);
                            }
                            let r =
                                sys::cuGraphAddChildGraphNode(&mut node, self.graph, deps.as_ptr(), deps.len(), child);
                            // The node holds a copy of the captured graph.
                            sys::cuGraphDestroy(child);
                            drv("cuGraphAddChildGraphNode", r)?;
                            last_gemm = Some(node);
                        }
                        Launch::Zero { dst, at, len } => {
                            let p = sys::CUDA_MEMSET_NODE_PARAMS {
                                dst: self.device_ptr(*dst, *at),
                                pitch: 0,
                                value: 0,
                                elementSize: 1,
                                width: len * self.program.buffer(*dst).elem.bytes(),
                                height: 1,
                            };
                            drv(
                                "cuGraphAddMemsetNode",
                                sys::cuGraphAddMemsetNode(&mut node, self.graph, deps.as_ptr(), deps.len(), &p, ctx),
                            )?;
                        }
                    }
                    deps = vec![node];
                    last[i] = Some(node);
                }
                if step.launches.is_empty() {
                    // A step with no GPU work orders through its predecessors: an empty node.
                    let mut node: sys::CUgraphNode = std::ptr::null_mut();
                    drv(
                        "cuGraphAddEmptyNode",
                        sys::cuGraphAddEmptyNode(&mut node, self.graph, deps.as_ptr(), deps.len()),
                    )?;
                    last[i] = Some(node);
                }
            }
            drv("cuGraphInstantiate", sys::cuGraphInstantiateWithFlags(&mut self.exec, self.graph, 0))?;
        }
        Ok(())
    }

    /// Issues library GEMM `l` on `stream`.
    fn issue_gemm(&self, l: &Launch, stream: sys::CUstream) -> Result<(), CudaError> {
        let Launch::Gemm { a, w, c, m, k, n, accumulate, bias, relu, residual } = l else {
            return Err(CudaError::Kernel("gemm".into(), "not a library GEMM launch".into()));
        };
        let Some((blas, _)) = &self.blas else {
            return Err(CudaError::Kernel("gemm".into(), "the program was loaded without cuBLAS".into()));
        };
        let dtype = match self.program.buffer(*c).elem {
            spartac::program::Elem::F16 => spartac::codegen::Dtype::F16,
            spartac::program::Elem::BF16 => spartac::codegen::Dtype::Bf16,
            _ => spartac::codegen::Dtype::F32,
        };
        let (pa, pw, pc) = (self.device_ptr(*a, 0), self.device_ptr(*w, 0), self.device_ptr(*c, 0));
        if bias.is_some() || *relu || residual.is_some() {
            let pb = bias.map_or(0, |b| self.device_ptr(b, 0));
            // C is the residual (or the output itself when the call adds into it).
            let (c_in, add) = match residual {
                Some(r) => (self.device_ptr(*r, 0), true),
                None => (pc, *accumulate),
            };
            return blas.gemm_lt_on(stream, dtype, (*m, *k, *n), (pa, pw, c_in, pc, pb), *relu, add);
        }
        blas.gemm_on(stream, dtype, (*m, *k, *n), pa, pw, pc, *accumulate)
    }

    /// Library GEMM `l` as a graph of its own, captured on the program's capture stream.
    fn capture_gemm(&self, l: &Launch) -> Result<sys::CUgraph, CudaError> {
        let Some((_, cap)) = &self.blas else {
            return Err(CudaError::Kernel("gemm".into(), "the program was loaded without cuBLAS".into()));
        };
        let stream = cap.cu_stream();
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: a stream of this context; the capture is ended on every path before returning.
        unsafe {
            drv(
                "cuStreamBeginCapture",
                sys::cuStreamBeginCapture_v2(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            )?;
            let issued = self.issue_gemm(l, stream);
            let ended = drv("cuStreamEndCapture", sys::cuStreamEndCapture(stream, &mut graph));
            if let Err(e) = issued.and(ended) {
                if !graph.is_null() {
                    sys::cuGraphDestroy(graph);
                }
                return Err(e);
            }
        }
        Ok(graph)
    }

    /// Sets the per-run parameters and launches the graph (asynchronously). Only the kernel
    /// nodes that take a parameter are updated, and only when it changed.
    pub fn launch(&mut self, params: &[i32]) -> Result<(), ExecError> {
        self.dev.bind()?;
        self.set_params(params)?;
        // SAFETY: the exec graph belongs to this context; the stream is the device's.
        drv("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec, self.dev.stream().cu_stream()) })?;
        Ok(())
    }

    /// [`GpuProgram::launch`] on `stream`, a stream of this device's context that the caller
    /// owns (a torch stream, say): the graph runs after the work already queued there.
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live stream of this device's
    /// context.
    pub unsafe fn launch_on(&mut self, params: &[i32], stream: sys::CUstream) -> Result<(), ExecError> {
        self.dev.bind()?;
        self.set_params(params)?;
        // SAFETY: the exec graph belongs to this context; the caller vouches for the stream.
        drv("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec, stream) })?;
        Ok(())
    }

    /// One run on `stream` that first copies each `(buffer, caller's address, bytes)` of
    /// `inputs` into the program's buffer and afterwards each of `outputs` from the program's
    /// buffer to the caller's address: one graph launch (the program's graph as a child node
    /// between memcpy nodes). The copy nodes are updated in place when only the caller's
    /// addresses change from the last run. Programs with per-run parameters are refused.
    ///
    /// # Safety
    /// `stream` as for [`GpuProgram::launch_on`]; each caller's address must hold its bytes
    /// in device memory of this context until the stream has run the launch.
    pub unsafe fn launch_with_io(
        &mut self,
        inputs: &[IoCopy],
        outputs: &[IoCopy],
        stream: sys::CUstream,
    ) -> Result<(), ExecError> {
        if !self.param_nodes.is_empty() {
            return Err(ExecError::Shape("a program with per-run parameters cannot run with copy nodes".into()));
        }
        self.dev.bind()?;
        let key = (
            inputs.iter().map(|&(b, _, n)| (b, n)).collect::<Vec<_>>(),
            outputs.iter().map(|&(b, _, n)| (b, n)).collect::<Vec<_>>(),
        );
        let ctx = self.dev.cu_ctx();
        let addr = |b: spartac::program::BufferId| -> Result<u64, ExecError> {
            match &self.mems[b.0 as usize] {
                Mem::Device(d) => Ok(d.ptr),
                Mem::Host(_) => Err(ExecError::Shape(format!(
                    "buffer {} is kept in host memory: it cannot be copied on the device",
                    self.program.buffer(b).name
                ))),
            }
        };
        if let Some(&(b, _, n)) = inputs.iter().chain(outputs).find(|&&(b, _, n)| n > self.program.buffer(b).bytes()) {
            let buf = self.program.buffer(b);
            return Err(ExecError::Shape(format!("buffer {}: {n} bytes to copy for its {}", buf.name, buf.bytes())));
        }
        let mut wanted = vec![];
        for &(b, at, n) in inputs {
            wanted.push(self.copy_params(at, false, addr(b)?, false, n));
        }
        for &(b, at, n) in outputs {
            wanted.push(self.copy_params(addr(b)?, false, at, false, n));
        }
        let callers: Vec<u64> = inputs.iter().chain(outputs).map(|&(_, at, _)| at).collect();
        if self.io.as_ref().is_some_and(|io| io.key != key) {
            if let Some(mut io) = self.io.take() {
                self.dev.synchronize()?;
                io.destroy();
            }
        }
        if self.io.is_none() {
            let mut io = IoGraph { graph: std::ptr::null_mut(), exec: std::ptr::null_mut(), key, nodes: vec![] };
            // SAFETY: graph calls on handles made here; the parameter structs live across the
            // calls (the driver copies them); the program's graph is cloned into the child.
            let built = unsafe {
                (|| -> Result<(), CudaError> {
                    drv("cuGraphCreate", sys::cuGraphCreate(&mut io.graph, 0))?;
                    let mut before = vec![];
                    for (p, &at) in wanted.iter().zip(&callers).take(inputs.len()) {
                        let mut node: sys::CUgraphNode = std::ptr::null_mut();
                        drv(
                            "cuGraphAddMemcpyNode",
                            sys::cuGraphAddMemcpyNode(&mut node, io.graph, std::ptr::null(), 0, p, ctx),
                        )?;
                        before.push(node);
                        io.nodes.push((node, at));
                    }
                    let mut child: sys::CUgraphNode = std::ptr::null_mut();
                    drv(
                        "cuGraphAddChildGraphNode",
                        sys::cuGraphAddChildGraphNode(&mut child, io.graph, before.as_ptr(), before.len(), self.graph),
                    )?;
                    for (p, &at) in wanted.iter().zip(&callers).skip(inputs.len()) {
                        let mut node: sys::CUgraphNode = std::ptr::null_mut();
                        drv("cuGraphAddMemcpyNode", sys::cuGraphAddMemcpyNode(&mut node, io.graph, &child, 1, p, ctx))?;
                        io.nodes.push((node, at));
                    }
                    drv("cuGraphInstantiate", sys::cuGraphInstantiateWithFlags(&mut io.exec, io.graph, 0))
                })()
            };
            if let Err(e) = built {
                io.destroy();
                return Err(e.into());
            }
            self.io = Some(io);
        } else if let Some(io) = &mut self.io {
            for ((node, last), (p, &at)) in io.nodes.iter_mut().zip(wanted.iter().zip(&callers)) {
                if *last != at {
                    // SAFETY: node is a memcpy node of the graph io.exec was made from.
                    drv("cuGraphExecMemcpyNodeSetParams", unsafe {
                        sys::cuGraphExecMemcpyNodeSetParams(io.exec, *node, p, ctx)
                    })?;
                    *last = at;
                }
            }
        }
        let exec = self.io.as_ref().map(|io| io.exec).expect("made above");
        // SAFETY: an exec graph of this context; the caller vouches for the stream.
        drv("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, stream) })?;
        Ok(())
    }

    /// The device address of buffer `buf` and its size in bytes (`None` for a buffer the
    /// program keeps in pinned host memory).
    pub fn device_address(&self, buf: spartac::program::BufferId) -> Option<(u64, usize)> {
        match &self.mems[buf.0 as usize] {
            Mem::Device(d) => Some((d.ptr, self.program.buffer(buf).bytes())),
            Mem::Host(_) => None,
        }
    }

    fn set_params(&mut self, params: &[i32]) -> Result<(), ExecError> {
        if params.len() != self.params.len() {
            return Err(ExecError::Shape(format!(
                "{} parameters given, the program takes {}",
                params.len(),
                self.params.len()
            )));
        }
        if params == self.params.as_slice() {
            return Ok(());
        }
        self.params = params.to_vec();
        for &(i, li, node) in &self.param_nodes {
            let k = self.launches[i][li].as_ref().expect("kernel launch resolved");
            let mut values = self.arg_values(&k.args)?;
            let mut ptrs: Vec<_> = values.iter_mut().map(|v| v.ptr()).collect();
            let p = self.node_params(k, &mut ptrs);
            // SAFETY: node belongs to the graph this exec was instantiated from.
            drv("cuGraphExecKernelNodeSetParams", unsafe {
                sys::cuGraphExecKernelNodeSetParams_v2(self.exec, node, &p)
            })?;
        }
        Ok(())
    }

    /// The same work as plain stream operations in step order (no graph).
    pub fn launch_stream(&mut self, params: &[i32]) -> Result<(), ExecError> {
        self.stream_steps(params, None)
    }

    /// Runs the work as stream operations with a CUDA event after every step and returns each
    /// step's milliseconds (event to event: its launches and the gaps between them). Slower than
    /// the graph by the launch overhead; it says where the time goes, not how fast a run is.
    pub fn profile_steps(&mut self, params: &[i32]) -> Result<Vec<f64>, ExecError> {
        self.dev.bind()?;
        let events = Events::new(self.program.steps.len() + 1)?;
        self.stream_steps(params, Some(&events.0))?;
        events.gaps()
    }

    fn stream_steps(&mut self, params: &[i32], events: Option<&[sys::CUevent]>) -> Result<(), ExecError> {
        self.dev.bind()?;
        if params.len() != self.params.len() {
            return Err(ExecError::Shape(format!(
                "{} parameters given, the program takes {}",
                params.len(),
                self.params.len()
            )));
        }
        self.params = params.to_vec();
        let stream = self.dev.stream().cu_stream();
        let record = |at: usize| -> Result<(), CudaError> {
            match events {
                // SAFETY: an event of this context recorded on its stream.
                Some(ev) => drv("cuEventRecord", unsafe { sys::cuEventRecord(ev[at], stream) }),
                None => Ok(()),
            }
        };
        record(0)?;
        for (i, step) in self.program.steps.iter().enumerate() {
            for (li, l) in step.launches.iter().enumerate() {
                // SAFETY: launches on this context's stream with arguments that match the kernel's
                // signature (the compiler emitted both) and buffers of the sizes the program verified.
                unsafe {
                    match l {
                        Launch::Kernel { .. } => {
                            let k = self.launches[i][li].as_ref().expect("kernel launch resolved");
                            let mut values = self.arg_values(&k.args)?;
                            let mut ptrs: Vec<_> = values.iter_mut().map(|v| v.ptr()).collect();
                            drv(
                                "cuLaunchKernel",
                                sys::cuLaunchKernel(
                                    k.func,
                                    k.grid.0,
                                    k.grid.1,
                                    k.grid.2,
                                    k.block.0,
                                    k.block.1,
                                    k.block.2,
                                    k.smem,
                                    stream,
                                    ptrs.as_mut_ptr(),
                                    std::ptr::null_mut(),
                                ),
                            )?;
                        }
                        Launch::Copy { src, src_at, dst, dst_at, len } => {
                            let bytes = len * self.program.buffer(*src).elem.bytes();
                            let p = self.copy_params(
                                self.device_ptr(*src, *src_at),
                                !self.program.buffer(*src).on_device(),
                                self.device_ptr(*dst, *dst_at),
                                !self.program.buffer(*dst).on_device(),
                                bytes,
                            );
                            drv("cuMemcpy3DAsync", sys::cuMemcpy3DAsync_v2(&p, stream))?;
                        }
                        Launch::Gemm { .. } => self.issue_gemm(l, stream)?,
                        Launch::Zero { dst, at, len } => {
                            let bytes = len * self.program.buffer(*dst).elem.bytes();
                            drv("cuMemsetD8Async", sys::cuMemsetD8Async(self.device_ptr(*dst, *at), 0, bytes, stream))?;
                        }
                    }
                }
            }
            record(i + 1)?;
        }
        Ok(())
    }

    pub fn synchronize(&self) -> Result<(), ExecError> {
        self.dev.synchronize().map_err(|e| ExecError::Shape(format!("a kernel of the program failed: {e}")))
    }

    /// Reads a device buffer back (after [`GpuProgram::synchronize`]).
    pub fn read(&self, buf: spartac::program::BufferId) -> Result<Vec<u8>, ExecError> {
        self.dev.bind()?;
        let b = self.program.buffer(buf);
        let mut out = vec![0u8; b.bytes()];
        match &self.mems[buf.0 as usize] {
            // SAFETY: out holds b.bytes() bytes, the allocation at least as many.
            Mem::Device(d) => drv("memcpy device to host", unsafe {
                sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut _, d.ptr, out.len())
            })?,
            // SAFETY: as above, pinned host memory.
            Mem::Host(h) => unsafe { std::ptr::copy_nonoverlapping(h.ptr as *const u8, out.as_mut_ptr(), out.len()) },
        }
        Ok(out)
    }

    /// Zeroes a device buffer (an output accumulated over runs, say).
    pub fn zero(&self, buf: spartac::program::BufferId) -> Result<(), ExecError> {
        self.fill(buf, 0)
    }

    /// Sets every byte of a device buffer to `byte`.
    pub fn fill(&self, buf: spartac::program::BufferId, byte: u8) -> Result<(), ExecError> {
        self.dev.bind()?;
        if let Mem::Device(d) = &self.mems[buf.0 as usize] {
            // SAFETY: the allocation holds d.bytes bytes.
            drv("memset", unsafe { sys::cuMemsetD8_v2(d.ptr, byte, d.bytes) })?;
        }
        Ok(())
    }

    /// Fills every output and scratch buffer with 0xFF bytes (NaN as floats), so that an
    /// element no kernel writes shows in the results instead of passing as a stale value.
    pub fn poison(&self) -> Result<(), ExecError> {
        for (i, b) in self.program.buffers.iter().enumerate() {
            if matches!(b.storage, Storage::Output | Storage::Scratch) {
                self.fill(spartac::program::BufferId(i as u32), 0xFF)?;
            }
        }
        Ok(())
    }

    /// Launches the graph `runs` times back to back, with a CUDA event between launches, and
    /// returns each launch's milliseconds (device time, launch gaps included).
    pub fn time_launches(&mut self, params: &[i32], runs: usize) -> Result<Vec<f64>, ExecError> {
        self.dev.bind()?;
        self.set_params(params)?;
        let stream = self.dev.stream().cu_stream();
        let events = Events::new(runs + 1)?;
        // SAFETY: events and exec graph of this context, on its stream.
        unsafe {
            drv("cuEventRecord", sys::cuEventRecord(events.0[0], stream))?;
            for r in 0..runs {
                drv("cuGraphLaunch", sys::cuGraphLaunch(self.exec, stream))?;
                drv("cuEventRecord", sys::cuEventRecord(events.0[r + 1], stream))?;
            }
        }
        events.gaps()
    }

    /// Fills a device buffer from the host (an input).
    pub fn write(&self, buf: spartac::program::BufferId, bytes: &[u8]) -> Result<(), ExecError> {
        self.dev.bind()?;
        let b = self.program.buffer(buf);
        if bytes.len() != b.bytes() {
            return Err(ExecError::Shape(format!("buffer {}: {} bytes given for {}", b.name, bytes.len(), b.bytes())));
        }
        if let Mem::Device(d) = &self.mems[buf.0 as usize] {
            // SAFETY: sizes checked above.
            drv("memcpy host to device", unsafe {
                sys::cuMemcpyHtoD_v2(d.ptr, bytes.as_ptr() as *const _, bytes.len())
            })?;
        }
        Ok(())
    }

    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }
}

/// Kernel-count statistics by name prefix (for reports).
pub fn kernel_histogram(program: &Program) -> HashMap<String, usize> {
    let mut h = HashMap::new();
    for k in &program.kernels {
        let family = k.name.split('_').take(2).collect::<Vec<_>>().join("_");
        *h.entry(family).or_insert(0) += 1;
    }
    h
}
