//! Guided execution's moves (Capuchin §4.2), on the allocator: the eviction right after the
//! evicted-access, the prefetch at the in-trigger, and the drop of contents the plan knows are
//! dead (the next access overwrites them whole). Each only ever costs time: what fails leaves
//! the tensor where it is, and the passive mechanism brings anything back before it is used.

use super::driver::*;
use super::{Manager, Place, active, alloc_of, with};
use crate::core::config::Level;
use crate::core::state::log;
use crate::ffi::call;
use planner::trace::Event;
use std::collections::HashSet;
use std::ffi::c_int;

impl Manager {
    /// The plan says the contents are dead from here to their next (whole) overwrite: a
    /// resident tensor is released first when room is needed, without a copy (`keep` false:
    /// the contents can be rebuilt by recomputation), or copied out like any eviction (`keep`:
    /// the plan's word is a prediction, and a program that leaves the planned sequence may read
    /// them); an evicted one's host copy goes now unless kept.
    fn mark_dead(&mut self, va: u64, keep: bool) {
        let queued = self.releases.iter().any(|r| r.va == va);
        let Some(t) = self.tensors.get_mut(&va) else {
            return;
        };
        if t.internal {
            return;
        }
        match t.place {
            Place::Resident(_) => {
                t.dead = true;
                t.keep = keep;
            }
            Place::Evicted(b) if !queued => {
                // The host copy goes, guarded where the contents can be rebuilt (as a release
                // of resident dead contents is), kept otherwise once the program left a plan.
                let guarded = self.guard(va);
                if !guarded && keep {
                    return;
                }
                let Some(t) = self.tensors.get_mut(&va) else {
                    return;
                };
                t.place = Place::Empty { dropped: true };
                let size = t.size;
                self.host_free.entry(size).or_default().push(b);
                if !guarded && let Some(o) = super::online() {
                    (o.lost)(alloc_of(va));
                }
                crate::core::bus::emit(Event::Drop {
                    alloc: alloc_of(va),
                    bytes: size,
                });
            }
            _ => {}
        }
    }

    /// Guided execution's eviction after the evicted-access: Ok when the tensor left.
    fn evict_planned(&mut self, va: u64) -> Result<(), c_int> {
        match self.tensors.get(&va) {
            // A call of another thread that touches it is being issued: it stays (see `hold`).
            Some(t) if !t.internal && t.pins == 0 && matches!(t.place, Place::Resident(_)) => {
                self.evict(va)
            }
            _ => Err(1),
        }
    }

    /// Guided execution's prefetch at the in-trigger, a call on stream `at`: the copy in starts
    /// on the swap-in stream once `at` has reached the call, and the back-access waits for it
    /// by event. Room is made as for a restore (least recently
    /// used first, never the tensors in `protect`); on any failure the tensor stays evicted and
    /// the back-access restores it on demand.
    fn prefetch(&mut self, va: u64, protect: &HashSet<u64>, at: u64) -> Result<(), c_int> {
        // Already resident (never evicted, or brought back on demand): nothing to do.
        let Some(t) = self.tensors.get(&va) else {
            return Ok(());
        };
        let Place::Evicted(buf) = t.place else {
            return Ok(());
        };
        let (size, mapped) = (t.size, t.mapped);
        // Its copy out still under way: it keeps its memory, nothing to copy in.
        if self.take_back(va) {
            return Ok(());
        }
        let mut keep = protect.clone();
        keep.insert(va);
        let short = self.used + mapped > self.budget;
        self.make_room(mapped, &keep).map_err(|_| OUT_OF_MEMORY)?;
        if short {
            self.cramped.insert(va);
        }
        // The copy starts when the in-trigger's stream reaches the in-trigger, where the plan's
        // timeline starts it, not when the host, running ahead of the device, gets there.
        wait_for(self.swap_in, &HashSet::from([at]));
        let (phys, e) = self.copy_in(va, buf, size, mapped)?;
        // Timed: the feedback compares it with where the back-access's stream reached it.
        let arrival = event_flags(0).inspect(|&a| {
            let _ = record(a, self.swap_in as u64);
        });
        self.host_busy.push((e, buf, size));
        let Some(arrival) = arrival else {
            // No event to wait on: wait for the copy here rather than risk a race.
            sync_event(e);
            if let Some(t) = self.tensors.get_mut(&va) {
                t.place = Place::Resident(phys);
            }
            return Ok(());
        };
        if let Some(t) = self.tensors.get_mut(&va) {
            t.place = Place::Resident(phys);
            t.arrival = Some(arrival);
        }
        crate::core::bus::emit(Event::Restore {
            alloc: alloc_of(va),
            bytes: size,
            stream: self.swap_in as u64,
        });
        Ok(())
    }
}

