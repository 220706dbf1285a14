//! Whether a trace's allocations are an allocator's blocks rather than tensors.
//!
//! The planner plans allocations: each is a tensor that can be kept, swapped or recomputed. A
//! program whose framework carves its tensors out of large cached blocks (PyTorch's caching
//! allocator: segments of 2 MiB and more; TensorFlow's BFC allocator: one region) allocates few,
//! large, long-lived blocks, and its calls touch each block wherever the allocator placed a
//! tensor. Planned as tensors, such blocks are all live at once and touched by almost every
//! call: no budget below the peak is feasible, and the plan says nothing about the program.
//!
//! The rule, from what any allocator of that kind does to a trace, not from one model: a call
//! touches an allocation at an offset, and a distinct (allocation, offset) is a place a tensor
//! (or a view of one) began. One allocation per tensor gives about one such place per
//! allocation (a view, a slice or an attention's q, k and v add a few, to a few allocations).
//! Blocks give many: so a trace is of blocks when
//! - its touched allocations are much fewer than the distinct places touched in them (at least
//!   [`PLACES_PER_ALLOCATION`] times fewer), and
//! - most of their bytes (more than half) lie in allocations touched at [`MANY_OFFSETS`] or
//!   more offsets, so that it is the memory, not one packed buffer among many tensors (a flat
//!   parameter buffer, a cuDNN RNN's weights), that is shared.
//!
//! Measured on the simulated H100 (PyTorch 2.15, 3 to 5 steps): under the caching allocator a
//! small CNN's trace has 4 touched allocations and 70 places (17.5 per allocation, 85% of the
//! bytes at 3 or more offsets), ResNet-50's at batch 8 has 70 and 973 (13.9, 73%);
//! with one allocation per tensor (`backend:cudaMallocAsync`) the same programs, the BERT-like
//! encoder and the C workloads have 1.00 to 1.05 places per allocation and no allocation at 3
//! offsets or more but an attention's packed q, k and v (1% of BERT-tiny's bytes).

use crate::trace::{Event, Record};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Distinct places touched per touched allocation at which the allocations are taken to be
/// blocks: one allocation per tensor gives 1 to 1.05.
pub const PLACES_PER_ALLOCATION: u64 = 4;

/// Offsets at which an allocation is touched that make it shared: more than a tensor and the
/// two views a split or a packed projection adds to it in the common case.
pub const MANY_OFFSETS: usize = 3;

/// What the trace's allocations are, when they are an allocator's blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// Allocations the calls touched.
    pub allocations: u64,
    /// Distinct (allocation, offset) places the calls touched in them.
    pub places: u64,
    /// Bytes of the touched allocations, and of those touched at [`MANY_OFFSETS`] or more.
    pub bytes: u64,
    pub shared_bytes: u64,
}

/// `Some` when the trace's allocations are an allocator's blocks (the rule in the module's
/// documentation); `None` for a trace of tensors, and for one with no touches to judge by.
pub fn allocator_blocks(records: &[Record]) -> Option<Blocks> {
    let mut size: HashMap<u64, u64> = HashMap::new();
    let mut offsets: HashMap<u64, HashSet<u64>> = HashMap::new();
    for r in records {
        match &r.event {
            Event::Alloc {
                alloc,
                size: s,
                result: 0,
                ..
            } if *alloc != 0 => {
                size.insert(*alloc, *s);
            }
            e => {
                for t in e.touches() {
                    offsets.entry(t.alloc).or_default().insert(t.offset);
                }
            }
        }
    }
    let mut b = Blocks {
        allocations: 0,
        places: 0,
        bytes: 0,
        shared_bytes: 0,
    };
    for (alloc, at) in &offsets {
        let Some(&s) = size.get(alloc) else { continue };
        b.allocations += 1;
        b.places += at.len() as u64;
        b.bytes += s;
        if at.len() >= MANY_OFFSETS {
            b.shared_bytes += s;
        }
    }
    let few = b.allocations > 0 && b.places >= PLACES_PER_ALLOCATION * b.allocations;
    let shared = 2 * b.shared_bytes > b.bytes;
    (few && shared).then_some(b)
}

impl Blocks {
    /// Percent of the touched bytes in allocations touched at many offsets.
    pub fn shared_percent(&self) -> f64 {
        100.0 * self.shared_bytes as f64 / self.bytes.max(1) as f64
    }
}

