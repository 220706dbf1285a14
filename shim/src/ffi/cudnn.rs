//! cuDNN's C structures that Marmoset's own calls and its hooks share.

use std::ffi::c_int;

/// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (one layout for the three directions).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AlgoPerf {
    pub algo: c_int,
    pub status: c_int,
    pub time: f32,
    pub memory: usize,
    pub determinism: c_int,
    pub math_type: c_int,
    pub reserved: [c_int; 3],
}
