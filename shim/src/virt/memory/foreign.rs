//! Device memory a library maps itself with the driver's VMM calls (`cuMemCreate`): NCCL's
//! communication buffers, made when a communicator is. Marmoset leaves it alone (it never moves
//! or frees it) and counts it against the budget while it lives, as it counts what the process
//! held before it took over: made before Marmoset's first allocation, it is part of that; made
//! after, it is counted here. Each new amount is said at info.

use super::manager;
use crate::core::config::Level;
use crate::core::state::log;

/// `cuMemCreate` made `handle` of `bytes` outside Marmoset's allocator.
pub fn created(handle: u64, bytes: u64) {
    if !super::active() {
        return;
    }
    let Some(mut g) = manager() else { return };
    // No allocator yet: the memory is in what the process holds when it is made.
    let Some(m) = g.as_mut() else { return };
    if m.foreign.insert(handle, bytes).is_none() {
        m.used += bytes;
        m.foreign_bytes += bytes;
        log(
            Level::Info,
            &format!(
                "memory: {bytes} B mapped by a library with the driver's VMM calls (NCCL's buffers, for one): left alone, counted against the budget ({} B such in all)",
                m.foreign_bytes
            ),
        );
    }
}

/// `cuMemRelease` released `handle`: if it was counted, it is no longer.
pub fn released(handle: u64) {
    let Some(mut g) = manager() else { return };
    let Some(m) = g.as_mut() else { return };
    if let Some(bytes) = m.foreign.remove(&handle) {
        m.used = m.used.saturating_sub(bytes);
        m.foreign_bytes -= bytes;
    }
}
