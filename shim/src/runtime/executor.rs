//! The executor: guided execution (Capuchin §4.2). A plan the bridge offers waits until the
//! next iteration boundary, then guides every iteration until the program diverges; a
//! divergence makes the rest of the iteration passive (the plan is dropped: the tracker looks
//! for the iteration again and the bridge replans).
//!
//! What it does today, for the plan's swaps: the eviction right after the evicted-access (the
//! allocator's eviction: the copy out on the swap-out stream, the memory unmapped once it is
//! done), and the prefetch at the in-trigger (the copy in on the swap-in stream; the
//! back-access waits for it by event). The plan names tensors as its iteration did
//! (`TensorId`); the tracker gives the current iteration's allocation. Anything that fails
//! leaves the tensor where it is: the passive mechanism restores on demand before any use, so
//! a plan can cost time, never bytes.
//!
//! Not yet: recomputation and drops (a plan's `Recompute` tensors are left to the passive
//! mechanism), decoupled swap-out (the host waits for each planned eviction's copy), and the
//! feedback that moves a late prefetch's in-trigger earlier.

use crate::config::Level;
use crate::runtime::bridge::Ready;
use crate::state::log;
use planner::iteration::TensorId;
use planner::model::Step;
use planner::timeline::Decision;
use std::collections::HashMap;
use std::sync::Mutex;

/// The plan as the hooks need it: per call offset within the iteration, what to do.
struct Steps {
    period: usize,
    /// Tensors to prefetch before the call at this offset (its in-trigger).
    prefetch: HashMap<usize, Vec<TensorId>>,
    /// Tensors to evict after the call at this offset (their evicted-access).
    evict: HashMap<usize, Vec<TensorId>>,
    /// Tensors whose contents are dead after the call at this offset: the model frees them
    /// there (their next access overwrites them whole), so they cost no memory until then.
    drop: HashMap<usize, Vec<TensorId>>,
}

impl Steps {
    fn of(r: &Ready) -> Steps {
        let c = &r.converted;
        let offset = |op: usize| c.ops.get(op).map(|o| o.0);
        let mut s = Steps {
            period: r.found.period,
            prefetch: HashMap::new(),
            evict: HashMap::new(),
            drop: HashMap::new(),
        };
        let mut last_op = None;
        for step in &c.trace.steps {
            match *step {
                Step::Op(o) => last_op = Some(o),
                Step::Free(st) => {
                    if let (Some(a), Some(origin)) = (last_op.and_then(offset), c.storages.get(st))
                    {
                        s.drop.entry(a).or_default().push(origin.tensor);
                    }
                }
            }
        }
        for &(storage, d) in &r.plan {
            let Some(origin) = c.storages.get(storage) else {
                continue;
            };
            if let Decision::Swap {
                after,
                trigger,
                back,
            } = d
                && let (Some(a), Some(t), Some(b)) = (offset(after), offset(trigger), offset(back))
                && a < t
                && t <= b
            {
                s.evict.entry(a).or_default().push(origin.tensor);
                s.prefetch.entry(t).or_default().push(origin.tensor);
            }
        }
        s
    }
}

struct Executor {
    /// A plan made since the last boundary.
    offered: Option<Ready>,
    /// The plan guiding the current iteration.
    active: Option<Steps>,
    /// Iterations guided so far.
    guided: u64,
}

static EXECUTOR: Mutex<Executor> = Mutex::new(Executor {
    offered: None,
    active: None,
    guided: 0,
});

/// A new plan, applied from the next iteration boundary.
pub fn offer(r: Ready) {
    if let Ok(mut e) = EXECUTOR.lock() {
        e.offered = Some(r);
    }
}

/// An iteration of `period` calls begins. Called with the tracker's lock held: nothing here
/// may reach the tracker.
pub fn boundary(period: usize) {
    if let Ok(mut e) = EXECUTOR.lock() {
        // A plan for another iteration (made before a divergence) is stale.
        if let Some(r) = e.offered.take()
            && r.found.period == period
        {
            let steps = Steps::of(&r);
            log(
                Level::Info,
                &format!(
                    "executor: the plan guides from this iteration ({:.3} ms predicted; {} evictions, {} prefetches, {} drops of dead contents planned)",
                    r.outcome.makespan * 1e3,
                    steps.evict.values().map(Vec::len).sum::<usize>(),
                    steps.prefetch.values().map(Vec::len).sum::<usize>(),
                    steps.drop.values().map(Vec::len).sum::<usize>()
                ),
            );
            e.active = Some(steps);
        }
        if e.active.is_some() {
            e.guided += 1;
        }
    }
}

/// The program left the planned sequence: passive until a new plan.
pub fn diverged() {
    if let Ok(mut e) = EXECUTOR.lock() {
        e.active = None;
        e.offered = None;
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Prefetch,
    Evict,
    Drop,
}

/// What the plan says at the call at `offset`: its prefetches (before it), or its evictions or
/// drops (after it).
fn step(offset: usize, kind: Kind) -> Vec<TensorId> {
    let Ok(e) = EXECUTOR.lock() else {
        return Vec::new();
    };
    let Some(s) = &e.active else {
        return Vec::new();
    };
    if offset >= s.period {
        return Vec::new();
    }
    let m = match kind {
        Kind::Prefetch => &s.prefetch,
        Kind::Evict => &s.evict,
        Kind::Drop => &s.drop,
    };
    m.get(&offset).cloned().unwrap_or_default()
}

/// Before a call that will be recorded is forwarded: the prefetches whose in-trigger it is.
/// `touches`: the call's own allocations (never evicted to make room).
pub fn before_call(touches: &[u64]) {
    let Some(offset) = crate::runtime::tracker::next_offset() else {
        return;
    };
    for name in step(offset, Kind::Prefetch) {
        if let Some(id) = crate::runtime::tracker::resolve(name) {
            crate::memory::prefetch(id, touches);
        }
    }
}

/// After a recorded call (the tracker has seen it): the evictions whose evicted-access it was.
pub fn after_call() {
    let Some(offset) = crate::runtime::tracker::last_offset() else {
        return;
    };
    for name in step(offset, Kind::Evict) {
        if let Some(id) = crate::runtime::tracker::resolve(name) {
            crate::memory::evict_planned(id);
        }
    }
    for name in step(offset, Kind::Drop) {
        if let Some(id) = crate::runtime::tracker::resolve(name) {
            crate::memory::mark_dead(id);
        }
    }
}
