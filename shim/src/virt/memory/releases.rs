//! The release queue: memory leaves a tensor (an eviction's copy out, a drop, a free) once the
//! work issued before it is done, by event, and the host waits only when memory is short, and
//! then for the earliest release alone (Capuchin's decoupled computation and swapping).

use super::Manager;
use super::driver::*;
use crate::ffi::call;
use planner::trace::Event;

/// A release waiting for the work issued before it to finish.
pub(super) struct Pending {
    pub(super) event: usize,
    pub(super) va: u64,
    pub(super) mapped: u64,
    pub(super) phys: u64,
    /// Keep the reservation (an eviction, a drop) or free it too (a free).
    pub(super) free_va: bool,
    /// An eviction's copy out: its start event, allocation and bytes, for the `evict` record
    /// written once the copy is done.
    pub(super) copy: Option<(usize, u64, u64)>,
}

impl Manager {
    /// Finishes releases whose work is done (all of them when `wait`).
    pub(super) fn reclaim(&mut self, wait: bool) {
        let mut left = Vec::new();
        for r in std::mem::take(&mut self.releases) {
            if wait {
                sync_event(r.event);
            } else if !done(r.event) {
                left.push(r);
                continue;
            }
            self.finish(r);
        }
        self.releases = left;
        let mut busy = Vec::new();
        for (e, buf, size) in std::mem::take(&mut self.host_busy) {
            if wait || done(e) {
                if wait {
                    sync_event(e);
                }
                destroy_event(e);
                self.host_free.entry(size).or_default().push(buf);
            } else {
                busy.push((e, buf, size));
            }
        }
        self.host_busy = busy;
    }

    /// Waits for the earliest unfinished release only, among those with a copy out or those
    /// without (false: none left).
    pub(super) fn reclaim_earliest(&mut self, copy: bool) -> bool {
        let Some(i) = self.releases.iter().position(|r| r.copy.is_some() == copy) else {
            return false;
        };
        let r = self.releases.remove(i);
        sync_event(r.event);
        self.finish(r);
        true
    }

    /// A release whose work is done: the memory goes (and the `evict` record of a copy out).
    pub(super) fn finish(&mut self, r: Pending) {
        if let Some((start, alloc, bytes)) = r.copy {
            let mut ms = 0f32;
            let _ = call!(cuEventElapsedTime(&mut ms, start as P, r.event as P));
            destroy_event(start);
            crate::core::bus::emit(Event::Evict {
                alloc,
                bytes,
                stream: self.swap_out as u64,
                device_ms: ms as f64,
            });
        }
        destroy_event(r.event);
        let _ = call!(cuMemUnmap(r.va, r.mapped as usize));
        let _ = call!(cuMemRelease(r.phys));
        if r.free_va {
            let _ = call!(cuMemAddressFree(r.va, r.mapped as usize));
        }
        self.used -= r.mapped;
        self.releasing -= r.mapped;
    }

    /// Queues the release of `va`'s memory after `event` (recorded after its last uses).
    pub(super) fn release_after(
        &mut self,
        event: usize,
        va: u64,
        mapped: u64,
        phys: u64,
        copy: Option<(usize, u64, u64)>,
    ) {
        self.releasing += mapped;
        self.releases.push(Pending {
            event,
            va,
            mapped,
            phys,
            free_va: false,
            copy,
        });
    }

    /// Takes back the memory of `va` while its release is still queued (the tensor is wanted
    /// again before its copy out or drop finished): (physical handle, the release's event and
    /// copy), or None when no release of it is queued.
    pub(super) fn cancel_release(&mut self, va: u64) -> Option<Pending> {
        let i = self
            .releases
            .iter()
            .position(|r| r.va == va && !r.free_va)?;
        let r = self.releases.remove(i);
        self.releasing -= r.mapped;
        Some(r)
    }
}
