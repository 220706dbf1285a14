//! The GEMM engine the simulated `libcublas.so.13` and `libcublasLt.so.13` share: the C ABI's
//! integers ([`types`]), the simulated driver's calls ([`driver`]), matrices in device memory
//! ([`matrix`]), one checked GEMM with real arithmetic in data mode and its time on a stream
//! ([`gemm`]), and cuBLASLt's epilogues ([`epilogue`]).
//!
//! Bytes move through the simulated driver (`simgpu_read` / `simgpu_write`), so a GEMM that
//! touches an unmapped range traps there, as a kernel would; time goes on the stream through
//! `simgpu_submit_kernel`, from the tile-and-wave model in `simgpu_model::gemm`.

// The pointers it takes are the C API's arguments, passed on by the libraries' entry points.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod driver;
pub mod epilogue;
pub mod gemm;
pub mod matrix;
pub mod types;

#[cfg(test)]
mod abi_crosscheck;
