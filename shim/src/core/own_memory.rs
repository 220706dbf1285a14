//! Device memory for Marmoset's own buffers (μ-cuDNN's scratch buffers and shared workspace).
//! Under a memory policy they count in the budget like the program's: the allocator attached at
//! start-up (memory virtualisation's) serves them while it manages memory. The layers that need
//! such buffers ask here, and never name the allocator.

use std::ffi::c_int;
use std::sync::OnceLock;

/// An allocator of Marmoset's own buffers.
pub struct Allocator {
    /// Whether it serves them now.
    pub serves: fn() -> bool,
    /// `bytes` of device memory; None when it cannot give them.
    pub alloc: fn(usize) -> Option<u64>,
    /// Frees an address it gave; None when the address is not its own.
    pub free: fn(u64) -> Option<c_int>,
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
