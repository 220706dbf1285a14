//! cuBLAS ABI facts that its hooks and recomputation's replays share: the size of an opaque
//! algorithm, the data types scalars come in, and which of them a call reads alpha and beta as.

use std::ffi::c_int;

/// The size of cublasLtMatmulAlgo_t (eight 64-bit words).
pub const ALGO_BYTES: usize = 64;

// cudaDataType values.
pub const R_32F: c_int = 0;
pub const R_64F: c_int = 1;
pub const R_16F: c_int = 2;
pub const R_32I: c_int = 10;

/// The scalar type cuBLAS reads alpha and beta as, for a compute type and C's type.
pub fn scale_type(compute: c_int, c_type: c_int) -> c_int {
    match compute {
        64 | 65 => R_16F,
        72 | 73 => R_32I,
        70 | 71 => R_64F,
        // Legacy cudaDataType compute types.
        0 => R_32F,
        1 => R_64F,
        2 => R_16F,
        10 => R_32I,
        _ if c_type == R_64F => R_64F,
        _ => R_32F,
    }
}
