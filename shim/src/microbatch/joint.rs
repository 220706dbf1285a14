//! The joint plan's workspaces: under a memory budget with neither a workspace limit nor a
//! total, convolutions on the backend API are measured as under WD (every engine at each
//! micro-batch size within the budget, the desirable set kept). The framework reads a plan's
//! workspace once, when it builds the plan, so it is told a small one: the fastest
//! configuration's within a small share of the budget ([`joint_cap`]), which it allocates like
//! any tensor. Faster configurations run in a workspace lent beside it: under a plan, up to
//! the cap the plan chose with its evictions (`planner::memory::joint`: the plan left room for
//! it, so room is made where it is not spare); without one, only from memory spare at that
//! moment (`core::own_memory`), for which no tensor is evicted, and which the allocator takes
//! back, before it evicts anything, whenever it needs room.
//!
//! One lent buffer serves every convolution, reused in stream order: it grows when a faster
//! configuration needs more and the budget has that much spare, and a use on another stream
//! than the last waits for the last by event. Where nothing fits, the configuration needing
//! least (under a plan, the one it left room for) runs, in a buffer of its own made room for
//! and freed behind it. A replay of an execution (recomputation) runs the configuration that
//! execution ran, so that it rebuilds the same bits.

use super::P;
use crate::core::own_memory::{self, Pinned};
use crate::core::state::config;
use crate::ffi::table;
use planner::microbatch::Configuration;
use std::collections::HashMap;
use std::sync::Mutex;

/// The joint plan is on: a budget Marmoset manages, and no workspace limit or total.
pub(crate) fn joint_mode() -> bool {
    config().joint_workspace() && own_memory::budget().is_some()
}

/// The budget as the limit of what the benchmark measures: a configuration needing more
/// workspace than the whole budget is never run.
pub(crate) fn joint_limit() -> Option<u64> {
    if !config().joint_workspace() {
        return None;
    }
    own_memory::budget()
}

/// The share of the budget the workspace the framework provides may take (the fastest
/// configuration's within it): the smallest cap above nothing the joint plan weighs
/// (`planner::memory::joint::caps`: a third of the budget, then halved eight times).
const PLANNED_SHARE: u64 = 768;

/// The workspace the framework provides for a convolution, at most: 1/768 of the budget
/// (the test facility's share instead, when set).
pub(crate) fn joint_cap() -> Option<u64> {
    let share = config().test_joint_share.unwrap_or(PLANNED_SHARE);
    joint_limit().map(|b| b / share)
}

/// The shared buffer: where it is, its bytes, and the stream of its last use.
struct Buffer {
    ptr: u64,
    size: u64,
    stream: u64,
}

static BUFFER: Mutex<Option<Buffer>> = Mutex::new(None);

/// Executions' configurations, for their replays: (plan, the variant pack's pointers) -> parts.
type Ran = HashMap<(usize, Vec<i64>), Vec<(u64, i32)>>;
static RAN: Mutex<Option<Ran>> = Mutex::new(None);

/// Executions remembered at most (the oldest forgotten all at once beyond it).
const RAN_MAX: usize = 1 << 14;

/// A configuration to run and its workspace: the buffer pinned for this use (None: it needs
/// none); `transient`: a buffer of this use alone, freed behind it.
pub(crate) struct Chosen {
    pub config: Configuration,
    pub workspace: Option<Pinned>,
    /// Runs in the workspace the framework provides.
    pub in_caller: bool,
    transient: bool,
}

impl Drop for Chosen {
    fn drop(&mut self) {
        if let Some(p) = self.workspace.take() {
            let ptr = p.ptr();
            drop(p);
            if self.transient {
                own_memory::free(ptr);
            }
        }
    }
}