/// Evicts allocation `id` now (guided execution, after its evicted-access).
pub fn evict_planned(id: u64) -> bool {
    if !active() {
        return false;
    }
    let Some((va, _)) = crate::core::registry::allocation(id) else {
        return false;
    };
    with(|m| m.evict_planned(va).is_ok()).unwrap_or(false)
}

/// Keeps allocation `id` where its eviction is still queued (its copy out under way, or done
/// but its memory not yet released): true when it did, and nothing needs copying in. At an
/// in-trigger this comes before making room for the other prefetches, which could otherwise
/// wait for that very copy, release the memory and have to copy the bytes back in (the
/// planner's timeline keeps a tensor whose swap-in starts before its swap-out ended resident).
pub fn take_back(id: u64) -> bool {
    if !active() {
        return false;
    }
    let Some((va, _)) = crate::core::registry::allocation(id) else {
        return false;
    };
    with(|m| m.take_back(va)).unwrap_or(false)
}

/// Starts bringing allocation `id` back (guided execution, at its in-trigger, a call on stream
/// `at`), never evicting the allocations in `protect` to make room.
pub fn prefetch(id: u64, protect: &[u64], at: u64) -> bool {
    if !active() {
        return false;
    }
    let Some((va, _)) = crate::core::registry::allocation(id) else {
        return false;
    };
    let keep: HashSet<u64> = protect
        .iter()
        .filter_map(|&a| crate::core::registry::allocation(a).map(|x| x.0))
        .collect();
    match with(|m| m.prefetch(va, &keep, at)) {
        Some(Ok(())) => true,
        Some(Err(code)) => {
            log(
                Level::Warn,
                &format!(
                    "memory: prefetching allocation {id} failed ({}); it comes back on demand",
                    error_name(code)
                ),
            );
            false
        }
        None => false,
    }
}

/// Marks allocation `id`'s contents dead (guided execution, after their last read).
pub fn mark_dead(id: u64) {
    if !active() {
        return;
    }
    // What the online policy dropped and rebuilds from these contents is rebuilt first.
    if let Some(o) = super::online() {
        (o.before_loss)(id, 0);
    }
    if let Some((va, _)) = crate::core::registry::allocation(id) {
        with(|m| m.mark_dead(va, false));
    }
}

/// Contents marked dead by a prediction and not yet released are kept: released with a copy
/// if their memory goes (the program left the plan that predicted their death).
pub fn keep_dead() {
    if !active() {
        return;
    }
    with(|m| {
        for t in m.tensors.values_mut() {
            if t.dead {
                t.keep = true;
            }
        }
    });
}

/// Allocation `id`'s contents are dead by the plan's prediction (its next access overwrites
/// them whole), but no recomputation can rebuild them: a victim first, its bytes copied out
/// all the same, so that a program that leaves the plan loses nothing.
pub fn mark_dead_kept(id: u64) {
    if !active() {
        return;
    }
    if let Some((va, _)) = crate::core::registry::allocation(id) {
        with(|m| m.mark_dead(va, true));
    }
}

/// Keeps allocation `id`'s contents, dropped for recomputation, if they are still anywhere
/// (true): resident and only marked dead, their release still queued, or on the host. False when
/// they are gone and a recomputation must rebuild them before they are read. A collective
/// recomputation keeps its sources so: marked dead, the room its later steps make would
/// release them first.
pub fn revive(id: u64) -> bool {
    if !active() {
        return false;
    }
    let Some((va, _)) = crate::core::registry::allocation(id) else {
        return false;
    };
    with(|m| {
        let kept = m.take_back(va);
        match m.tensors.get_mut(&va) {
            Some(t) if kept || !matches!(t.place, Place::Empty { dropped: true }) => {
                t.dead = false;
                true
            }
            _ => false,
        }
    })
    .unwrap_or(false)
}

