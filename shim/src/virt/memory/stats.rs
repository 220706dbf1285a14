//! A memory pool's statistics under a memory policy.
//!
//! The stream-ordered path (cudaMallocAsync, cudaMallocFromPoolAsync, cuMemAllocAsync,
//! cuMemAllocFromPoolAsync) is reported by four attributes of the pool it allocates from
//! (cudaMemPoolGetAttribute / cuMemPoolGetAttribute): RESERVED_MEM_CURRENT (5),
//! RESERVED_MEM_HIGH (6), USED_MEM_CURRENT (7), USED_MEM_HIGH (8), all cuuint64_t; setting a high
//! mark to 0 resets it to the current figure, and no other value is allowed. PyTorch's
//! cudaMallocAsync backend reads its memory_allocated, max_memory_allocated, memory_reserved and
//! max_memory_reserved from the device's default pool this way, and reset_peak_memory_stats sets
//! both high marks to 0.
//!
//! Under a memory policy Marmoset serves those allocations itself, and no pool of the driver sees
//! them. So Marmoset answers the four attributes of the device's default pool, and of every pool
//! it served an allocation of, from its own counts of the program's stream-ordered allocations:
//! - used: the live allocations, each as the program asked for it rounded up to 512 B (the
//!   simulated device's granule, and PyTorch's native allocator's): what the program allocated,
//!   wherever Marmoset keeps it;
//! - reserved: the device memory Marmoset holds for them now, what they occupy of the budget: a
//!   tensor's mapped bytes (its size rounded up to the VMM granularity) while it is resident,
//!   until its copy out is done when evicted; a small allocation's size class; nothing for one
//!   whose bytes are on the host. It is below used when some are evicted, and within the budget;
//! - the high mark of each since its last reset.
//!
//! Allocations made through cudaMallocAsync count in the device's default pool (Marmoset manages
//! device 0 only, and a pool set with cudaDeviceSetMemPool is not followed). The other attributes
//! (reuse flags, release threshold) are the real pool's. Without a memory policy the driver's
//! pools answer.
//!
//! The reserved high mark is kept without a walk over the live allocations at every change: what
//! Marmoset sees come and go (allocations, frees, tensors mapped again) moves an upper bound of the
//! figure, and the exact figure is counted (one walk) only when that bound passes the high mark,
//! and at every query. Memory leaving an evicted tensor only lowers the figure, so the bound stays
//! above it.

use super::{Manager, Place, with};
use crate::ffi::call;
use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

pub const RESERVED_MEM_CURRENT: c_int = 5;
pub const RESERVED_MEM_HIGH: c_int = 6;
pub const USED_MEM_CURRENT: c_int = 7;
pub const USED_MEM_HIGH: c_int = 8;

/// cudaErrorInvalidValue and CUDA_ERROR_INVALID_VALUE alike.
pub const INVALID_VALUE: c_int = 1;

/// Used bytes are counted in units of this.
pub const GRANULE: u64 = 512;

/// Whether `attr` is one of the four figures Marmoset keeps (their value type is cuuint64_t).
pub fn is_figure(attr: c_int) -> bool {
    (RESERVED_MEM_CURRENT..=USED_MEM_HIGH).contains(&attr)
}

#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    used: u64,
    used_high: u64,
    reserved_high: u64,
    /// At least the reserved figure now (see the module documentation).
    bound: u64,
}

/// The program's stream-ordered allocations, pool by pool.
#[derive(Debug, Default)]
pub struct Counters {
    pools: HashMap<u64, Figures>,
    /// Live allocations: address -> (pool, used bytes).
    live: HashMap<u64, (u64, u64)>,
}

