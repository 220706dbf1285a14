//! Device durations of traced operations (MARMOSET_TRACE_TIMING=1): an event pair around the
//! operation on its stream, read back once the end event has completed (at synchronisations,
//! every 64 operations, and at exit), written as `timing` records.

use crate::ffi::table;
use planner::trace::Event;
use std::ffi::c_void;
use std::sync::Mutex;

type Ev = *mut c_void;

struct Pair {
    seq: u64,
    start: usize,
    end: usize,
}

static PENDING: Mutex<Vec<Pair>> = Mutex::new(Vec::new());

fn record(stream: u64) -> Option<usize> {
    let create = table::cudaEventCreate()?;
    let rec = table::cudaEventRecord()?;
    let mut e: Ev = std::ptr::null_mut();
    // SAFETY: real cudart calls with a valid output pointer and the caller's stream.
    unsafe {
        if create(&mut e) != 0 {
            return None;
        }
        if rec(e, stream as Ev) != 0 {
            destroy(e as usize);
            return None;
        }
    }
    Some(e as usize)
}

fn destroy(e: usize) {
    if let Some(d) = table::cudaEventDestroy() {
        // SAFETY: e is an event this module created.
        unsafe { d(e as Ev) };
    }
}

/// Records the start event before an operation on `stream`.
pub fn begin(stream: u64) -> Option<usize> {
    // A planner policy measures every operation: the plan is made from these durations.
    let c = crate::core::state::config();
    if !c.trace_timing && c.policy.guided().is_none() {
        return None;
    }
    record(stream)
}

/// Records the end event after the operation `seq`.
pub fn end(seq: u64, stream: u64, start: usize) {
    let Some(end) = record(stream) else {
        destroy(start);
        return;
    };
    let n = {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        p.push(Pair { seq, start, end });
        p.len()
    };
    if n >= 64 {
        drain(false);
    }
}

/// Writes the durations of completed operations (`wait`: of all of them).
pub fn drain(wait: bool) {
    // The event calls below must not be traced themselves (outside a hook, e.g. at exit).
    let _guard = crate::core::state::Guard::enter();
    let pairs = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    if pairs.is_empty() {
        return;
    }
    // The driver's calls, not the runtime's: the runtime's cudaEventQuery records "not ready"
    // as the calling thread's last error, which the program (PyTorch checks cudaGetLastError
    // after each launch) would then take for its own. A runtime event is a driver event.
    let (Some(query), Some(sync), Some(elapsed)) = (
        table::cuEventQuery(),
        table::cuEventSynchronize(),
        table::cuEventElapsedTime(),
    ) else {
        return;
    };
    let mut left = Vec::new();
    for p in pairs {
        // SAFETY: events created by this module; real driver calls.
        let done = unsafe {
            if wait {
                sync(p.end as Ev) == 0
            } else {
                query(p.end as Ev) == 0
            }
        };
        if !done {
            left.push(p);
            continue;
        }
        let mut ms = 0f32;
        // SAFETY: as above, with a valid output pointer.
        if unsafe { elapsed(&mut ms, p.start as Ev, p.end as Ev) } == 0 {
            crate::core::bus::emit(Event::Timing {
                of: p.seq,
                device_ms: ms as f64,
            });
        }
        destroy(p.start);
        destroy(p.end);
    }
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(left);
}