/// What the trace is, and what to do: one paragraph, for `plan`, `inspect` and `report`.
impl fmt::Display for Blocks {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "its allocations are an allocator's blocks, not tensors: {} allocations hold {} \
             distinct places the calls touched, and {:.0}% of their bytes lie in allocations \
             touched at {} or more offsets (PyTorch's caching allocator carves tensors out of \
             cached segments), so a plan of them would mean nothing. Record the run again with \
             `marmoset run --trace FILE`, which asks PyTorch for one allocation per tensor, or \
             set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync yourself",
            self.allocations,
            self.places,
            self.shared_percent(),
            MANY_OFFSETS
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Access, Touch};

    fn rec(seq: u64, event: Event) -> Record {
        Record {
            seq,
            t_ns: seq,
            tid: 1,
            event,
        }
    }

    fn alloc(seq: u64, alloc: u64, size: u64) -> Record {
        rec(
            seq,
            Event::Alloc {
                api: "cudaMalloc".into(),
                alloc,
                ptr: alloc << 32,
                size,
                stream: None,
                result: 0,
            },
        )
    }

    fn launch(seq: u64, touches: &[(u64, u64, u64)]) -> Record {
        rec(
            seq,
            Event::Launch {
                api: "cudaLaunchKernel".into(),
                func: 1,
                grid: [1, 1, 1],
                block: [1, 1, 1],
                stream: None,
                touches: touches
                    .iter()
                    .map(|&(alloc, offset, bytes)| Touch {
                        alloc,
                        offset,
                        bytes,
                        access: Access::Rw,
                    })
                    .collect(),
                result: 0,
            },
        )
    }

    const MIB: u64 = 1 << 20;

    /// A training loop's shape with `tensors` tensors of 1 MiB each, every call touching two:
    /// `per_tensor`, one allocation each (freed and made again each step, as an allocator that
    /// returns memory does); else carved out of one 20 MiB segment per 16 tensors, as a caching
    /// allocator does, kept for the run.
    fn training(tensors: u64, per_tensor: bool, steps: u64) -> Vec<Record> {
        let mut out = Vec::new();
        let mut seq = 0;
        let mut next = |out: &mut Vec<Record>, e: Record| {
            seq += 1;
            out.push(Record { seq, ..e });
        };
        let segments = tensors.div_ceil(16);
        if !per_tensor {
            for s in 0..segments {
                next(&mut out, alloc(0, 1 + s, 20 * MIB));
            }
        }
        let place = |t: u64, step: u64| -> (u64, u64) {
            if per_tensor {
                (1000 * (step + 1) + t, 0)
            } else {
                (1 + t / 16, (t % 16) * MIB)
            }
        };
        for step in 0..steps {
            if per_tensor {
                for t in 0..tensors {
                    next(&mut out, alloc(0, place(t, step).0, MIB));
                }
            }
            for t in 1..tensors {
                let (a, o) = place(t - 1, step);
                let (b, p) = place(t, step);
                next(&mut out, launch(0, &[(a, o, MIB), (b, p, MIB)]));
            }
        }
        out
    }

    #[test]
    fn a_caching_allocators_segments_are_blocks() {
        let b = allocator_blocks(&training(64, false, 3)).expect("blocks");
        assert_eq!((b.allocations, b.places), (4, 64));
        assert_eq!(b.shared_bytes, b.bytes);
        let said = b.to_string();
        assert!(
            said.contains("--trace") && said.contains("backend:cudaMallocAsync"),
            "{said}"
        );
    }

    #[test]
    fn one_allocation_per_tensor_is_not() {
        assert_eq!(allocator_blocks(&training(64, true, 3)), None);
        // Views add places to some tensors (a packed q, k, v: three offsets) without making
        // the allocations blocks.
        let mut r = training(64, true, 1);
        for t in 0..8 {
            r.push(launch(
                10_000 + t,
                &[
                    (1000 + t, MIB / 3, MIB / 3),
                    (1000 + t, 2 * MIB / 3, MIB / 3),
                ],
            ));
        }
        assert_eq!(allocator_blocks(&r), None);
        // No touches: nothing to judge by.
        assert_eq!(allocator_blocks(&[alloc(1, 1, 20 * MIB)]), None);
    }

    #[test]
    fn one_packed_buffer_among_tensors_is_not() {
        // A flat 8 MiB buffer touched at 512 offsets (a packed parameter buffer) beside 64
        // tensors of 1 MiB: many places per allocation, but most bytes are the tensors'.
        let mut r = training(64, true, 1);
        r.push(alloc(5000, 1, 8 * MIB));
        for i in 0..512 {
            r.push(launch(5001 + i, &[(1, i * 16 * 1024, 16 * 1024)]));
        }
        let b = allocator_blocks(&r);
        assert_eq!(b, None, "places per allocation alone do not make blocks");
        // The same buffer holding most of the memory (one region an allocator carves, as
        // TensorFlow's BFC allocator does) is blocks.
        let mut r = training(4, true, 1);
        r.push(alloc(5000, 1, 64 * MIB));
        for i in 0..512 {
            r.push(launch(5001 + i, &[(1, i * 64 * 1024, 64 * 1024)]));
        }
        assert!(allocator_blocks(&r).is_some());
    }
}
