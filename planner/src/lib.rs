//! Marmoset's planner: pure Rust, no FFI, no globals, no clocks; deterministic.
//!
//! This crate owns what the shim and the `marmoset` command share. For now that is the layout of
//! the simulated GPU's libraries ([`sim`]) and size parsing; the trace model, micro-batching
//! (WR / WD) and the memory policies come with their issues.

pub mod blocks;
pub mod calibration;
pub mod generate;
pub mod inspect;
pub mod iteration;
pub mod memory;
pub mod microbatch;
pub mod model;
/// The memory policies under their earlier name.
pub use memory as policy;
pub mod pool;
pub mod settings;
pub mod shimtrace;
pub mod sim;
pub mod testdata;
pub mod timeline;
pub mod trace;

pub use simgpu_model::size::{ACCEPTED as SIZE_ACCEPTED, parse_size};
