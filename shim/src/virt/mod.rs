//! Memory virtualisation inside the process. From the top down (each part imports only the
//! ones below it):
//!
//! - [`tracker`]: the bus's observer under a planner policy; acts on what the sequence finds.
//! - [`bridge`]: a verified iteration becomes the planner's model (`planner::shimtrace`) and is
//!   planned by `MARMOSET_POLICY` on a background thread (Capuchin's measured execution).
//! - [`kinds`]: the plans kept per iteration kind, used again when a kind comes back.
//! - [`online`]: DTR's heuristic for what no plan guides: victims by cost / (size x staleness),
//!   dropped where they can be replayed and rebuilt before their next use; attached to the
//!   allocator below it at start-up (`memory::attach_online`).
//! - [`executor`]: applies a ready plan from the next iteration boundary (guided execution).
//! - [`recompute`]: replays a recorded call to rebuild a dropped tensor.
//! - [`sequence`]: the calls as they happen, in the token form `planner::iteration` uses;
//!   online iteration detection with the verify step (SINGA); the iteration boundary and the
//!   position of each call within the iteration; divergences; tensor names resolved.
//! - [`memory`]: Marmoset's allocator (VMM ranges, pinned host staging, swap streams, events)
//!   and the passive policy (`lru`): on-demand eviction, restore before use. Every policy runs on
//!   it; under a planner policy it is what runs when there is no plan (Capuchin's passive mode).

pub mod bridge;
pub mod executor;
pub mod kinds;
pub mod memory;
pub mod online;
pub mod recompute;
pub mod sequence;
pub mod tracker;
