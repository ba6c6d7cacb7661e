//! MPI for `hpec run --mpi`: the system's (or a pinned) libmpi, opened at run time.
//!
//! Nothing links MPI at build time: [`Mpi::init`] opens the shared library
//! (`$SPARTAC_MPI_LIB`, else `libmpi.so.40` (Open MPI), `libmpi.so.12` (MPICH), `libmpi.so`)
//! and resolves the few calls the challenge needs: init, rank and size, a gather of
//! variable-length byte messages to rank 0, a broadcast from it, abort and finalize. Both
//! common ABIs work: Open MPI's handles are the addresses of its predefined objects
//! (`ompi_mpi_comm_world`, `ompi_mpi_byte`), MPICH's are integer constants, passed in the
//! same register on the 64-bit ABIs this runs on.
//!
//! Seed `001_*` deals the images to the ranks by a hash of their id ([`deal`]), so that early-
//! and late-dying images spread evenly; each rank computes its share and rank 0 gathers the
//! categories ([`Mpi::gather`]) and checks them.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// An MPI failure: the library could not be opened or a call returned an error code.
#[derive(Debug, thiserror::Error)]
#[error("MPI: {0}")]
pub struct MpiError(pub String);

type Handle = *mut c_void;
type InitFn = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
type FlagFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type IntOutFn = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type GatherFn = unsafe extern "C" fn(*const c_void, c_int, Handle, *mut c_void, c_int, Handle, c_int, Handle) -> c_int;
type GathervFn = unsafe extern "C" fn(
    *const c_void,
    c_int,
    Handle,
    *mut c_void,
    *const c_int,
    *const c_int,
    Handle,
    c_int,
    Handle,
) -> c_int;
type BcastFn = unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int;
type AbortFn = unsafe extern "C" fn(Handle, c_int) -> c_int;
type FinalizeFn = unsafe extern "C" fn() -> c_int;

/// MPICH's `MPI_COMM_WORLD` and `MPI_BYTE`.
const MPICH_COMM_WORLD: usize = 0x4400_0000;
const MPICH_BYTE: usize = 0x4c00_010d;

