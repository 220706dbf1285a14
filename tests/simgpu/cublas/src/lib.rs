//! `libcublas.so.13` of the simulated GPU.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
