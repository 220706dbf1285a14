//! Measuring the host link before any eviction has: one timed copy to pinned host memory, as an
//! eviction's copy out is made (same stream, same kind of host buffer), of a resident tensor's
//! leading bytes. A plan made from the speed of another link misplaces every eviction: a
//! plan for a 25 GB/s link on a 12 GB/s one waits twice as long for each copy.

use super::driver::*;
use super::{Manager, Place, with};
use crate::core::config::Level;
use crate::core::state::log;
use crate::ffi::call;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest copy the measurement makes: enough for a copy's fixed cost to be a small part.
const MOST: u64 = 64 << 20;
/// The smallest: below it, a copy's fixed cost would be most of what is measured.
const LEAST: u64 = 4 << 20;

impl Manager {
    fn measure_link(&mut self) -> Option<(u64, f64)> {
        let (&va, t) = self
            .tensors
            .iter()
            .filter(|(_, t)| matches!(t.place, Place::Resident(_)) && !t.internal)
            .max_by_key(|(va, t)| (t.size, std::cmp::Reverse(**va)))?;
        let bytes = t.size.min(MOST);
        if bytes < LEAST {
            return None;
        }
        let buf = self.host_buffer(bytes)?;
        let (Some(start), Some(end)) = (event_flags(0), event_flags(0)) else {
            self.host_free.entry(bytes).or_default().push(buf);
            return None;
        };
        // Only a read of the tensor, behind nothing of its own: its bytes stay as they are,
        // and its memory stays mapped while the manager's lock is held, until the copy ends.
        let copied = record(start, self.swap_out as u64)
            .and_then(|()| {
                call!(cuMemcpyDtoHAsync_v2(
                    buf as P,
                    va,
                    bytes as usize,
                    self.swap_out as P
                ))
            })
            .and_then(|()| record(end, self.swap_out as u64));
        let mut ms = 0f32;
        let timed = copied.is_ok() && {
            sync_event(end);
            call!(cuEventElapsedTime(&mut ms, start as P, end as P)).is_ok()
        };
        if copied.is_err() {
            sync_event(start);
        }
        destroy_event(start);
        destroy_event(end);
        self.host_free.entry(bytes).or_default().push(buf);
        (timed && ms > 0.0).then_some((bytes, ms as f64 * 1e-3))
    }

    /// Measures the link once (see [`measure_once`]), with the manager's lock held: the first
    /// time memory is short, before the online policy weighs a copy against a rebuild.
    pub(super) fn link_known(&mut self) {
        if self.link_tried {
            return;
        }
        self.link_tried = true;
        let Some((bytes, secs)) = self.measure_link() else {
            return;
        };
        let bps = bytes as f64 / secs;
        MEASURED.store(bps.to_bits(), Ordering::Relaxed);
        log(
            Level::Info,
            &format!(
                "memory: the host link measured by a copy of {bytes} B to the host: {:.3} ms on the device, {:.1} GB/s",
                secs * 1e3,
                bps / 1e9
            ),
        );
    }
}

/// The link's speed by one timed copy, measured once (the first call that finds a resident
/// tensor of 4 MiB): up to 64 MiB of the largest resident tensor copied to pinned host memory
/// on the swap-out stream, timed on the device. The host waits for that copy (and any still
/// queued before it on that stream). Never call it with the manager's lock held.
pub fn measure_once() {
    if super::active() {
        with(Manager::link_known);
    }
}

/// What the copy measured (bytes per second), if one has.
pub fn measured() -> Option<f64> {
    let bps = f64::from_bits(MEASURED.load(Ordering::Relaxed));
    (bps > 0.0).then_some(bps)
}

/// Written under the manager's lock, read without it (the online policy answers the
/// allocator while it holds that lock).
static MEASURED: AtomicU64 = AtomicU64::new(0);
