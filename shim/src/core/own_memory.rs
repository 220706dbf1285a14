//! Device memory for Marmoset's own buffers (μ-cuDNN's scratch buffers, shared workspace, and
//! the joint plan's workspaces, lent from spare memory).
//! Under a memory policy they count in the budget like the program's: the allocator attached at
//! start-up (memory virtualisation's) serves them while it manages memory. The layers that need
//! such buffers ask here, and never name the allocator.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// An allocator of Marmoset's own buffers.
pub struct Allocator {
    /// Whether it serves them now.
    pub serves: fn() -> bool,
    /// `bytes` of device memory; None when it cannot give them.
    pub alloc: fn(usize) -> Option<u64>,
    /// Frees an address it gave; None when the address is not its own.
    pub free: fn(u64) -> Option<c_int>,
    /// The bytes free within the budget now.
    pub spare: fn() -> Option<u64>,
    /// The budget for the program's memory.
    pub budget: fn() -> Option<u64>,
    /// A loan of `bytes` from spare memory (or made room for, when the flag says so); the
    /// allocator takes it back when it needs room and no use pins it.
    pub lend: fn(usize, bool) -> Option<u64>,
    /// Pins a loan of at least the bytes for a use issued on the stream; false when it was
    /// taken back.
    pub pin: fn(u64, u64, u64) -> bool,
    /// Ends a pin once the use is issued.
    pub unpin: fn(u64),
}

static ALLOCATOR: OnceLock<Allocator> = OnceLock::new();

/// Attaches the allocator, once at start-up.
pub fn attach(a: Allocator) {
    let _ = ALLOCATOR.set(a);
}

/// `bytes` from the attached allocator while it serves: Some(None) when it cannot give them;
/// None when it does not serve (the caller uses the device's own allocation).
pub fn alloc(bytes: usize) -> Option<Option<u64>> {
    let a = ALLOCATOR.get()?;
    (a.serves)().then(|| (a.alloc)(bytes))
}

/// Frees `ptr` through the attached allocator: false when it is not the allocator's.
pub fn free(ptr: u64) -> bool {
    ALLOCATOR.get().is_some_and(|a| (a.free)(ptr).is_some())
}

/// The bytes free within the budget now, while the attached allocator serves.
pub fn spare() -> Option<u64> {
    let a = ALLOCATOR.get()?;
    if !(a.serves)() {
        return None;
    }
    (a.spare)()
}

/// The budget for the program's memory, while the attached allocator serves.
pub fn budget() -> Option<u64> {
    let a = ALLOCATOR.get()?;
    if !(a.serves)() {
        return None;
    }
    (a.budget)()
}

/// What the guiding plan leaves room to lend one convolution's workspace (the joint plan's
/// cap, `planner::memory::joint`), in bytes; `u64::MAX`: no plan chose one.
static LEND_CAP: AtomicU64 = AtomicU64::new(u64::MAX);

/// The guiding plan's cap on a convolution's lent workspace (None: no plan guides, or it
/// chose none).
pub fn set_lend_cap(cap: Option<u64>) {
    LEND_CAP.store(cap.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// See [`set_lend_cap`].
pub fn lend_cap() -> Option<u64> {
    Some(LEND_CAP.load(Ordering::Relaxed)).filter(|&c| c != u64::MAX)
}

/// A loan of `bytes` (see [`Allocator::lend`]); None when the allocator does not serve or
/// cannot lend them.
pub fn lend(bytes: usize, make_room: bool) -> Option<u64> {
    let a = ALLOCATOR.get()?;
    if !(a.serves)() {
        return None;
    }
    (a.lend)(bytes, make_room)
}

/// A loan pinned for one use on `stream`, unpinned when dropped (once the use is issued).
pub struct Pinned(u64);

impl Pinned {
    /// Pins the loan of `bytes` at `ptr`; None when it was taken back.
    pub fn new(ptr: u64, bytes: u64, stream: u64) -> Option<Pinned> {
        let a = ALLOCATOR.get()?;
        (a.pin)(ptr, bytes, stream).then_some(Pinned(ptr))
    }

    pub fn ptr(&self) -> u64 {
        self.0
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(a) = ALLOCATOR.get() {
            (a.unpin)(self.0);
        }
    }
}
