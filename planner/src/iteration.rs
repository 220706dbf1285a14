//! Iterations found in the shim's call stream, and tensor identity across them.
//!
//! SINGA (seed 000 §V) records its malloc/free/read/write list and takes two consecutive
//! repeating subsequences as one training iteration; its public code verifies the repetition
//! before trusting it (anchors.md). We do the same on Marmoset's calls:
//!
//! 1. Each call becomes a token: a hash of what it is (kind, API, sizes, shapes, kernel, the sizes
//!    of the allocations it touches, the roles), never of an address or an allocation id, which
//!    change between iterations (`cudaMallocAsync`, caching allocators).
//! 2. [`detect`] finds the period whose repetition covers the longest stretch of the stream
//!    (the stretch must hold at least two full repetitions), the smallest such period on a tie.
//! 3. [`steady`] verifies what the tokens cannot see: that the touched allocations correspond.
//!    A tensor is named as the iteration sees it ([`TensorId`]): the k-th allocation of its
//!    iteration, `back` iterations ago, with its size; or, for what was allocated before the
//!    repetition began (weights, Caffe's blobs), the allocation itself. Consecutive iterations
//!    must name every touch alike; a mismatch is a divergence, not a guess.
//!
//! The in-shim executor runs the same functions on the calls it has seen so far (SINGA checks
//! every few hundred allocations); the planner's conversion ([`crate::shimtrace`]) runs them on a
//! whole trace and plans one steady iteration (not the first).

mod boundary;
mod detection;
mod naming;
mod tokens;

pub use boundary::{quiet_cut, quietest};
pub use detection::{NEXT, Region, Work, detect, detect_at_end, detect_period};
pub use naming::{Divergence, Steady, TensorId, once, steady, steady_from};
pub use tokens::{Call, Effect, calls, effect, is_call, kind_token, token};

#[cfg(test)]
mod tests;
