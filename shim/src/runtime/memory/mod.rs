//! Tensor memory virtualisation: Marmoset's own allocator and the passive (on-demand) policy,
//! `MARMOSET_POLICY=lru`.
//!
//! Allocations of at least `MARMOSET_MIN_TENSOR` get a reserved virtual range backed by physical
//! memory through the driver's VMM calls, so the backing can be unmapped and mapped again at the
//! same address; smaller ones come from a pool that is never evicted. The budget
//! (`MARMOSET_MEMORY_LIMIT`) counts everything Marmoset maps, and `cudaMemGetInfo` /
//! `cuMemGetInfo_v2` report it as the device's total.
//!
//! Before an operation runs, every tensor it touches is resident: an evicted one is brought back
//! (physical memory mapped again, bytes copied in from host on the swap-in stream, the
//! operation's stream waiting on it by event). When an allocation or a restore would exceed the
//! budget, victims not touched by the current operation are evicted, least recently used first:
//! an asynchronous copy to pinned host memory on the swap-out stream after the victim's last
//! uses (events on each stream that used it), the physical memory unmapped once that copy is
//! done. A failed eviction copy leaves the tensor resident and intact. A free of an evicted tensor
//! drops its host copy; a free of a resident one releases it once the work issued before on its
//! streams is done (no device-wide synchronisation).

mod driver;

use crate::config::Level;
use crate::state::{config, log};
use driver::*;
use planner::trace::{Event, Touch};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
enum Place {
    /// Mapped, with its physical allocation handle.
    Resident(u64),
    /// Unmapped; its bytes are in this pinned host buffer.
    Evicted(usize),
}

#[derive(Debug)]
struct Tensor {
    size: u64,
    mapped: u64,
    place: Place,
    last_use: u64,
    /// Streams that used it since it was last made resident.
    streams: HashSet<u64>,
    /// Marmoset's own buffers (workspaces) are never evicted.
    internal: bool,
    /// A prefetch's copy in (guided execution): the next operation that touches the tensor
    /// waits for this event, not the host.
    arrival: Option<usize>,
}

/// A release waiting for the work issued before it to finish.
struct Pending {
    event: usize,
    va: u64,
    mapped: u64,
    phys: u64,
    /// Keep the reservation (an eviction) or free it too (a free).
    free_va: bool,
}

struct Manager {
    budget: u64,
    /// Device memory in use before Marmoset took over, counted in `used` for good.
    preexisting: u64,
    used: u64,
    gran: u64,
    min_tensor: u64,
    host_limit: u64,
    host_used: u64,
    tensors: BTreeMap<u64, Tensor>,
    clock: u64,
    swap_out: usize,
    swap_in: usize,
    /// Small allocations: size-class free lists over the real allocator.
    small_free: HashMap<u64, Vec<u64>>,
    small_live: HashMap<u64, u64>,
    /// Pinned host buffers by size, and host buffers still being copied from (event, buffer, size).
    host_free: HashMap<u64, Vec<usize>>,
    host_busy: Vec<(usize, usize, u64)>,
    releases: Vec<Pending>,
    restores: u64,
}

static MANAGER: Mutex<Option<Manager>> = Mutex::new(None);

fn manager() -> Option<MutexGuard<'static, Option<Manager>>> {
    MANAGER.lock().ok()
}

/// Whether Marmoset manages device memory in this process.
pub fn active() -> bool {
    config().policy.manages_memory()
        && crate::state::active()
        && crate::state::memory_policy_allowed()
}

