//! NCCL hooks: every collective and point-to-point call is an access to the buffers it reads and
//! writes, on its stream (`collective` records), so that a memory policy makes them resident
//! before NCCL's kernel is enqueued and never evicts them under it. Between `ncclGroupStart` and
//! the outermost `ncclGroupEnd`, NCCL only queues the calls and enqueues their work at the end:
//! their operands stay held until then.
//!
//! Extents follow nccl.h: counts are elements of the call's data type; an all-gather's receive
//! buffer (and a reduce-scatter's send buffer, an all-to-all's both) holds one count per rank.
//! Buffers only the root uses are counted as read and written on every rank, so that no rank
//! takes their contents for dead.

use super::{Pending, hooks, range};
use crate::ffi::table;
use crate::virt::memory::Hold;
use planner::trace::{Access, Event, Touch};
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};

type P = *mut c_void;
type C = *const c_void;

/// ncclInternalError: the answer when the real NCCL cannot be found.
const INTERNAL_ERROR: c_int = 3;

/// Bytes of one element of an `ncclDataType_t` (nccl.h: int8 0, uint8 1, int32 2, uint32 3,
/// int64 4, uint64 5, float16 6, float32 7, float64 8, bfloat16 9, float8 e4m3 10, e5m2 11);
/// None for a type NCCL does not define, whose call then touches nothing and NCCL refuses.
pub fn elem_bytes(ty: c_int) -> Option<u64> {
    match ty {
        0 | 1 | 10 | 11 => Some(1),
        6 | 9 => Some(2),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        _ => None,
    }
}

/// The communicator's size from the real NCCL (None when it cannot say).
fn ranks(comm: C) -> Option<u32> {
    let count = table::ncclCommCount()?;
    let mut n = 0;
    // SAFETY: the caller's communicator and a valid output pointer.
    let r = unsafe { count(comm, &mut n) };
    (r == 0 && n > 0).then_some(n as u32)
}

/// One buffer of a call: its pointer, elements and how the call uses it.
struct Buf {
    ptr: C,
    elems: u64,
    access: Access,
}

/// The record of one call: `bytes` is the per-rank buffer size nccl-tests counts (elements of
/// the call's count times the type's size).
fn record(api: &str, comm: C, stream: P, count: usize, ty: c_int, bufs: &[Buf]) -> Option<Pending> {
    let elem = elem_bytes(ty)?;
    let mut touches: Vec<Touch> = Vec::new();
    // In place (the same range read and written) is one read-write touch.
    let mut merged: Vec<(u64, u64, Access)> = Vec::new();
    for b in bufs {
        let (ptr, bytes) = (b.ptr as u64, b.elems.saturating_mul(elem));
        if ptr == 0 || bytes == 0 {
            continue;
        }
        match merged.iter_mut().find(|m| m.0 == ptr && m.1 == bytes) {
            Some(m) if m.2 != b.access => m.2 = Access::Rw,
            Some(_) => {}
            None => merged.push((ptr, bytes, b.access)),
        }
    }
    for (ptr, bytes, access) in merged {
        touches.extend(range(ptr, bytes, access));
    }
    let stream = stream as u64;
    let p = Pending::new(Event::Collective {
        api: api.into(),
        stream: Some(stream),
        bytes: (count as u64).saturating_mul(elem),
        ranks: ranks(comm).unwrap_or(0),
        touches,
        result: 0,
    });
    Some(p.timed(stream))
}

fn per_rank(count: usize, comm: C) -> u64 {
    (count as u64).saturating_mul(u64::from(ranks(comm).unwrap_or(1)))
}

fn buf(ptr: C, elems: u64, access: Access) -> Buf {
    Buf { ptr, elems, access }
}

thread_local! {
    /// How deep this thread is in ncclGroupStart / ncclGroupEnd.
    static GROUP: Cell<u32> = const { Cell::new(0) };
    /// The operands of the calls queued in the open group.
    static QUEUED: RefCell<Vec<Hold>> = const { RefCell::new(Vec::new()) };
}

/// Ends a call's hold, or keeps it until the group's end when the call was queued in one.
pub fn release(hold: Hold) {
    if GROUP.with(Cell::get) > 0 {
        QUEUED.with(|q| q.borrow_mut().push(hold));
    }
}

fn group_start(real: impl FnOnce() -> c_int) -> c_int {
    let r = real();
    if r == 0 {
        GROUP.with(|g| g.set(g.get() + 1));
    }
    r
}

/// The outermost end issues the group's work: its operands are released after it, whatever it
/// returned (a failed group issued nothing that could still read them).
fn group_end(real: impl FnOnce() -> c_int) -> c_int {
    let r = real();
    let depth = GROUP.with(|g| {
        let d = g.get().saturating_sub(1);
        g.set(d);
        d
    });
    if depth == 0 {
        let held = QUEUED.with(|q| std::mem::take(&mut *q.borrow_mut()));
        drop(held);
    }
    r
}

