//! Memory virtualisation inside the process, in four parts, each in its own file:
//!
//! - [`memory`]: Marmoset's allocator (VMM ranges, pinned host staging, swap streams, events)
//!   and the passive policy (`lru`): on-demand eviction, restore before use. Every policy runs on
//!   it; under a planner policy it is what runs when there is no plan (Capuchin's passive mode).
//! - [`tracker`]: the calls as they happen, in the token form `planner::iteration` uses;
//!   online iteration detection with the verify step (SINGA); the iteration boundary and the
//!   position of each call within the iteration; divergences.
//! - [`bridge`]: a verified iteration becomes the planner's model (`planner::shimtrace`) and is
//!   planned by `MARMOSET_POLICY` on a background thread (Capuchin's measured execution).
//! - [`executor`]: applies a ready plan from the next iteration boundary (guided execution).

pub mod bridge;
pub mod executor;
pub mod memory;
pub mod recompute;
pub mod tracker;