impl Counters {
    /// A new allocation of `size` bytes at `ptr` from `pool`, holding `held` bytes of device
    /// memory; true when the reserved figure must be counted (it may pass the high mark).
    pub fn allocated(&mut self, ptr: u64, pool: u64, size: u64, held: u64) -> bool {
        let bytes = size.max(1).div_ceil(GRANULE) * GRANULE;
        if let Some((old_pool, old)) = self.live.insert(ptr, (pool, bytes)) {
            // An address given out again without its free seen: the old one is gone.
            if let Some(f) = self.pools.get_mut(&old_pool) {
                f.used -= old;
            }
        }
        let f = self.pools.entry(pool).or_default();
        f.used += bytes;
        f.used_high = f.used_high.max(f.used);
        f.bound += held;
        f.bound > f.reserved_high
    }

    /// The allocation at `ptr` is freed, holding `held` bytes of device memory until now.
    pub fn freed(&mut self, ptr: u64, held: u64) {
        if let Some((pool, bytes)) = self.live.remove(&ptr)
            && let Some(f) = self.pools.get_mut(&pool)
        {
            f.used -= bytes;
            f.bound = f.bound.saturating_sub(held);
        }
    }

    /// `bytes` of device memory mapped for `ptr` again; its pool when the reserved figure must be
    /// counted (None: not a live allocation of the stream-ordered path, or below the high mark).
    pub fn mapped(&mut self, ptr: u64, bytes: u64) -> Option<u64> {
        let &(pool, _) = self.live.get(&ptr)?;
        let f = self.pools.get_mut(&pool)?;
        f.bound += bytes;
        (f.bound > f.reserved_high).then_some(pool)
    }

    /// The reserved figure of `pool` counted now: the bound is exact again, and the high mark
    /// follows it.
    pub fn counted(&mut self, pool: u64, reserved: u64) {
        let f = self.pools.entry(pool).or_default();
        f.bound = reserved;
        f.reserved_high = f.reserved_high.max(reserved);
    }

    /// Whether Marmoset served an allocation from `pool`.
    pub fn knows(&self, pool: u64) -> bool {
        self.pools.contains_key(&pool)
    }

    /// The live allocations from `pool`.
    pub fn live_in(&self, pool: u64) -> impl Iterator<Item = u64> + '_ {
        self.live
            .iter()
            .filter(move |(_, (p, _))| *p == pool)
            .map(|(&ptr, _)| ptr)
    }

    /// Attribute `attr` of `pool`, with `reserved` its reserved figure now (counted first); None
    /// for an attribute Marmoset does not keep.
    pub fn figure(&self, pool: u64, attr: c_int, reserved: u64) -> Option<u64> {
        let f = self.pools.get(&pool).copied().unwrap_or_default();
        match attr {
            RESERVED_MEM_CURRENT => Some(reserved),
            RESERVED_MEM_HIGH => Some(f.reserved_high.max(reserved)),
            USED_MEM_CURRENT => Some(f.used),
            USED_MEM_HIGH => Some(f.used_high),
            _ => None,
        }
    }

    /// Sets attribute `attr` of `pool` to `value`, with `reserved` its reserved figure now: a high
    /// mark set to 0 becomes the current figure; any other value, or a current figure, is refused.
    pub fn set(&mut self, pool: u64, attr: c_int, value: u64, reserved: u64) -> Result<(), c_int> {
        if value != 0 {
            return Err(INVALID_VALUE);
        }
        let f = self.pools.entry(pool).or_default();
        match attr {
            RESERVED_MEM_HIGH => {
                f.reserved_high = reserved;
                f.bound = reserved;
            }
            USED_MEM_HIGH => f.used_high = f.used,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }
}

/// Lock order: the manager's, then this one.
static COUNTERS: LazyLock<Mutex<Counters>> = LazyLock::new(|| Mutex::new(Counters::default()));

fn counters() -> MutexGuard<'static, Counters> {
    COUNTERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The device's default pool (0 when the driver has none).
fn default_pool() -> u64 {
    static POOL: AtomicU64 = AtomicU64::new(0);
    let p = POOL.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let mut h: super::driver::P = std::ptr::null_mut();
    if call!(cuDeviceGetDefaultMemPool(&mut h, super::driver::device())).is_err() {
        return 0;
    }
    POOL.store(h as u64, Ordering::Release);
    h as u64
}