/// The configuration an execution on `stream` runs: the fastest of `front` (fastest first)
/// whose workspace fits the `own` bytes the framework provided, the shared buffer or the memory
/// the budget has spare; else the one that needs least. `again`: the configuration an earlier
/// execution ran, for its replay.
pub(crate) fn choose(
    front: &[Configuration],
    stream: u64,
    again: Option<&[(u64, i32)]>,
    own: u64,
) -> Option<Chosen> {
    // Under a plan that chose a cap, the fastest that fits it or the framework's workspace:
    // the plan left room for it, so where it is not spare, room is made for it.
    let cap = own_memory::lend_cap();
    let candidates: Vec<&Configuration> = match (again, cap) {
        (Some(parts), _) => front.iter().filter(|c| c.parts == parts).collect(),
        (None, Some(cap)) => front
            .iter()
            .find(|c| c.workspace <= cap.max(own))
            .into_iter()
            .collect(),
        (None, None) => front.iter().collect(),
    };
    // Nothing within the cap: the one that needs least.
    let candidates = match candidates.is_empty() {
        true => front
            .iter()
            .min_by_key(|c| c.workspace)
            .into_iter()
            .collect(),
        false => candidates,
    };
    // Runs in what the framework provides.
    let in_caller = |c: &Configuration| Chosen {
        config: c.clone(),
        workspace: None,
        in_caller: true,
        transient: false,
    };
    // The fastest fits there: nothing else to ask.
    if let Some(c) = candidates.first().filter(|c| c.workspace <= own) {
        return Some(in_caller(c));
    }
    let mut buffer = BUFFER.lock().ok()?;
    // The buffer, pinned for this use, if the allocator has not taken it back.
    let mut pinned = buffer
        .as_ref()
        .and_then(|b| Pinned::new(b.ptr, b.size, stream).map(|p| (p, b.size)));
    if pinned.is_none() {
        *buffer = None;
    }
    let held = pinned.as_ref().map_or(0, |p| p.1);
    let spare = own_memory::spare().unwrap_or(0);
    let least = match cap {
        Some(_) => candidates.first().copied(),
        None => candidates.iter().min_by_key(|c| c.workspace).copied(),
    }?;
    let mut choice = None;
    for c in &candidates {
        if c.workspace <= own {
            return Some(in_caller(c));
        }
        if c.workspace == 0 || c.workspace <= held {
            choice = Some(((*c).clone(), c.workspace > 0));
            break;
        }
        if c.workspace <= spare && grow(&mut buffer, &mut pinned, c.workspace, stream) {
            choice = Some(((*c).clone(), true));
            break;
        }
    }
    let (config, uses) = match choice {
        Some(x) => x,
        None => {
            // Nothing fits what is spare: the one that needs least (under a plan's cap, the one
            // the plan left room for), in a buffer of its own with room made for it (the shared
            // one given back first), made without the shared buffer's lock: making room may
            // wait for other threads' calls.
            drop(pinned);
            if crate::core::state::logs(crate::core::config::Level::Debug) {
                crate::core::state::log(
                    crate::core::config::Level::Debug,
                    &format!(
                        "joint: {} B of workspace not spare ({spare} B spare, {held} B held): room made for it",
                        least.workspace
                    ),
                );
            }
            if let Some(b) = buffer.take() {
                own_memory::free(b.ptr);
            }
            drop(buffer);
            let ptr = own_memory::lend(least.workspace as usize, true)?;
            let Some(p) = Pinned::new(ptr, least.workspace, stream) else {
                own_memory::free(ptr);
                return None;
            };
            return Some(Chosen {
                config: least.clone(),
                workspace: Some(p),
                in_caller: false,
                transient: true,
            });
        }
    };
    let workspace = if uses {
        let (p, _) = pinned?;
        if let Some(b) = buffer.as_mut() {
            if b.stream != stream {
                after(b.stream, stream);
            }
            b.stream = stream;
        }
        Some(p)
    } else {
        None
    };
    Some(Chosen {
        config,
        workspace,
        in_caller: false,
        transient: false,
    })
}

/// Replaces the buffer by one of `size` bytes from spare memory (the old one freed behind its
/// uses). False: not to be had; the old one stays.
fn grow(
    buffer: &mut Option<Buffer>,
    pinned: &mut Option<(Pinned, u64)>,
    size: u64,
    stream: u64,
) -> bool {
    let Some(ptr) = own_memory::lend(size as usize, false) else {
        return false;
    };
    let Some(p) = Pinned::new(ptr, size, stream) else {
        own_memory::free(ptr);
        return false;
    };
    *pinned = None;
    if let Some(old) = buffer.take() {
        own_memory::free(old.ptr);
    }
    *buffer = Some(Buffer { ptr, size, stream });
    *pinned = Some((p, size));
    true
}

/// Stream `to` waits for the work issued on `from` so far.
fn after(from: u64, to: u64) {
    let (Some(create), Some(record), Some(wait), Some(destroy)) = (
        table::cuEventCreate(),
        table::cuEventRecord(),
        table::cuStreamWaitEvent(),
        table::cuEventDestroy_v2(),
    ) else {
        return;
    };
    let mut e: P = std::ptr::null_mut();
    // SAFETY: real CUDA driver calls on an event Marmoset creates and destroys here; the
    // streams are the program's, live while it convolves on them.
    unsafe {
        // CU_EVENT_DISABLE_TIMING: an ordering event.
        if create(&mut e, 2) == 0 {
            if record(e, from as P) == 0 {
                wait(to as P, e, 0);
            }
            destroy(e);
        }
    }
}

/// The stream of a cuDNN handle (0: the default stream, or unknown).
pub(crate) fn stream_of(h: P) -> u64 {
    let Some(get) = table::cudnnGetStream() else {
        return 0;
    };
    let mut s: P = std::ptr::null_mut();
    // SAFETY: the caller's handle and a valid output pointer.
    if unsafe { get(h, &mut s) } != 0 {
        return 0;
    }
    s as u64
}

/// Remembers the configuration an execution ran, for its replay.
pub(crate) fn ran(plan: usize, ptrs: &[i64], parts: &[(u64, i32)]) {
    if let Ok(mut g) = RAN.lock() {
        let m = g.get_or_insert_with(HashMap::new);
        if m.len() >= RAN_MAX {
            m.clear();
        }
        m.insert((plan, ptrs.to_vec()), parts.to_vec());
    }
}

/// The configuration the execution of `plan` on these pointers last ran.
pub(crate) fn ran_before(plan: usize, ptrs: &[i64]) -> Option<Vec<(u64, i32)>> {
    RAN.lock()
        .ok()?
        .as_ref()?
        .get(&(plan, ptrs.to_vec()))
        .cloned()
}