/// An initialized MPI world (finalized when dropped).
pub struct Mpi {
    lib: *mut c_void,
    comm: Handle,
    byte: Handle,
    gather: GatherFn,
    gatherv: GathervFn,
    bcast: BcastFn,
    abort: AbortFn,
    finalize: FinalizeFn,
    rank: usize,
    size: usize,
    /// Which library was opened.
    pub library: String,
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message owned by the C library.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl Mpi {
    /// Opens libmpi and initializes MPI (the process must have been started by `mpirun`, or
    /// runs as a world of one).
    pub fn init() -> Result<Mpi, MpiError> {
        let candidates: Vec<String> = match std::env::var("SPARTAC_MPI_LIB") {
            Ok(path) if !path.is_empty() => vec![path],
            _ => ["libmpi.so.40", "libmpi.so.12", "libmpi.so"].iter().map(|s| s.to_string()).collect(),
        };
        Mpi::init_from(&candidates)
    }

    /// [`Mpi::init`] with the first of `candidates` (library names or paths) that opens.
    pub fn init_from(candidates: &[String]) -> Result<Mpi, MpiError> {
        let mut tried = vec![];
        let mut opened = None;
        for name in candidates {
            let c = CString::new(name.as_str()).map_err(|_| MpiError(format!("bad library name {name:?}")))?;
            // RTLD_GLOBAL: Open MPI's components resolve libmpi's symbols from the global scope.
            // SAFETY: a valid C string; dlopen has no other preconditions.
            let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if lib.is_null() {
                tried.push(format!("{name}: {}", dl_error()));
            } else {
                opened = Some((lib, name.clone()));
                break;
            }
        }
        let (lib, library) = opened.ok_or_else(|| {
            MpiError(format!(
                "cannot open an MPI library ({}); install Open MPI or MPICH, or set SPARTAC_MPI_LIB to libmpi.so",
                tried.join("; ")
            ))
        })?;
        let sym = |name: &str| -> Option<*mut c_void> {
            let c = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: lib is a live handle from dlopen, c a valid C string.
            let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let func = |name: &str| sym(name).ok_or_else(|| MpiError(format!("{library} has no {name}")));
        // SAFETY (the transmutes below): each symbol is the MPI standard's C function of that
        // name, whose signature the matching type spells out (handles as pointer-sized values).
        let init: InitFn = unsafe { std::mem::transmute::<*mut c_void, InitFn>(func("MPI_Init")?) };
        let initialized: FlagFn = unsafe { std::mem::transmute::<*mut c_void, FlagFn>(func("MPI_Initialized")?) };
        let rank_fn: IntOutFn = unsafe { std::mem::transmute::<*mut c_void, IntOutFn>(func("MPI_Comm_rank")?) };
        let size_fn: IntOutFn = unsafe { std::mem::transmute::<*mut c_void, IntOutFn>(func("MPI_Comm_size")?) };
        let gather: GatherFn = unsafe { std::mem::transmute::<*mut c_void, GatherFn>(func("MPI_Gather")?) };
        let gatherv: GathervFn = unsafe { std::mem::transmute::<*mut c_void, GathervFn>(func("MPI_Gatherv")?) };
        let bcast: BcastFn = unsafe { std::mem::transmute::<*mut c_void, BcastFn>(func("MPI_Bcast")?) };
        let abort: AbortFn = unsafe { std::mem::transmute::<*mut c_void, AbortFn>(func("MPI_Abort")?) };
        let finalize: FinalizeFn = unsafe { std::mem::transmute::<*mut c_void, FinalizeFn>(func("MPI_Finalize")?) };
        // Open MPI: handles are its predefined objects' addresses; MPICH: integer constants.
        let (comm, byte) = match (sym("ompi_mpi_comm_world"), sym("ompi_mpi_byte")) {
            (Some(c), Some(b)) => (c, b),
            _ => (MPICH_COMM_WORLD as Handle, MPICH_BYTE as Handle),
        };
        let check = |what: &str, code: c_int| {
            if code == 0 {
                Ok(())
            } else {
                Err(MpiError(format!("{what} failed (error code {code})")))
            }
        };
        let mut flag: c_int = 0;
        // SAFETY: MPI_Initialized may be called at any time; flag is a valid out pointer.
        check("MPI_Initialized", unsafe { initialized(&mut flag) })?;
        if flag == 0 {
            // SAFETY: MPI_Init accepts null argc/argv.
            check("MPI_Init", unsafe { init(std::ptr::null_mut(), std::ptr::null_mut()) })?;
        }
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: MPI is initialized; comm is the world communicator's handle; valid out pointers.
        check("MPI_Comm_rank", unsafe { rank_fn(comm, &mut rank) })?;
        // SAFETY: as above.
        check("MPI_Comm_size", unsafe { size_fn(comm, &mut size) })?;
        Ok(Mpi {
            lib,
            comm,
            byte,
            gather,
            gatherv,
            bcast,
            abort,
            finalize,
            rank: rank as usize,
            size: size.max(1) as usize,
            library,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Every rank's `message` on rank 0 (in rank order; `None` on the other ranks). Collective:
    /// every rank must call it.
    pub fn gather(&self, message: &[u8]) -> Result<Option<Vec<Vec<u8>>>, MpiError> {
        let len = c_int::try_from(message.len()).map_err(|_| MpiError("a message over 2 GiB".into()))?;
        let root = self.rank == 0;
        let mut lens = vec![0 as c_int; if root { self.size } else { 1 }];
        // SAFETY: collective on the world communicator; one c_int sent (4 bytes), size c_ints
        // received on the root into a buffer of that many.
        let code = unsafe {
            (self.gather)(
                (&len as *const c_int).cast(),
                4,
                self.byte,
                lens.as_mut_ptr().cast(),
                4,
                self.byte,
                0,
                self.comm,
            )
        };
        if code != 0 {
            return Err(MpiError(format!("MPI_Gather failed (error code {code})")));
        }
        let mut displs = vec![0 as c_int; lens.len()];
        let mut total: i64 = 0;
        for (d, &l) in displs.iter_mut().zip(&lens) {
            *d = c_int::try_from(total).map_err(|_| MpiError("gathered messages over 2 GiB".into()))?;
            total += l as i64;
        }
        let mut all = vec![0u8; if root { total as usize } else { 0 }];
        // SAFETY: collective; the root's buffer holds the sum of the gathered lengths at the
        // displacements computed from them.
        let code = unsafe {
            (self.gatherv)(
                message.as_ptr().cast(),
                len,
                self.byte,
                all.as_mut_ptr().cast(),
                lens.as_ptr(),
                displs.as_ptr(),
                self.byte,
                0,
                self.comm,
            )
        };
        if code != 0 {
            return Err(MpiError(format!("MPI_Gatherv failed (error code {code})")));
        }
        Ok(root.then(|| lens.iter().zip(&displs).map(|(&l, &d)| all[d as usize..(d + l) as usize].to_vec()).collect()))
    }

    /// Rank 0's `value` on every rank. Collective.
    pub fn broadcast(&self, value: i32) -> Result<i32, MpiError> {
        let mut v: c_int = value;
        // SAFETY: collective; a 4-byte buffer on every rank.
        let code = unsafe { (self.bcast)((&mut v as *mut c_int).cast(), 4, self.byte, 0, self.comm) };
        if code != 0 {
            return Err(MpiError(format!("MPI_Bcast failed (error code {code})")));
        }
        Ok(v)
    }

    /// Ends every rank of the job with `code` (for a rank that cannot take part any more).
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: MPI is initialized; MPI_Abort does not return on success.
        unsafe { (self.abort)(self.comm, code) };
        std::process::exit(code)
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        // SAFETY: MPI was initialized by this object (or before it) and is finalized once; the
        // library stays loaded (unloading MPI is not supported by its implementations).
        unsafe { (self.finalize)() };
        let _ = self.lib;
    }
}

/// Rank `rank` of `ranks`' images: positions (0-based) of a hashed order of `n_images`
/// (seed 001's input hashing), a contiguous share of it each, sizes differing by at most one.
pub fn deal(n_images: usize, rank: usize, ranks: usize) -> Vec<u32> {
    let order = super::hashing::hashed_image_order(n_images, 0);
    let ranks = ranks.max(1);
    let (lo, hi) = (rank * n_images / ranks, (rank + 1) * n_images / ranks);
    order[lo.min(n_images)..hi.min(n_images)].to_vec()
}

/// A rank's result as one message: its categories (1-based image ids) and its inference
/// seconds, or the error that stopped it.
#[derive(Clone, Debug, PartialEq)]
pub enum RankResult {
    Done { categories: Vec<u32>, seconds: f64, images: usize },
    Failed(String),
}

impl RankResult {
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            RankResult::Done { categories, seconds, images } => {
                let mut b = vec![0u8];
                b.extend_from_slice(&seconds.to_le_bytes());
                b.extend_from_slice(&(*images as u64).to_le_bytes());
                categories.iter().for_each(|c| b.extend_from_slice(&c.to_le_bytes()));
                b
            }
            RankResult::Failed(message) => {
                let mut b = vec![1u8];
                b.extend_from_slice(message.as_bytes());
                b
            }
        }
    }

    pub fn from_bytes(b: &[u8]) -> Result<RankResult, MpiError> {
        match b.split_first() {
            Some((0, rest)) if rest.len() >= 16 && (rest.len() - 16) % 4 == 0 => {
                let seconds = f64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
                let images = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes")) as usize;
                let categories =
                    rest[16..].chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
                Ok(RankResult::Done { categories, seconds, images })
            }
            Some((1, rest)) => Ok(RankResult::Failed(String::from_utf8_lossy(rest).into_owned())),
            _ => Err(MpiError(format!("a rank's message is malformed ({} bytes)", b.len()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dealing_gives_every_image_to_exactly_one_rank() {
        for ranks in [1usize, 2, 3, 7] {
            let mut all: Vec<u32> = (0..ranks).flat_map(|r| deal(1000, r, ranks)).collect();
            let sizes: Vec<usize> = (0..ranks).map(|r| deal(1000, r, ranks).len()).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
            all.sort_unstable();
            assert_eq!(all, (0..1000).collect::<Vec<u32>>());
        }
        // Hashed, not contiguous: rank 0 of 2 holds images from both halves.
        let first = deal(1000, 0, 2);
        assert!(first.iter().any(|&i| i < 500) && first.iter().any(|&i| i >= 500));
    }

    #[test]
    fn rank_results_round_trip_and_malformed_messages_are_errors() {
        let done = RankResult::Done { categories: vec![3, 17, 60_000], seconds: 0.25, images: 20_000 };
        assert_eq!(RankResult::from_bytes(&done.to_bytes()).unwrap(), done);
        let failed = RankResult::Failed("rank 1: cannot open GPU 1".into());
        assert_eq!(RankResult::from_bytes(&failed.to_bytes()).unwrap(), failed);
        assert!(RankResult::from_bytes(&[]).is_err());
        assert!(RankResult::from_bytes(&[0, 1, 2]).is_err());
        assert!(RankResult::from_bytes(&[7]).is_err());
    }

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let e = Mpi::init_from(&["/nonexistent/libmpi.so".into()]).err().expect("no such library").to_string();
        assert!(e.contains("cannot open an MPI library") && e.contains("/nonexistent/libmpi.so"), "{e}");
    }
}
