//! The allocation registry: every device allocation the program holds, by address and by id,
//! so that a raw pointer in a call's arguments names the allocation it falls in.

use planner::trace::{Access, Touch};
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy)]
struct Allocation {
    len: u64,
    id: u64,
}

static ALLOCS: RwLock<BTreeMap<u64, Allocation>> = RwLock::new(BTreeMap::new());
/// Allocation id -> (pointer, size), for the memory manager.
static BY_ID: RwLock<BTreeMap<u64, (u64, u64)>> = RwLock::new(BTreeMap::new());
static NEXT_ALLOC: AtomicU64 = AtomicU64::new(1);

/// Registers an allocation and gives its record a sequence number under the same lock, so the
/// trace orders it after the free of any earlier allocation at that address.
pub fn register_alloc(ptr: u64, len: u64) -> (u64, u64) {
    let mut t = ALLOCS.write().unwrap_or_else(|p| p.into_inner());
    let id = NEXT_ALLOC.fetch_add(1, Ordering::Relaxed);
    t.insert(ptr, Allocation { len, id });
    BY_ID
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, (ptr, len));
    (id, super::bus::next_seq())
}

/// Forgets an allocation before it is freed; returns (id, size) and the record's sequence number.
pub fn unregister_alloc(ptr: u64) -> (Option<(u64, u64)>, u64) {
    let mut t = ALLOCS.write().unwrap_or_else(|p| p.into_inner());
    let a = t.remove(&ptr).map(|a| (a.id, a.len));
    if let Some((id, _)) = a {
        BY_ID.write().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
    (a, super::bus::next_seq())
}

/// The allocations [ptr, ptr + bytes) falls in, as touches.
pub fn touches(ptr: u64, bytes: u64, access: Access) -> Vec<Touch> {
    let t = ALLOCS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    let end = ptr.saturating_add(bytes.max(1));
    // The allocation containing ptr, then any that start inside the range.
    if let Some((&s, a)) = t.range(..=ptr).next_back()
        && ptr < s + a.len
    {
        out.push(Touch {
            alloc: a.id,
            offset: ptr - s,
            bytes: (s + a.len).min(end) - ptr,
            access,
        });
    }
    for (&s, a) in t.range(ptr.saturating_add(1)..end) {
        out.push(Touch {
            alloc: a.id,
            offset: 0,
            bytes: (s + a.len).min(end) - s,
            access,
        });
    }
    out
}

/// The allocation a single pointer value points into, if any.
pub fn points_into(v: u64) -> Option<(u64, u64)> {
    let t = ALLOCS.read().unwrap_or_else(|p| p.into_inner());
    t.range(..=v)
        .next_back()
        .filter(|(s, a)| v < **s + a.len)
        .map(|(s, a)| (a.id, v - s))
}

/// (pointer, size) of a live allocation by id.
pub fn allocation(id: u64) -> Option<(u64, u64)> {
    BY_ID
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .copied()
}
