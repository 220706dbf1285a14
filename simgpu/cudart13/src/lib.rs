//! `libcudart.so.13` of the simulated GPU: the runtime in `simgpu-cudart`, reporting CUDA 13.
pub use simgpu_cudart;

/// The runtime major version this library reports (read by `cudaRuntimeGetVersion`).
#[unsafe(no_mangle)]
pub static SIMGPU_CUDART_MAJOR: i32 = 13;

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