/// Device memory held for `ptr` now (see the module documentation); `releasing`: addresses
/// whose copy out or drop is still queued.
fn held(m: &Manager, ptr: u64, releasing: &dyn Fn(u64) -> bool) -> u64 {
    if let Some(&class) = m.small_live.get(&ptr) {
        return class;
    }
    match m.tensors.get(&ptr) {
        Some(t) if matches!(t.place, Place::Resident(_)) || releasing(ptr) => t.mapped,
        _ => 0,
    }
}

fn held_one(m: &Manager, ptr: u64) -> u64 {
    held(m, ptr, &|va| {
        m.releases.iter().any(|r| r.va == va && !r.free_va)
    })
}

/// The reserved figure of `pool` (one walk over its live allocations), `also` counted as held
/// (a tensor being mapped again).
fn reserved(m: &Manager, c: &Counters, pool: u64, also: Option<u64>) -> u64 {
    let releasing: HashSet<u64> = m
        .releases
        .iter()
        .filter(|r| !r.free_va)
        .map(|r| r.va)
        .chain(also)
        .collect();
    c.live_in(pool)
        .map(|ptr| held(m, ptr, &|va| releasing.contains(&va)))
        .sum()
}

/// A stream-ordered allocation Marmoset served: `size` bytes at `ptr` from `pool` (None: the
/// device's current pool).
pub fn allocated(ptr: u64, size: u64, pool: Option<u64>) {
    if ptr == 0 || !super::active() {
        return;
    }
    let pool = pool.unwrap_or_else(default_pool);
    with(|m| {
        let held = held_one(m, ptr);
        let mut c = counters();
        if c.allocated(ptr, pool, size, held) {
            let r = reserved(m, &c, pool, None);
            c.counted(pool, r);
        }
    });
}

/// Before Marmoset frees `ptr` (before, so that the address cannot be given out again first).
pub fn freed(ptr: u64) {
    if ptr == 0 || !super::active() || !counters().live.contains_key(&ptr) {
        return;
    }
    with(|m| {
        let held = held_one(m, ptr);
        counters().freed(ptr, held);
    });
}

/// The manager mapped `bytes` at `va` (a new tensor, or one made resident again).
pub(super) fn mapped(m: &Manager, va: u64, bytes: u64) {
    let mut c = counters();
    if let Some(pool) = c.mapped(va, bytes) {
        let r = reserved(m, &c, pool, Some(va));
        c.counted(pool, r);
    }
}

/// Whether Marmoset answers for `pool`: the default one, or one it served allocations from.
fn ours(c: &Counters, pool: u64) -> bool {
    c.knows(pool) || (pool != 0 && pool == default_pool())
}

/// cudaMemPoolGetAttribute / cuMemPoolGetAttribute: Marmoset's figure (None: the real pool's).
pub fn figure(pool: u64, attr: c_int) -> Option<u64> {
    if !is_figure(attr) || !super::active() {
        return None;
    }
    with(|m| {
        let mut c = counters();
        if !ours(&c, pool) {
            return None;
        }
        let r = reserved(m, &c, pool, None);
        c.counted(pool, r);
        c.figure(pool, attr, r)
    })?
}

