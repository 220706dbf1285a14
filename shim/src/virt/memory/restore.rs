//! Restores: a tensor wanted by an operation is brought back before it runs (its memory mapped
//! again and its bytes copied in on the swap-in stream, the operation's stream waiting by
//! event), kept where its copy out has not finished, or mapped fresh where the operation
//! overwrites it whole.

use super::driver::*;
use super::hold::oom;
use super::{Arriving, Manager, Place, alloc_of};
use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::call;
use planner::trace::Event;
use std::collections::HashSet;
use std::ffi::c_int;

impl Manager {
    /// Maps a tensor's memory again and copies its bytes in from `buf` on the swap-in stream;
    /// (physical handle, event after the copy). On failure nothing is left mapped.
    pub(super) fn copy_in(
        &mut self,
        va: u64,
        buf: usize,
        size: u64,
        mapped: u64,
    ) -> Result<(u64, usize), c_int> {
        let phys = self.map(va, mapped)?;
        let unmap = |m: &mut Manager| {
            let _ = call!(cuMemUnmap(va, mapped as usize));
            let _ = call!(cuMemRelease(phys));
            m.used -= mapped;
        };
        let Some(e) = event() else {
            unmap(self);
            return Err(1);
        };
        // The copy in waits for nothing of the program's; the operation waits for the copy.
        let copy = call!(cuMemcpyHtoDAsync_v2(
            va,
            buf as P,
            size as usize,
            self.swap_in as P
        ));
        if let Err(code) = copy {
            destroy_event(e);
            unmap(self);
            return Err(code);
        }
        let _ = record(e, self.swap_in as u64);
        Ok((phys, e))
    }

    /// A tensor wanted back while its copy out or drop is still queued keeps its memory, bytes
    /// and all (true); nothing is copied in, and its host buffer is free once the copy is.
    pub(super) fn take_back(&mut self, va: u64) -> bool {
        let Some(r) = self.cancel_release(va) else {
            return false;
        };
        let Some(t) = self.tensors.get_mut(&va) else {
            return false;
        };
        let (size, buf) = match t.place {
            Place::Evicted(b) => (t.size, Some(b)),
            _ => (t.size, None),
        };
        t.place = Place::Resident(r.phys);
        if let Some((start, _, _)) = r.copy {
            destroy_event(start);
        }
        match buf {
            Some(b) => self.host_busy.push((r.event, b, size)),
            None => destroy_event(r.event),
        }
        true
    }

    /// Makes the tensors at `vas` resident before an operation on `stream`; with each, whether
    /// the operation needs what it held (false: it overwrites it whole, or uses it as scratch).
    pub(super) fn ensure(&mut self, vas: &[(u64, bool)], stream: u64) -> Result<(), c_int> {
        self.clock += 1;
        let protect: HashSet<u64> = vas.iter().map(|v| v.0).collect();
        for &(va, reads) in vas {
            let Some(t) = self.tensors.get_mut(&va) else {
                continue;
            };
            if let Some(e) = t.arrival.take() {
                // Prefetched: the operation's stream waits for the copy in, by event.
                if done(e) {
                    self.cramped.remove(&va);
                    destroy_event(e);
                } else {
                    // The host runs ahead of the device: whether the operation will wait is
                    // for the stream's clock to say, where it reaches the wait.
                    let reached = event_flags(0).filter(|&r| {
                        let ok = record(r, stream).is_ok();
                        if !ok {
                            destroy_event(r);
                        }
                        ok
                    });
                    let _ = call!(cuStreamWaitEvent(stream as P, e as P, 0));
                    self.arriving.push(Arriving {
                        va,
                        alloc: alloc_of(va),
                        arrival: e,
                        reached,
                    });
                }
            }
            let Some(t) = self.tensors.get(&va) else {
                continue;
            };
            let (size, mapped) = (t.size, t.mapped);
            let buf = match t.place {
                Place::Resident(_) => continue,
                Place::Evicted(b) => Some(b),
                Place::Empty { .. } => None,
            };
            let dropped = matches!(t.place, Place::Empty { dropped: true });
            // Wanted back before its copy out or drop finished: it keeps its memory, bytes and all.
            if self.take_back(va) {
                continue;
            }
            if let Err(why) = self.make_room(mapped, &protect) {
                oom(
                    self,
                    Level::Error,
                    format!("memory: out of memory for an operation: {why}"),
                );
                return Err(OUT_OF_MEMORY);
            }
            let Some(buf) = buf.filter(|_| reads) else {
                // Nothing to copy in: never written, dead, or about to be overwritten whole.
                if dropped
                    && reads
                    && !super::online().is_some_and(|o| (o.is_dropped)(alloc_of(va)))
                {
                    log(
                        Level::Error,
                        &format!(
                            "memory: allocation {} ({size} B) is read, but its contents were dropped as dead (the plan expected an overwrite): they are lost",
                            alloc_of(va)
                        ),
                    );
                }
                let phys = self.map(va, mapped).inspect_err(|&code| {
                    log(
                        Level::Warn,
                        &format!(
                            "memory: mapping allocation {} ({size} B) failed with {}",
                            alloc_of(va),
                            error_name(code)
                        ),
                    );
                })?;
                if let Some(t) = self.tensors.get_mut(&va) {
                    if let Place::Evicted(b) = t.place {
                        self.host_free.entry(size).or_default().push(b);
                    }
                    t.place = Place::Resident(phys);
                }
                continue;
            };
            self.restores += 1;
            if config().test_skip_restore == Some(self.restores) {
                log(
                    Level::Warn,
                    &format!(
                        "memory: skipping restore #{} (MARMOSET_TEST_SKIP_RESTORE)",
                        self.restores
                    ),
                );
                continue;
            }
            let timing = crate::sinks::timing::begin(self.swap_in as u64);
            // A failed copy leaves the bytes on the host (the tensor stays evicted): one more
            // try, then the operation fails with the driver's error, said once.
            let (phys, e) = match self.copy_in(va, buf, size, mapped) {
                Ok(r) => r,
                Err(first) => {
                    log(
                        Level::Info,
                        &format!(
                            "memory: restoring allocation {} ({size} B at {va:#x}) failed with {}; trying once more",
                            alloc_of(va),
                            error_name(first)
                        ),
                    );
                    match self.copy_in(va, buf, size, mapped) {
                        Ok(r) => r,
                        Err(code) => {
                            log(
                                Level::Warn,
                                &format!(
                                    "memory: restoring allocation {} ({size} B at {va:#x}) failed twice, with {}; its bytes stay on the host and the operation fails",
                                    alloc_of(va),
                                    error_name(code)
                                ),
                            );
                            return Err(code);
                        }
                    }
                }
            };
            let _ = call!(cuStreamWaitEvent(stream as P, e as P, 0));
            self.host_busy.push((e, buf, size));
            if let Some(t) = self.tensors.get_mut(&va) {
                t.place = Place::Resident(phys);
            }
            let seq = crate::core::bus::next_seq();
            if let Some(start) = timing {
                crate::sinks::timing::end(seq, self.swap_in as u64, start, false);
            }
            crate::core::bus::publish(
                seq,
                Event::Restore {
                    alloc: alloc_of(va),
                    bytes: size,
                    stream: self.swap_in as u64,
                },
            );
        }
        for &(va, _) in vas {
            if let Some(t) = self.tensors.get_mut(&va) {
                t.last_use = self.clock;
                t.streams.insert(stream);
                t.dead = false;
                t.keep = false;
            }
        }
        Ok(())
    }
}