/// MARMOSET_VERIFY: allocation `id`'s bytes now (the device idle first), wherever they are:
/// on the device, or on the host once evicted; None when they are nowhere (dropped).
pub fn snapshot(id: u64) -> Option<Vec<u8>> {
    if !active() {
        return None;
    }
    let (va, size) = crate::core::registry::allocation(id)?;
    with(|m| m.snapshot(va, size)).flatten()
}

impl Manager {
    /// The bytes of the tensor at `va` (`size` of them) now, the device idle first; None when
    /// they are nowhere (dropped).
    pub(super) fn snapshot(&mut self, va: u64, size: u64) -> Option<Vec<u8>> {
        let _ = call!(cuCtxSynchronize());
        self.reclaim(true);
        let t = self.tensors.get(&va)?;
        let mut buf = vec![0u8; size as usize];
        match t.place {
            Place::Resident(_) => {
                call!(cuMemcpyDtoH_v2(buf.as_mut_ptr() as P, va, size as usize)).ok()?
            }
            // SAFETY: the pinned host buffer holds the tensor's `size` bytes, its copy out done.
            Place::Evicted(h) => unsafe {
                std::ptr::copy_nonoverlapping(h as *const u8, buf.as_mut_ptr(), size as usize)
            },
            Place::Empty { .. } => return None,
        }
        Some(buf)
    }
}

/// MARMOSET_VERIFY: whether allocation `id` holds `expected` now; when it does not, `expected`
/// is written back (the program never sees the wrong bytes).
pub fn matches_or_restore(id: u64, expected: &[u8]) -> bool {
    let Some(now) = snapshot(id) else {
        return true;
    };
    if now == expected {
        return true;
    }
    if let Some((va, _)) = crate::core::registry::allocation(id) {
        let _ = call!(cuMemcpyHtoD_v2(va, expected.as_ptr() as P, expected.len()));
    }
    false
}

/// Whether a plan guides the iteration under way (the executor says so: this module does not
/// reach the executor).
static GUIDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_guided(on: bool) {
    GUIDED.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub(super) fn guided() -> bool {
    GUIDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The most memory a call needed beyond what the guiding plan left it, since the last take:
/// live tensors the plan keeps had to leave for it.
static UNPLANNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(super) fn unplanned(bytes: u64) {
    UNPLANNED.fetch_max(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// The most memory a call needed beyond what the guiding plan left it since the last take (0:
/// the plan's memory held), and starts again.
pub fn take_unplanned() -> u64 {
    UNPLANNED.swap(0, std::sync::atomic::Ordering::Relaxed)
}

/// The allocations whose prefetch arrived late (guided execution's feedback), by the device's
/// clock: the copy in done after the operation's stream reached its wait. The host, running
/// ahead, often issues the operation before a prefetch that will be in time has arrived; a
/// prefetch whose events the device has not reached yet is judged at a later call. Left out:
/// those whose prefetch had to make room at its in-trigger: moved a call earlier, such a
/// prefetch evicts what the plan keeps there (the trainer at 0.3 of its peak, simulated P100,
/// `capuchin`: a 512 MiB prefetch moved one call earlier made the allocator evict and restore
/// an activation every iteration, 261.4 ms against 129.9 predicted).
pub fn take_late() -> Vec<u64> {
    if !active() {
        return Vec::new();
    }
    with(|m| {
        let mut late = Vec::new();
        for a in std::mem::take(&mut m.arriving) {
            // No event where the stream reached the wait: late, as the host saw it.
            let waited = match a.reached {
                Some(r) => match finished_after(a.arrival, r) {
                    Some(w) => w,
                    None => {
                        m.arriving.push(a);
                        continue;
                    }
                },
                None => true,
            };
            destroy_event(a.arrival);
            if let Some(r) = a.reached {
                destroy_event(r);
            }
            let cramped = m.cramped.remove(&a.va);
            if waited && !cramped {
                late.push(a.alloc);
            }
        }
        late
    })
    .unwrap_or_default()
}