impl Manager {
    fn new() -> Option<Manager> {
        let cfg = config();
        let (mut free, mut total) = (0usize, 0usize);
        if cu!(c"cuMemGetInfo_v2" (*mut usize, *mut usize) (&mut free, &mut total)).is_err() {
            // A program's first call (cudaMemGetInfo, cudaMalloc) can reach us before the runtime
            // has loaded the driver and made its context: have it do so, as programs do, with
            // cudaFree(NULL). The runtime reaches the driver directly, not through our hooks.
            init_runtime();
            cu!(c"cuMemGetInfo_v2" (*mut usize, *mut usize) (&mut free, &mut total)).ok()?;
        }
        let budget = match cfg.memory_limit {
            Some(crate::config::Limit::Bytes(b)) => b,
            Some(crate::config::Limit::Fraction(f)) => (total as f64 * f) as u64,
            None => total as u64,
        };
        let mut gran = 0usize;
        let p = prop();
        cu!(c"cuMemGetAllocationGranularity" (*mut usize, *const AllocProp, c_int) (&mut gran, &p, 0)).ok()?;
        let mut streams = [0usize; 2];
        for s in &mut streams {
            let mut h: P = std::ptr::null_mut();
            cu!(c"cuStreamCreate" (*mut P, u32) (&mut h, 1)).ok()?;
            *s = h as usize;
        }
        // What the process already holds when Marmoset takes over (the context, the modules'
        // variables: torch's are 22 MB) counts against the budget too: the budget is what the
        // process may use in all, and no eviction can give that memory back.
        let preexisting = total.saturating_sub(free) as u64;
        log(
            Level::Info,
            &format!(
                "memory: budget {budget} B of {total} B ({preexisting} B already in use), tensors from {} B, host staging up to {} B",
                cfg.min_tensor, cfg.host_limit
            ),
        );
        Some(Manager {
            budget,
            preexisting,
            used: preexisting,
            gran: gran.max(1) as u64,
            min_tensor: cfg.min_tensor,
            host_limit: cfg.host_limit,
            host_used: 0,
            tensors: BTreeMap::new(),
            clock: 0,
            swap_out: streams[0],
            swap_in: streams[1],
            small_free: HashMap::new(),
            small_live: HashMap::new(),
            host_free: HashMap::new(),
            host_busy: Vec::new(),
            releases: Vec::new(),
            restores: 0,
        })
    }

