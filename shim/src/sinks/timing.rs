//! Device durations of traced operations (MARMOSET_TRACE_TIMING=1): an event pair around the
//! operation on its stream, read back once the end event has completed (at synchronisations,
//! every 64 operations, and at exit), written as `timing` records.
//!
//! An operation's start event completes when its stream's earlier work has, not when the
//! operation starts: work another stream issued just before may still hold the device. A
//! compute operation's duration is therefore its own, not that wait's: where the compute
//! operation issued before it, on another stream, ended inside its event pair, the time from its
//! start event to that end is taken off (the device ran the other's work then). Collectives and
//! copies run on their own engines beside compute, and neither take nor give such time.

use crate::ffi::{last_error, table};
use planner::trace::Event;
use std::ffi::c_void;
use std::sync::Mutex;

type Ev = *mut c_void;

struct Pair {
    seq: u64,
    start: usize,
    end: usize,
    stream: u64,
    /// Runs on the compute engine (a kernel, a library call, a memset).
    compute: bool,
}

static PENDING: Mutex<Vec<Pair>> = Mutex::new(Vec::new());

/// The last compute operation whose duration was written: its stream and end event (kept until
/// the next one's is written, then destroyed).
static LAST: Mutex<Option<(u64, usize)>> = Mutex::new(None);

fn record(stream: u64) -> Option<usize> {
    let create = table::cudaEventCreate()?;
    let rec = table::cudaEventRecord()?;
    let mut e: Ev = std::ptr::null_mut();
    // SAFETY: real cudart calls with a valid output pointer and the caller's stream.
    if last_error::quietly(|| unsafe { create(&mut e) }) != 0 {
        return None;
    }
    // SAFETY: e was created above; the stream is the caller's.
    if last_error::quietly(|| unsafe { rec(e, stream as Ev) }) != 0 {
        destroy(e as usize);
        return None;
    }
    Some(e as usize)
}

fn destroy(e: usize) {
    if let Some(d) = table::cudaEventDestroy() {
        // SAFETY: e is an event this module created.
        last_error::quietly(|| unsafe { d(e as Ev) });
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

/// Records the end event after the operation `seq` (`compute`: it runs on the compute engine).
pub fn end(seq: u64, stream: u64, start: usize, compute: bool) {
    let Some(end) = record(stream) else {
        destroy(start);
        return;
    };
    let n = {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        p.push(Pair {
            seq,
            start,
            end,
            stream,
            compute,
        });
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
    // In issue order, up to the first not done: a compute operation's duration needs the one
    // issued before it.
    let mut left = Vec::new();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let between = |a: usize, b: usize| {
        let mut ms = 0f32;
        // SAFETY: completed events created by this module; a valid output pointer.
        (unsafe { elapsed(&mut ms, a as Ev, b as Ev) } == 0).then_some(ms as f64)
    };
    for p in pairs {
        if !left.is_empty() {
            left.push(p);
            continue;
        }
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
        if let Some(ms) = between(p.start, p.end) {
            // The other stream's operation ended within this one's pair: the device ran it
            // from this one's start event to its end.
            let waited = match *last {
                Some((stream, end)) if p.compute && stream != p.stream => {
                    match (between(p.start, end), between(end, p.end)) {
                        (Some(before), Some(after)) if before > 0.0 && after >= 0.0 => before,
                        _ => 0.0,
                    }
                }
                _ => 0.0,
            };
            crate::core::bus::emit(Event::Timing {
                of: p.seq,
                device_ms: (ms - waited).max(0.0),
            });
        }
        destroy(p.start);
        if p.compute {
            if let Some((_, old)) = last.replace((p.stream, p.end)) {
                destroy(old);
            }
        } else {
            destroy(p.end);
        }
    }
    drop(last);
    let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    left.append(&mut pending);
    *pending = left;
}
