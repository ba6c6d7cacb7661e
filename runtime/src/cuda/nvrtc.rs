//! NVRTC: CUDA C++ to PTX at run time, with the compiler log in the error. [`preload_nvrtc`]
//! loads the pinned NVRTC wheels from `.cuda/` by path, so the tests need no `LD_LIBRARY_PATH`.

use super::CudaError;

/// PTX text of one compiled kernel source.
#[derive(Clone, Debug)]
pub struct Ptx {
    pub ptx: String,
    pub arch: String,
}

fn nvrtc_present() -> Result<(), CudaError> {
    // SAFETY: only tries to open the shared library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoNvrtc("no libnvrtc.so on the library path".into()))
    }
}

/// NVRTC's version as (major, minor), or why it cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    nvrtc_present()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the out-pointers are valid.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::NoNvrtc(format!("nvrtcVersion returned {r:?}")));
    }
    Ok((major, minor))
}

/// Compiles `source` to PTX for `arch` (`sm_90a`, `sm_80`, ...). Works without a GPU.
pub fn compile_ptx(name: &str, source: &str, arch: &str) -> Result<Ptx, CudaError> {
    nvrtc_present()?;
    let virtual_arch = arch.replace("sm_", "compute_");
    let options = vec![
        format!("--gpu-architecture={virtual_arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
        "-lineinfo".to_string(),
    ];
    let fail = |log: String| CudaError::Compile { name: name.to_string(), arch: arch.to_string(), log };
    // The line info names the program's file; a relative name is taken from the working
    // directory, so the PTX (and an artifact holding it) would differ with where `compile` ran.
    let file = format!("/spartac/{name}");
    let prog = cudarc::nvrtc::result::create_program(
        &std::ffi::CString::new(source).map_err(|_| fail("source contains a NUL byte".into()))?,
        Some(&std::ffi::CString::new(file).map_err(|_| fail("name contains a NUL byte".into()))?),
    )
    .map_err(|e| fail(format!("nvrtcCreateProgram: {e:?}")))?;
    // SAFETY: `prog` is a live program until destroyed below.
    let compiled = unsafe { cudarc::nvrtc::result::compile_program(prog, &options) };
    let result = match compiled {
        Err(e) => {
            let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
                .map(|l| String::from_utf8_lossy(&l.iter().map(|c| *c as u8).collect::<Vec<u8>>()).into_owned())
                .unwrap_or_default();
            Err(fail(format!("{e:?}: {}", log.trim_end_matches('\0').trim())))
        }
        Ok(()) => unsafe { cudarc::nvrtc::result::get_ptx(prog) }
            .map(|p| Ptx {
                ptx: String::from_utf8_lossy(&p.iter().map(|c| *c as u8).collect::<Vec<u8>>())
                    .trim_end_matches('\0')
                    .to_string(),
                arch: arch.to_string(),
            })
            .map_err(|e| fail(format!("nvrtcGetPTX: {e:?}"))),
    };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { cudarc::nvrtc::result::destroy_program(prog) };
    result
}

/// Loads `libnvrtc.so.13` (and its builtins) from `dir` by absolute path, so that cudarc's
/// later load by name finds the library already in the process; this is how the tests use
/// the pinned PyPI wheels under `.cuda/` without `LD_LIBRARY_PATH`.
pub fn preload_nvrtc(dir: &std::path::Path) -> Result<(), CudaError> {
    let mut names: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| CudaError::NoNvrtc(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("libnvrtc") && f.contains(".so") && !f.contains(".alt."))
        })
        .collect();
    // Builtins first: libnvrtc opens them by name when it compiles.
    names.sort_by_key(|p| !p.to_string_lossy().contains("builtins"));
    if !names.iter().any(|p| !p.to_string_lossy().contains("builtins")) {
        return Err(CudaError::NoNvrtc(format!("no libnvrtc.so* in {}", dir.display())));
    }
    for p in names {
        let c = std::ffi::CString::new(p.to_string_lossy().as_bytes())
            .map_err(|_| CudaError::NoNvrtc(format!("odd path {}", p.display())))?;
        // SAFETY: dlopen of a shared library by path; the handle is kept for the process's life.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(CudaError::NoNvrtc(format!("cannot load {}", p.display())));
        }
    }
    Ok(())
}