    /// Finishes releases whose work is done (all of them when `wait`).
    fn reclaim(&mut self, wait: bool) {
        let mut left = Vec::new();
        for r in std::mem::take(&mut self.releases) {
            if wait {
                sync_event(r.event);
            } else if !done(r.event) {
                left.push(r);
                continue;
            }
            destroy_event(r.event);
            let _ = cu!(c"cuMemUnmap"(u64, usize)(r.va, r.mapped as usize));
            let _ = cu!(c"cuMemRelease"(u64)(r.phys));
            if r.free_va {
                let _ = cu!(c"cuMemAddressFree"(u64, usize)(r.va, r.mapped as usize));
            }
            self.used -= r.mapped;
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

    fn host_buffer(&mut self, size: u64) -> Option<usize> {
        if let Some(b) = self.host_free.get_mut(&size).and_then(Vec::pop) {
            return Some(b);
        }
        if self.host_used.saturating_add(size) > self.host_limit {
            self.reclaim(true);
            if let Some(b) = self.host_free.get_mut(&size).and_then(Vec::pop) {
                return Some(b);
            }
            // Give back pooled buffers of other sizes before giving up.
            for (s, bufs) in self.host_free.drain() {
                for b in bufs {
                    let _ = cu!(c"cuMemFreeHost"(P)(b as P));
                    self.host_used -= s;
                }
            }
            if self.host_used.saturating_add(size) > self.host_limit {
                return None;
            }
        }
        let mut p: P = std::ptr::null_mut();
        cu!(c"cuMemAllocHost_v2" (*mut P, usize) (&mut p, size as usize)).ok()?;
        self.host_used += size;
        Some(p as usize)
    }

    /// Evicts one tensor (Ok: its bytes are on the host and its memory is being released).
    fn evict(&mut self, va: u64) -> Result<(), c_int> {
        let t = self.tensors.get(&va).ok_or(1)?;
        if let Some(e) = t.arrival {
            // A prefetch still arriving: the copy out must follow it.
            sync_event(e);
        }
        let Place::Resident(phys) = t.place else {
            return Err(1);
        };
        let (size, mapped, streams) = (t.size, t.mapped, t.streams.clone());
        let buf = self.host_buffer(size).ok_or(OUT_OF_MEMORY)?;
        wait_for(self.swap_out, &streams);
        let e = event_flags(0).ok_or(1)?;
        let start = event_flags(0).ok_or(1)?;
        let _ = record(start, self.swap_out as u64);
        let copy = cu!(c"cuMemcpyDtoHAsync_v2"(P, u64, usize, P)(
            buf as P,
            va,
            size as usize,
            self.swap_out as P
        ));
        if let Err(code) = copy {
            // The tensor stays where it is, bytes intact.
            destroy_event(e);
            destroy_event(start);
            self.host_free.entry(size).or_default().push(buf);
            log(
                Level::Warn,
                &format!("memory: evicting {size} B at {va:#x} failed ({code}); it stays resident"),
            );
            return Err(code);
        }
        let _ = record(e, self.swap_out as u64);
        // The physical memory goes only once the copy is done.
        sync_event(e);
        let mut ms = 0f32;
        let _ = cu!(c"cuEventElapsedTime" (*mut f32, P, P) (&mut ms, start as P, e as P));
        destroy_event(e);
        destroy_event(start);
        let _ = cu!(c"cuMemUnmap"(u64, usize)(va, mapped as usize));
        let _ = cu!(c"cuMemRelease"(u64)(phys));
        self.used -= mapped;
        if let Some(t) = self.tensors.get_mut(&va) {
            t.place = Place::Evicted(buf);
            t.streams.clear();
            if let Some(e) = t.arrival.take() {
                destroy_event(e);
            }
        }
        crate::trace::emit(Event::Evict {
            alloc: alloc_of(va),
            bytes: size,
            stream: self.swap_out as u64,
            device_ms: ms as f64,
        });
        Ok(())
    }

    /// Frees budget for `bytes`, evicting least recently used tensors outside `protect`.
    fn make_room(&mut self, bytes: u64, protect: &HashSet<u64>) -> Result<(), String> {
        if self.used + bytes <= self.budget {
            return Ok(());
        }
        self.reclaim(false);
        if self.used + bytes > self.budget && !self.releases.is_empty() {
            self.reclaim(true);
        }
        let mut refused: HashSet<u64> = HashSet::new();
        while self.used + bytes > self.budget {
            let victim = self
                .tensors
                .iter()
                .filter(|(va, t)| {
                    matches!(t.place, Place::Resident(_))
                        && !t.internal
                        && !protect.contains(va)
                        && !refused.contains(va)
                })
                .min_by_key(|(va, t)| (t.last_use, **va))
                .map(|(va, _)| *va);
            let Some(v) = victim else {
                // Say what stopped eviction: the host staging limit, failed copies, or no tensor.
                let host_full = refused.iter().any(|va| {
                    self.tensors
                        .get(va)
                        .is_some_and(|t| self.host_used.saturating_add(t.size) > self.host_limit)
                });
                let why = if host_full {
                    format!(
                        "evicting more would exceed MARMOSET_HOST_LIMIT ({} B of pinned host memory, {} B held)",
                        self.host_limit, self.host_used
                    )
                } else if !refused.is_empty() {
                    format!("evicting {} tensor(s) failed", refused.len())
                } else {
                    "nothing left to evict".to_string()
                };
                return Err(format!(
                    "{bytes} B more would exceed the budget of {} B ({} B in use; {why})",
                    self.budget, self.used
                ));
            };
            if self.evict(v).is_err() {
                refused.insert(v);
            }
        }
        Ok(())
    }

    fn map(&mut self, va: u64, mapped: u64) -> Result<u64, c_int> {
        let p = prop();
        let mut phys = 0u64;
        cu!(c"cuMemCreate" (*mut u64, usize, *const AllocProp, u64) (&mut phys, mapped as usize, &p, 0))?;
        if let Err(e) = cu!(c"cuMemMap"(u64, usize, usize, u64, u64)(
            va,
            mapped as usize,
            0,
            phys,
            0
        )) {
            let _ = cu!(c"cuMemRelease"(u64)(phys));
            return Err(e);
        }
        let acc = AccessDesc {
            location_type: 1,
            location_id: 0,
            flags: 3,
        };
        if let Err(e) = cu!(c"cuMemSetAccess" (u64, usize, *const AccessDesc, usize) (va, mapped as usize, &acc, 1))
        {
            let _ = cu!(c"cuMemUnmap"(u64, usize)(va, mapped as usize));
            let _ = cu!(c"cuMemRelease"(u64)(phys));
            return Err(e);
        }
        self.used += mapped;
        Ok(phys)
    }

    fn alloc(&mut self, size: u64, internal: bool) -> Result<u64, c_int> {
        self.clock += 1;
        if size < self.min_tensor && !internal {
            let class = size.max(1).div_ceil(512) * 512;
            if let Some(p) = self.small_free.get_mut(&class).and_then(Vec::pop) {
                self.small_live.insert(p, class);
                return Ok(p);
            }
            if let Err(why) = self.make_room(class, &HashSet::new()) {
                log(
                    Level::Warn,
                    &format!("memory: out of memory for {size} B: {why}"),
                );
                return Err(OUT_OF_MEMORY);
            }
            let mut p = 0u64;
            cu!(c"cuMemAlloc_v2" (*mut u64, usize) (&mut p, class as usize))?;
            self.used += class;
            self.small_live.insert(p, class);
            return Ok(p);
        }
        let mapped = size.max(1).div_ceil(self.gran) * self.gran;
        if let Err(why) = self.make_room(mapped, &HashSet::new()) {
            log(
                Level::Warn,
                &format!("memory: out of memory for {size} B: {why}"),
            );
            return Err(OUT_OF_MEMORY);
        }
        let mut va = 0u64;
        cu!(c"cuMemAddressReserve" (*mut u64, usize, usize, u64, u64) (&mut va, mapped as usize, 0, 0, 0))?;
        match self.map(va, mapped) {
            Ok(phys) => {
                self.tensors.insert(
                    va,
                    Tensor {
                        size,
                        mapped,
                        place: Place::Resident(phys),
                        last_use: self.clock,
                        streams: HashSet::new(),
                        internal,
                        arrival: None,
                    },
                );
                Ok(va)
            }
            Err(e) => {
                let _ = cu!(c"cuMemAddressFree"(u64, usize)(va, mapped as usize));
                Err(e)
            }
        }
    }

    fn free(&mut self, ptr: u64, stream: Option<u64>) -> Option<c_int> {
        if let Some(class) = self.small_live.remove(&ptr) {
            self.small_free.entry(class).or_default().push(ptr);
            return Some(0);
        }
        let t = self.tensors.remove(&ptr)?;
        if let Some(e) = t.arrival {
            // The release below follows the swap-in stream, where the prefetch was copied.
            destroy_event(e);
        }
        match t.place {
            Place::Evicted(buf) => {
                self.host_free.entry(t.size).or_default().push(buf);
                let _ = cu!(c"cuMemAddressFree"(u64, usize)(ptr, t.mapped as usize));
            }
            Place::Resident(phys) => {
                // Released once the work issued before on its streams (and the freeing one) is done.
                let mut streams = t.streams.clone();
                streams.extend(stream);
                let e = event().unwrap_or(0);
                let mut waited = e != 0;
                if e != 0 {
                    // One event after all of them: a private stream waits on each, then records.
                    wait_for(self.swap_in, &streams);
                    waited = record(e, self.swap_in as u64).is_ok();
                }
                if waited {
                    self.releases.push(Pending {
                        event: e,
                        va: ptr,
                        mapped: t.mapped,
                        phys,
                        free_va: true,
                    });
                } else {
                    let _ = cu!(c"cuMemUnmap"(u64, usize)(ptr, t.mapped as usize));
                    let _ = cu!(c"cuMemRelease"(u64)(phys));
                    let _ = cu!(c"cuMemAddressFree"(u64, usize)(ptr, t.mapped as usize));
                    self.used -= t.mapped;
                }
            }
        }
        Some(0)
    }

    /// Maps a tensor's memory again and copies its bytes in from `buf` on the swap-in stream;
    /// (physical handle, event after the copy). On failure nothing is left mapped.
    fn copy_in(
        &mut self,
        va: u64,
        buf: usize,
        size: u64,
        mapped: u64,
    ) -> Result<(u64, usize), c_int> {
        let phys = self.map(va, mapped)?;
        let unmap = |m: &mut Manager| {
            let _ = cu!(c"cuMemUnmap"(u64, usize)(va, mapped as usize));
            let _ = cu!(c"cuMemRelease"(u64)(phys));
            m.used -= mapped;
        };
        let Some(e) = event() else {
            unmap(self);
            return Err(1);
        };
        // The copy in waits for nothing of the program's; the operation waits for the copy.
        let copy = cu!(c"cuMemcpyHtoDAsync_v2"(u64, P, usize, P)(
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

    /// Makes the tensors at `vas` resident before an operation on `stream`.
    fn ensure(&mut self, vas: &[u64], stream: u64) -> Result<(), c_int> {
        self.clock += 1;
        let protect: HashSet<u64> = vas.iter().copied().collect();
        for &va in vas {
            let Some(t) = self.tensors.get_mut(&va) else {
                continue;
            };
            if let Some(e) = t.arrival.take() {
                // Prefetched: the operation's stream waits for the copy in, by event.
                let _ = cu!(c"cuStreamWaitEvent"(P, P, u32)(stream as P, e as P, 0));
                destroy_event(e);
            }
            let Place::Evicted(buf) = t.place else {
                continue;
            };
            let (size, mapped) = (t.size, t.mapped);
            if let Err(why) = self.make_room(mapped, &protect) {
                log(
                    Level::Error,
                    &format!("memory: an operation needs more than the budget: {why}"),
                );
                return Err(OUT_OF_MEMORY);
            }
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
            let timing = crate::timing::begin(self.swap_in as u64);
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
            let _ = cu!(c"cuStreamWaitEvent"(P, P, u32)(stream as P, e as P, 0));
            self.host_busy.push((e, buf, size));
            if let Some(t) = self.tensors.get_mut(&va) {
                t.place = Place::Resident(phys);
            }
            let seq = crate::trace::next_seq();
            if let Some(start) = timing {
                crate::timing::end(seq, self.swap_in as u64, start);
            }
            crate::trace::emit_seq(
                seq,
                Event::Restore {
                    alloc: alloc_of(va),
                    bytes: size,
                    stream: self.swap_in as u64,
                },
            );
        }
        for &va in vas {
            if let Some(t) = self.tensors.get_mut(&va) {
                t.last_use = self.clock;
                t.streams.insert(stream);
            }
        }
        Ok(())
    }
}

impl Manager {
    /// Guided execution's eviction after the evicted-access: Ok when the tensor left.
    fn evict_planned(&mut self, va: u64) -> Result<(), c_int> {
        match self.tensors.get(&va) {
            Some(t) if !t.internal && matches!(t.place, Place::Resident(_)) => self.evict(va),
            _ => Err(1),
        }
    }

    /// Guided execution's prefetch at the in-trigger: the copy in starts on the swap-in stream
    /// and the back-access waits for it by event. Room is made as for a restore (least recently
    /// used first, never the tensors in `protect`); on any failure the tensor stays evicted and
    /// the back-access restores it on demand.
    fn prefetch(&mut self, va: u64, protect: &HashSet<u64>) -> Result<(), c_int> {
        // Already resident (never evicted, or brought back on demand): nothing to do.
        let Some(t) = self.tensors.get(&va) else {
            return Ok(());
        };
        let Place::Evicted(buf) = t.place else {
            return Ok(());
        };
        let (size, mapped) = (t.size, t.mapped);
        let mut keep = protect.clone();
        keep.insert(va);
        self.make_room(mapped, &keep).map_err(|_| OUT_OF_MEMORY)?;
        let (phys, e) = self.copy_in(va, buf, size, mapped)?;
        let arrival = event().inspect(|&a| {
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
        crate::trace::emit(Event::Restore {
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
    let Some((va, _)) = crate::state::allocation(id) else {
        return false;
    };
    with(|m| m.evict_planned(va).is_ok()).unwrap_or(false)
}

/// Starts bringing allocation `id` back (guided execution, at its in-trigger), never evicting
/// the allocations in `protect` to make room.
pub fn prefetch(id: u64, protect: &[u64]) -> bool {
    if !active() {
        return false;
    }
    let Some((va, _)) = crate::state::allocation(id) else {
        return false;
    };
    let keep: HashSet<u64> = protect
        .iter()
        .filter_map(|&a| crate::state::allocation(a).map(|x| x.0))
        .collect();
    match with(|m| m.prefetch(va, &keep)) {
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

fn alloc_of(va: u64) -> u64 {
    crate::state::points_into(va).map(|(id, _)| id).unwrap_or(0)
}

fn with<R>(f: impl FnOnce(&mut Manager) -> R) -> Option<R> {
    let mut g = manager()?;
    if g.is_none() {
        *g = Some(Manager::new()?);
    }
    g.as_mut().map(f)
}

/// The budget in bytes for the program's own memory: the budget less what the process held
/// before Marmoset took over (None: not managed).
pub fn budget() -> Option<u64> {
    if !active() {
        return None;
    }
    with(|m| m.budget.saturating_sub(m.preexisting))
}

/// An allocation under the memory policy (None: not managed, forward it).
pub fn alloc(out: *mut u64, size: usize) -> Option<c_int> {
    if !active() || out.is_null() {
        return None;
    }
    if size == 0 {
        // SAFETY: non-null output pointer.
        unsafe { *out = 0 };
        return Some(0);
    }
    match with(|m| m.alloc(size as u64, false))? {
        Ok(p) => {
            // SAFETY: non-null output pointer.
            unsafe { *out = p };
            Some(0)
        }
        Err(e) => Some(e),
    }
}

/// Marmoset's own device memory (workspaces): counted in the budget, never evicted.
pub fn alloc_internal(size: usize) -> Option<u64> {
    if !active() {
        return None;
    }
    with(|m| m.alloc(size as u64, true).ok())?
}

pub fn free(ptr: u64, stream: Option<u64>) -> Option<c_int> {
    if !active() {
        return None;
    }
    if ptr == 0 {
        return Some(0);
    }
    with(|m| m.free(ptr, stream))?
}

/// cudaMemGetInfo / cuMemGetInfo_v2: the budget is the device.
pub fn mem_info(free: *mut usize, total: *mut usize) -> Option<c_int> {
    if !active() || free.is_null() || total.is_null() {
        return None;
    }
    let (used, budget) = with(|m| {
        m.reclaim(false);
        (m.used, m.budget)
    })?;
    // SAFETY: non-null output pointers.
    unsafe {
        *free = budget.saturating_sub(used) as usize;
        *total = budget as usize;
    }
    Some(0)
}

/// Before an operation: every tensor it touches resident. Err: the operation cannot run.
pub fn before(touches: &[Touch], stream: Option<u64>) -> Result<(), c_int> {
    if !active() || touches.is_empty() {
        return Ok(());
    }
    let vas: Vec<u64> = touches
        .iter()
        .filter_map(|t| crate::state::allocation(t.alloc).map(|a| a.0))
        .collect();
    with(|m| m.ensure(&vas, stream.unwrap_or(0))).unwrap_or(Ok(()))
}