/// cudaMemPoolSetAttribute / cuMemPoolSetAttribute of a figure to `value` (None: the real pool's
/// attribute; Some(Err): refused).
pub fn set(pool: u64, attr: c_int, value: u64) -> Option<Result<(), c_int>> {
    if !is_figure(attr) || !super::active() {
        return None;
    }
    with(|m| {
        let mut c = counters();
        if !ours(&c, pool) {
            return None;
        }
        let r = reserved(m, &c, pool, None);
        Some(c.set(pool, attr, value, r))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_is_what_the_program_allocated_in_granules() {
        let mut c = Counters::default();
        c.allocated(0x1000, 7, 1000, 2 << 20);
        c.allocated(0x2000, 7, 4096, 2 << 20);
        c.allocated(0x3000, 9, 1, 512);
        assert_eq!(c.figure(7, USED_MEM_CURRENT, 0), Some(1024 + 4096));
        assert_eq!(c.figure(9, USED_MEM_CURRENT, 0), Some(512));
        c.freed(0x1000, 2 << 20);
        c.freed(0x4000, 0); // not an allocation of the stream-ordered path
        assert_eq!(c.figure(7, USED_MEM_CURRENT, 0), Some(4096));
        assert_eq!(c.figure(7, USED_MEM_HIGH, 0), Some(1024 + 4096));
        assert!(c.knows(9) && !c.knows(8));
        let mut live: Vec<u64> = c.live_in(7).collect();
        live.sort();
        assert_eq!(live, [0x2000]);
    }

    #[test]
    fn a_high_mark_reset_to_zero_becomes_the_current_figure() {
        let mut c = Counters::default();
        c.allocated(0x1000, 7, 3 << 20, 4 << 20);
        c.counted(7, 4 << 20);
        c.allocated(0x2000, 7, 1 << 20, 2 << 20);
        c.counted(7, 6 << 20);
        c.freed(0x1000, 4 << 20);
        c.counted(7, 2 << 20);
        assert_eq!(c.figure(7, USED_MEM_HIGH, 2 << 20), Some(4 << 20));
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 2 << 20), Some(6 << 20));
        assert_eq!(c.set(7, USED_MEM_HIGH, 1, 0), Err(INVALID_VALUE));
        assert_eq!(c.set(7, USED_MEM_CURRENT, 0, 0), Err(INVALID_VALUE));
        assert_eq!(c.set(7, RESERVED_MEM_CURRENT, 0, 0), Err(INVALID_VALUE));
        c.set(7, USED_MEM_HIGH, 0, 2 << 20).unwrap();
        assert_eq!(c.figure(7, USED_MEM_HIGH, 2 << 20), Some(1 << 20));
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 2 << 20), Some(6 << 20));
        c.set(7, RESERVED_MEM_HIGH, 0, 2 << 20).unwrap();
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 2 << 20), Some(2 << 20));
        // After a reset the marks rise again with the figures.
        c.allocated(0x3000, 7, 8 << 20, 8 << 20);
        assert_eq!(c.figure(7, USED_MEM_HIGH, 10 << 20), Some(9 << 20));
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 10 << 20), Some(10 << 20));
    }

    #[test]
    fn the_reserved_figure_is_counted_only_past_its_high_mark() {
        let mut c = Counters::default();
        // Growing: every allocation passes the mark.
        assert!(c.allocated(0x1000, 7, 2 << 20, 2 << 20));
        c.counted(7, 2 << 20);
        assert!(c.allocated(0x2000, 7, 2 << 20, 2 << 20));
        c.counted(7, 4 << 20);
        // 0x1000 evicted (unseen), 0x3000 made in its place: the bound (6) passes the mark (4),
        // the exact figure (4) is counted and the mark stays.
        assert!(c.allocated(0x3000, 7, 2 << 20, 2 << 20));
        c.counted(7, 4 << 20);
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 4 << 20), Some(4 << 20));
        // A free and an allocation of the same size stay below the mark: no count.
        c.freed(0x3000, 2 << 20);
        assert!(!c.allocated(0x4000, 7, 2 << 20, 2 << 20));
        // 0x1000 mapped again while 0x2000's copy out is still running: past the mark.
        assert_eq!(c.mapped(0x1000, 2 << 20), Some(7));
        assert_eq!(c.mapped(0x9000, 2 << 20), None);
        c.counted(7, 6 << 20);
        assert_eq!(c.figure(7, RESERVED_MEM_HIGH, 4 << 20), Some(6 << 20));
        // The used figure never depended on where the bytes are.
        assert_eq!(c.figure(7, USED_MEM_CURRENT, 4 << 20), Some(6 << 20));
    }
}