// SAFETY (every forwarded call in this table): `real` is the real function of the entry's own
// name and signature (see `hooks!`), called with the caller's arguments unchanged.
hooks! {
    libs = crate::ffi::real::NCCL, unavailable = INTERNAL_ERROR, names = (entry, real);
    [""] fn ncclAllReduce(send: C, recv: P, count: usize, ty: c_int, op: c_int, comm: C, stream: P) =>
        record("ncclAllReduce", comm, stream, count, ty,
            &[buf(send, count as u64, Access::R), buf(recv, count as u64, Access::W)]);
    [""] fn ncclBroadcast(send: C, recv: P, count: usize, ty: c_int, root: c_int, comm: C, stream: P) =>
        record("ncclBroadcast", comm, stream, count, ty,
            &[buf(send, count as u64, Access::R), buf(recv, count as u64, Access::W)]);
    [""] fn ncclBcast(buff: P, count: usize, ty: c_int, root: c_int, comm: C, stream: P) =>
        record("ncclBcast", comm, stream, count, ty, &[buf(buff, count as u64, Access::Rw)]);
    [""] fn ncclReduce(send: C, recv: P, count: usize, ty: c_int, op: c_int, root: c_int, comm: C, stream: P) =>
        record("ncclReduce", comm, stream, count, ty,
            &[buf(send, count as u64, Access::R), buf(recv, count as u64, Access::Rw)]);
    [""] fn ncclAllGather(send: C, recv: P, count: usize, ty: c_int, comm: C, stream: P) =>
        record("ncclAllGather", comm, stream, count, ty,
            &[buf(send, count as u64, Access::R), buf(recv, per_rank(count, comm), Access::W)]);
    [""] fn ncclReduceScatter(send: C, recv: P, count: usize, ty: c_int, op: c_int, comm: C, stream: P) =>
        record("ncclReduceScatter", comm, stream, count, ty,
            &[buf(send, per_rank(count, comm), Access::R), buf(recv, count as u64, Access::W)]);
    [""] fn ncclAlltoAll(send: C, recv: P, count: usize, ty: c_int, comm: C, stream: P) =>
        record("ncclAlltoAll", comm, stream, count, ty,
            &[buf(send, per_rank(count, comm), Access::R), buf(recv, per_rank(count, comm), Access::W)]);
    [""] fn ncclGather(send: C, recv: P, count: usize, ty: c_int, root: c_int, comm: C, stream: P) =>
        record("ncclGather", comm, stream, count, ty,
            &[buf(send, count as u64, Access::R), buf(recv, per_rank(count, comm), Access::Rw)]);
    [""] fn ncclSend(send: C, count: usize, ty: c_int, peer: c_int, comm: C, stream: P) =>
        record("ncclSend", comm, stream, count, ty, &[buf(send, count as u64, Access::R)]);
    [""] fn ncclRecv(recv: P, count: usize, ty: c_int, peer: c_int, comm: C, stream: P) =>
        record("ncclRecv", comm, stream, count, ty, &[buf(recv, count as u64, Access::W)]);
    [""] fn ncclGroupStart() => None, call = group_start(|| unsafe { real() });
    [""] fn ncclGroupEnd() => None, call = group_end(|| unsafe { real() });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_follow_nccl_h() {
        assert_eq!(elem_bytes(0), Some(1));
        assert_eq!(elem_bytes(6), Some(2));
        assert_eq!(elem_bytes(9), Some(2));
        assert_eq!(elem_bytes(7), Some(4));
        assert_eq!(elem_bytes(8), Some(8));
        assert_eq!(elem_bytes(12), None);
        assert_eq!(elem_bytes(-1), None);
    }

    #[test]
    fn a_group_keeps_its_calls_operands_until_its_end() {
        assert_eq!(group_start(|| 0), 0);
        assert_eq!(group_start(|| 0), 0);
        release(Hold::none());
        release(Hold::none());
        assert_eq!(QUEUED.with(|q| q.borrow().len()), 2);
        group_end(|| 0);
        assert_eq!(
            QUEUED.with(|q| q.borrow().len()),
            2,
            "an inner end issues nothing"
        );
        group_end(|| 0);
        assert_eq!(QUEUED.with(|q| q.borrow().len()), 0);
        release(Hold::none());
        assert_eq!(
            QUEUED.with(|q| q.borrow().len()),
            0,
            "outside a group a hold ends"
        );
        assert_eq!(group_start(|| 5), 5);
        assert_eq!(GROUP.with(Cell::get), 0, "a failed start opens no group");
    }
}
