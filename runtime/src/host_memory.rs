//! Host allocator tuning for the CPU engine.
//!
//! The reference executor allocates a fresh buffer for every op output and frees it after
//! its last use. glibc serves big blocks with `mmap` and returns them on free, so every
//! such tensor pays page faults again on first touch; on our VMs that cost is a large
//! share of element-wise ops (measured: EfficientNet-Lite0's 33 Clip nodes at batch 32
//! take 550 ms with the default, 210 ms when freed memory is kept). Keeping freed memory
//! in the heap trades resident memory (the peak stays resident) for speed.

/// Makes glibc serve every allocation from the heap and never trim it back to the OS.
/// Call once at process start, before threads allocate. A no-op off glibc.
pub fn retain_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; both values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
