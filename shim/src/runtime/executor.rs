//! The executor: guided execution (Capuchin §4.2). A plan the bridge offers waits until the
//! next iteration boundary, then guides every iteration until the program diverges; a
//! divergence makes the rest of the iteration passive (the plan is dropped: the tracker looks
//! for the iteration again and the bridge replans).
//!
//! Not yet: acting on the plan's decisions (eviction after the evicted-access on the swap-out
//! stream, prefetch at the in-trigger, drops, recomputation). Until then a guided iteration runs
//! on the passive mechanism of `memory`, and the plan only says what it would do.

use crate::config::Level;
use crate::runtime::bridge::Ready;
use crate::state::log;
use std::sync::Mutex;

struct Executor {
    /// A plan made since the last boundary.
    offered: Option<Ready>,
    /// The plan guiding the current iteration.
    active: Option<Ready>,
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
            log(
                Level::Info,
                &format!(
                    "executor: the plan guides from this iteration ({:.3} ms predicted)",
                    r.outcome.makespan * 1e3
                ),
            );
            e.active = Some(r);
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
