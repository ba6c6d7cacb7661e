//! Tensor maps for kernels that load their dense operand by the Tensor Memory Accelerator
//! ([`spartac::codegen::TmaBox`]): encoded on the host with `cuTensorMapEncodeTiled` for the
//! buffer a launch reads, passed by value as the kernel's last parameter.

use super::{CudaError, DriverContext};
use cudarc::driver::{sys, DeviceRepr};
use spartac::codegen::{Dtype, TmaBox};

/// An encoded tensor map (128 opaque bytes, aligned as the driver wants them).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct TensorMap(sys::CUtensorMap);

// SAFETY: plain bytes; the kernel declares the parameter as a 128-byte `__grid_constant__`
// struct, which the launch copies from this value.
unsafe impl DeviceRepr for TensorMap {}

/// The tensor map of a row-major `rows × cols` matrix of `dtype` at device address `addr`, in
/// boxes of `b.rows × b.cols` elements with the `b.swizzle_bytes` swizzle; rows and columns past
/// the matrix read as zeros.
pub fn encode_matrix(addr: u64, rows: usize, cols: usize, dtype: Dtype, b: TmaBox) -> Result<TensorMap, CudaError> {
    use sys::CUtensorMapDataType_enum as T;
    use sys::CUtensorMapSwizzle_enum as S;
    let data_type = match dtype {
        Dtype::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        Dtype::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        Dtype::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        Dtype::I8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
    };
    let swizzle = match b.swizzle_bytes {
        32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        s => return Err(CudaError::Kernel("tensor map".into(), format!("no TMA swizzle of {s} bytes"))),
    };
    let row_bytes = cols * dtype.bytes();
    if !addr.is_multiple_of(16) || !row_bytes.is_multiple_of(16) {
        return Err(CudaError::Kernel(
            "tensor map".into(),
            format!("TMA needs 16-byte aligned rows; the matrix has {row_bytes}-byte rows at {addr:#x}"),
        ));
    }
    let dims = [cols as u64, rows as u64];
    let strides = [row_bytes as u64];
    let boxes = [b.cols, b.rows];
    let element_strides = [1u32, 1];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every pointer is to a live local of the rank (2) the call reads; the driver
    // writes only `map`.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .ctx("cuTensorMapEncodeTiled")?;
    }
    Ok(TensorMap(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misaligned_matrices_and_unknown_swizzles_are_refused_before_the_driver() {
        let b = TmaBox { rows: 128, cols: 32, swizzle_bytes: 64 };
        let e = encode_matrix(0x1008, 64, 64, Dtype::F16, b).unwrap_err().to_string();
        assert!(e.contains("16-byte aligned rows") && e.contains("0x1008"), "{e}");
        let e = encode_matrix(0x1000, 64, 36, Dtype::F16, b).unwrap_err().to_string();
        assert!(e.contains("72-byte rows"), "{e}");
        let e = encode_matrix(0x1000, 64, 64, Dtype::F16, TmaBox { swizzle_bytes: 48, ..b }).unwrap_err().to_string();
        assert!(e.contains("no TMA swizzle of 48 bytes"), "{e}");
    }
}
