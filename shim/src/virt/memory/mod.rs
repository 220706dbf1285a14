//! Tensor memory virtualisation: Marmoset's own allocator and the passive (on-demand) policy,
//! `MARMOSET_POLICY=lru`.
//!
//! Allocations of at least `MARMOSET_MIN_TENSOR` get a reserved virtual range backed by physical
//! memory through the driver's VMM calls, so the backing can be unmapped and mapped again at the
//! same address; smaller ones come from a pool that is never evicted. The budget
//! (`MARMOSET_MEMORY_LIMIT`) counts everything Marmoset maps, and `cudaMemGetInfo` /
//! `cuMemGetInfo_v2` report it as the device's total.
//!
//! Contents are *dead* whenever the plan says the next access overwrites them whole (guided
//! execution's drops): dead contents are released first when room is needed, without a copy,
//! and an overwrite of an evicted tensor maps fresh memory instead of copying it in. An
//! allocation is mapped when it is made, not at its first touch as the planner's model counts
//! it: a library may touch it through a pointer no record names (cuBLAS's workspace under
//! PyTorch did), and an unmapped range traps.
//!
//! Before an operation runs, every tensor it touches is resident: an evicted one is brought back
//! (physical memory mapped again, bytes copied in from host on the swap-in stream, the
//! operation's stream waiting on it by event). When an allocation or a restore would exceed the
//! budget, victims not touched by the current operation go: dead contents first, all of them
//! before the host counts on a copy out still running (their release needs no copy), then live
//! ones: while a plan guides, the one its calls touch furthest ahead first (Belady's rule, by
//! the plan's model of the iteration: `victims`), otherwise the least recently used first
//! (while none guides, the online policy chooses: `virt::online`): an asynchronous copy to
//! pinned host memory on the swap-out
//! stream after the victim's last uses (events on each stream that used it). The host does not
//! wait for that copy (Capuchin's decoupled computation and swapping): the physical memory is
//! unmapped once it is done, and only when memory is short does the host wait: for releases
//! without a copy first (drops and frees, queued on a third private stream behind the work that
//! used the tensor, never behind copies), then for the earliest unfinished copy. A tensor wanted back while its copy out is still running keeps its
//! memory (the release is cancelled, nothing copied in). A failed eviction copy leaves the tensor
//! resident and intact. A free of an evicted tensor drops its host copy; a free of a resident one
//! releases it once the work issued before on its streams is done (no device-wide
//! synchronisation).

mod driver;
pub mod foreign;
mod guided;
mod hold;
mod lent;
pub mod link;
mod releases;
mod restore;
pub mod stats;
mod victims;

pub use hold::Hold;
pub use lent::{lend, pin_lent, spare, unpin_lent};
use victims::online;
pub use victims::{Online, attach_ahead, attach_online};

pub use guided::{
    evict_planned, keep_dead, mark_dead, mark_dead_kept, matches_or_restore, prefetch, revive,
    set_guided, snapshot, take_back, take_late, take_unplanned,
};

use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::call;
use crate::ffi::cuda::AccessDesc;
use driver::*;
use hold::{oom, with_room};
use planner::trace::Event;
use releases::Pending;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
enum Place {
    /// Mapped, with its physical allocation handle.
    Resident(u64),
    /// Unmapped; its bytes are in this pinned host buffer.
    Evicted(usize),
    /// Unmapped, and no bytes anywhere: its contents were dropped as dead (`dropped`; a read of
    /// them now would be a wrong plan: said at error level).
    Empty { dropped: bool },
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
    /// Resident, but its contents are not needed (the plan says the next access overwrites them
    /// whole): released without a copy when room is needed.
    dead: bool,
    /// Dead by a prediction only (see `guided::mark_dead`): released with a copy all the same.
    keep: bool,
    /// Calls that touch it and are not issued yet (see `hold`): never a victim while held.
    pins: u32,
    /// Lent to one of Marmoset's own layers from spare memory (see `lent`): taken back, once
    /// no call pins it, before anything is evicted.
    lent: bool,
}

/// A prefetch the host found still arriving when it issued an operation that needs it: its
/// copy in's event, and one recorded where the operation's stream reached the wait (none where
/// it could not be recorded).
struct Arriving {
    va: u64,
    alloc: u64,
    arrival: usize,
    reached: Option<usize>,
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
    /// Where a release without a copy (a drop, a free) waits for the tensor's work: never
    /// behind the copies on the swap streams, which can run for tens of milliseconds.
    join: usize,
    /// Small allocations: size-class free lists over the real allocator.
    small_free: HashMap<u64, Vec<u64>>,
    small_live: HashMap<u64, u64>,
    /// Pinned host buffers by size, and host buffers still being copied from (event, buffer, size).
    host_free: HashMap<u64, Vec<usize>>,
    host_busy: Vec<(usize, usize, u64)>,
    /// Releases in issue order; `releasing` is their mapped bytes (in `used` until done).
    releases: Vec<Pending>,
    releasing: u64,
    restores: u64,
    /// Prefetches whose copy in had not arrived when the host issued an operation that needs
    /// it: late or not, the device's clock says once both are done (see `take_late`).
    arriving: Vec<Arriving>,
    /// Prefetched tensors that had to make room at their in-trigger: memory is short there, and
    /// one call earlier it is shorter, so their lateness moves nothing (see `take_late`).
    cramped: HashSet<u64>,
    /// Why the last attempt ran out of memory, said once it is final (see `hold`).
    oom: Option<(Level, String)>,
    /// Whether the link was measured, or tried (see `link`).
    link_tried: bool,
    /// Memory libraries mapped themselves since Marmoset took over (see `foreign`): handle ->
    /// bytes, and their sum, in `used` while they live.
    foreign: HashMap<u64, u64>,
    foreign_bytes: u64,
}

static MANAGER: Mutex<Option<Manager>> = Mutex::new(None);

thread_local! {
    /// Set while a dropped tensor is rebuilt after its replay failed within the budget
    /// ([`beyond_budget`]).
    static BEYOND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What [`before`] answers when a call's tensors find no room within the budget.
pub const NO_ROOM: c_int = OUT_OF_MEMORY;

/// Eviction's own code for an event the driver did not give (driver errors are positive).
const EVENT_REFUSED: c_int = -1;

/// An eviction's error as a message names it.
fn refusal_name(code: c_int) -> String {
    if code == EVENT_REFUSED {
        "no event from the driver".into()
    } else {
        error_name(code)
    }
}

/// Runs `f` with the budget lifted for this thread: room that cannot be made within the budget
/// is taken beyond it (up to what the device gives). For what keeping to the budget would lose:
/// rebuilding contents dropped for recomputation, and a call whose tensors do not fit within
/// it together (refused, the call would not run).
pub fn beyond_budget<T>(f: impl FnOnce() -> T) -> T {
    BEYOND.with(|b| b.set(true));
    let r = f();
    BEYOND.with(|b| b.set(false));
    r
}

/// Whether this thread is inside [`beyond_budget`].
pub fn is_beyond_budget() -> bool {
    BEYOND.with(|b| b.get())
}

/// The manager, locked, on a thread with a context current (its work calls the driver).
fn manager() -> Option<MutexGuard<'static, Option<Manager>>> {
    // Before the lock: binding a context runs the runtime, which may call hooked functions.
    crate::ffi::context::ensure();
    MANAGER.lock().ok()
}

/// Whether Marmoset manages device memory in this process.
pub fn active() -> bool {
    config().policy.manages_memory()
        && crate::core::state::active()
        && crate::core::state::memory_policy_allowed()
}

impl Manager {
    fn new() -> Option<Manager> {
        let cfg = config();
        let (mut free, mut total) = (0usize, 0usize);
        if call!(cuMemGetInfo_v2(&mut free, &mut total)).is_err() {
            // A program's first call (cudaMemGetInfo, cudaMalloc) can reach us before the runtime
            // has loaded the driver and made its context: have it do so, as programs do, with
            // cudaFree(NULL). The runtime reaches the driver directly, not through our hooks.
            init_runtime();
            call!(cuMemGetInfo_v2(&mut free, &mut total)).ok()?;
        }
        let budget = match cfg.memory_limit {
            // A budget above the device's memory cannot be kept: the device is the budget.
            Some(crate::core::config::Limit::Bytes(b)) if b > total as u64 => {
                log(
                    Level::Warn,
                    &format!(
                        "memory: MARMOSET_MEMORY_LIMIT={b} B is more than the device has ({total} B): the budget is the device's memory"
                    ),
                );
                total as u64
            }
            Some(crate::core::config::Limit::Bytes(b)) => b,
            Some(crate::core::config::Limit::Fraction(f)) => (total as f64 * f) as u64,
            None => total as u64,
        };
        let mut gran = 0usize;
        let p = prop();
        call!(cuMemGetAllocationGranularity(&mut gran, &p, 0)).ok()?;
        let mut streams = [0usize; 3];
        for s in &mut streams {
            let mut h: P = std::ptr::null_mut();
            call!(cuStreamCreate(&mut h, 1)).ok()?;
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
            join: streams[2],
            small_free: HashMap::new(),
            small_live: HashMap::new(),
            host_free: HashMap::new(),
            host_busy: Vec::new(),
            releases: Vec::new(),
            releasing: 0,
            restores: 0,
            arriving: Vec::new(),
            cramped: HashSet::new(),
            oom: None,
            link_tried: false,
            foreign: HashMap::new(),
            foreign_bytes: 0,
        })
    }

    fn host_buffer(&mut self, size: u64) -> Option<usize> {
        self.host_buffer_or_why(size).ok()
    }

    /// A pinned host buffer of `size` bytes, or why none: OUT_OF_MEMORY at the host staging
    /// limit, else the driver's error.
    fn host_buffer_or_why(&mut self, size: u64) -> Result<usize, c_int> {
        if let Some(b) = self.host_free.get_mut(&size).and_then(Vec::pop) {
            return Ok(b);
        }
        if self.host_used.saturating_add(size) > self.host_limit {
            self.reclaim(true);
            if let Some(b) = self.host_free.get_mut(&size).and_then(Vec::pop) {
                return Ok(b);
            }
            // Give back pooled buffers of other sizes before giving up.
            for (s, bufs) in self.host_free.drain() {
                for b in bufs {
                    let _ = call!(cuMemFreeHost(b as P));
                    self.host_used -= s;
                }
            }
            if self.host_used.saturating_add(size) > self.host_limit {
                return Err(OUT_OF_MEMORY);
            }
        }
        let mut p: P = std::ptr::null_mut();
        call!(cuMemAllocHost_v2(&mut p, size as usize))?;
        self.host_used += size;
        Ok(p as usize)
    }

    /// What an eviction and a drop do first: a resident tensor's (memory, size, mapped bytes),
    /// with stream `on` (the swap-out stream for a copy, the join stream for a drop) made to
    /// wait for all the work issued on it so far (its streams, and a prefetch still arriving).
    fn after_its_work(&self, va: u64, on: usize) -> Result<(u64, u64, u64), c_int> {
        let t = self.tensors.get(&va).ok_or(1)?;
        let Place::Resident(phys) = t.place else {
            return Err(1);
        };
        let mut streams = t.streams.clone();
        if let Some(e) = t.arrival {
            let _ = call!(cuStreamWaitEvent(on as P, e as P, 0));
            streams.remove(&(self.swap_in as u64));
        }
        wait_for(on, &streams);
        Ok((phys, t.size, t.mapped))
    }

    /// The tensor has left its memory for `place` (its release queued): no stream, no pending
    /// arrival, contents no longer marked dead.
    fn left(&mut self, va: u64, place: Place) {
        if let Some(t) = self.tensors.get_mut(&va) {
            t.place = place;
            t.streams.clear();
            t.dead = false;
            t.keep = false;
            if let Some(e) = t.arrival.take() {
                destroy_event(e);
            }
        }
    }

    /// Evicts one tensor (Ok: its copy out is under way on the swap-out stream, and its memory
    /// is released once the copy is done; the host does not wait).
    fn evict(&mut self, va: u64) -> Result<(), c_int> {
        let (phys, size, mapped) = self.after_its_work(va, self.swap_out)?;
        let buf = self.host_buffer_or_why(size)?;
        let (Some(e), Some(start)) = (event_flags(0), event_flags(0)) else {
            self.host_free.entry(size).or_default().push(buf);
            return Err(EVENT_REFUSED);
        };
        let _ = record(start, self.swap_out as u64);
        let copy = call!(cuMemcpyDtoHAsync_v2(
            buf as P,
            va,
            size as usize,
            self.swap_out as P
        ));
        if let Err(code) = copy.and_then(|()| record(e, self.swap_out as u64)) {
            // The tensor stays where it is, bytes intact.
            sync_event(start);
            destroy_event(e);
            destroy_event(start);
            self.host_free.entry(size).or_default().push(buf);
            log(
                Level::Warn,
                &format!(
                    "memory: evicting {size} B at {va:#x} failed ({}); it stays resident",
                    error_name(code)
                ),
            );
            return Err(code);
        }
        self.release_after(e, va, mapped, phys, Some((start, alloc_of(va), size)));
        self.left(va, Place::Evicted(buf));
        Ok(())
    }

    /// Releases a resident tensor whose contents are dead, without a copy, once the work
    /// issued before on its streams is done.
    fn release_dead(&mut self, va: u64) -> Result<(), c_int> {
        let (phys, size, mapped) = self.after_its_work(va, self.join)?;
        let e = event().ok_or(EVENT_REFUSED)?;
        if let Err(code) = record(e, self.join as u64) {
            destroy_event(e);
            return Err(code);
        }
        self.release_after(e, va, mapped, phys, None);
        self.left(va, Place::Empty { dropped: true });
        crate::core::bus::emit(Event::Drop {
            alloc: alloc_of(va),
            bytes: size,
        });
        Ok(())
    }

    /// Frees budget for `bytes` outside `protect`. Dead contents go first, all of them before
    /// the host counts on a copy out in flight: their release waits only for the work that used
    /// them, a copy out for the PCIe link (45 ms for 512 MiB at 12 GB/s). Then live tensors,
    /// least recently used first, until the releases queued cover the bytes; then the host
    /// waits, for releases without a copy first, then for the earliest unfinished copy, one at
    /// a time, until the bytes fit.
    fn make_room(&mut self, bytes: u64, protect: &HashSet<u64>) -> Result<(), String> {
        if self.used + bytes <= self.budget {
            return Ok(());
        }
        self.reclaim(false);
        // What was lent from spare memory goes back before any tensor leaves.
        self.take_back_lent();
        if online().is_some() {
            self.link_known();
        }
        let mut refused: HashSet<u64> = HashSet::new();
        // The first refusal's error, which the message names.
        let mut first_refusal: Option<c_int> = None;
        let choose = online().is_some_and(|o| (o.choosing)());
        let mut counted = false;
        // Asked once, when a victim is first needed.
        let mut plan_ahead: Option<Option<HashMap<u64, usize>>> = None;
        while self.used + bytes > self.budget {
            let copying: u64 = self
                .releases
                .iter()
                .filter(|r| r.copy.is_some())
                .map(|r| r.mapped)
                .sum();
            let quick = self.releasing - copying;
            if self.used - quick + bytes <= self.budget {
                break;
            }
            let candidates = self.tensors.iter().filter(|(va, t)| {
                matches!(t.place, Place::Resident(_))
                    && !t.internal
                    && t.pins == 0
                    && !protect.contains(va)
                    && !refused.contains(va)
            });
            let victim = if choose {
                self.cheapest(candidates)
            } else if let Some(next) = plan_ahead.get_or_insert_with(victims::ahead) {
                candidates
                    .min_by_key(|(va, t)| {
                        let ahead = next.get(&alloc_of(**va)).copied();
                        victims::furthest_first(t.dead, ahead, t.last_use, **va)
                    })
                    .map(|(va, t)| (*va, t.dead && !t.keep))
            } else {
                candidates
                    .min_by_key(|(va, t)| (!t.dead, t.last_use, **va))
                    .map(|(va, t)| (*va, t.dead && !t.keep))
            };
            // Dead contents go without a copy, guarded where they can be rebuilt, and where they
            // cannot, copied out all the same once the program has left a plan (`keep`). A
            // victim the online policy can rebuild is dropped, not copied out.
            let victim = victim.map(|(v, dead)| {
                let guarded = self.tensors.get(&v).is_some_and(|t| t.dead) && self.guard(v);
                if guarded {
                    return (v, true);
                }
                let rebuilt = !dead
                    && choose
                    && self.droppable_now(v)
                    && online().is_some_and(|o| (o.drop)(alloc_of(v)));
                // MARMOSET_VERIFY: the bytes it held, to check the rebuild against.
                if rebuilt
                    && config().verify
                    && let Some(o) = online()
                    && let Some(size) = crate::core::registry::allocation(alloc_of(v)).map(|x| x.1)
                    && let Some(bytes) = self.snapshot(v, size)
                {
                    (o.saved)(alloc_of(v), bytes);
                }
                (v, dead || rebuilt)
            });
            if self.used - self.releasing + bytes <= self.budget
                && !victim.is_some_and(|(_, dead)| dead)
            {
                // The copies out in flight cover it, and no dead contents are left to drop.
                break;
            }
            // A live tensor leaving while a plan guides: the plan did not count what this
            // call needs (guided execution's feedback replans within less).
            if !counted && victim.is_some_and(|(_, dead)| !dead) && guided::guided() {
                counted = true;
                // Beyond what the copies out in flight free: what the plan's memory lacks.
                let short = self.used - self.releasing + bytes - self.budget;
                guided::unplanned(short);
                if crate::core::state::logs(Level::Debug) {
                    log(
                        Level::Debug,
                        &format!(
                            "memory: {bytes} B asked while a plan guides: {short} B beyond what the plan left, a live tensor leaves for it"
                        ),
                    );
                }
            }
            if victim.is_none() && is_beyond_budget() {
                // Rebuilding dropped contents: over the budget rather than lose them.
                log(
                    Level::Warn,
                    &format!(
                        "memory: {bytes} B taken beyond the budget of {} B, for what cannot wait (dropped contents rebuilt, or a call's tensors that do not fit within it together)",
                        self.budget
                    ),
                );
                return Ok(());
            }
            let Some((v, dead)) = victim else {
                // Say what stopped eviction: the host staging limit, failed copies, or no tensor.
                let host_full = refused.iter().any(|va| {
                    self.tensors
                        .get(va)
                        .is_some_and(|t| self.host_used.saturating_add(t.size) > self.host_limit)
                });
                let held = self
                    .tensors
                    .values()
                    .filter(|t| t.pins > 0 && matches!(t.place, Place::Resident(_)))
                    .count();
                let why = if host_full {
                    format!(
                        "evicting more would exceed MARMOSET_HOST_LIMIT ({} B of pinned host memory, {} B held)",
                        self.host_limit, self.host_used
                    )
                } else if !refused.is_empty() {
                    format!(
                        "evicting {} tensor(s) failed, the first with {}",
                        refused.len(),
                        first_refusal.map_or_else(|| "no error code".into(), refusal_name)
                    )
                } else if held > 0 {
                    format!("{held} tensor(s) held by calls being issued")
                } else {
                    // What stays: the pool of smaller tensors, and the call's own tensors.
                    let pool = self.pool_bytes();
                    let own: u64 = protect
                        .iter()
                        .filter_map(|va| self.tensors.get(va))
                        .filter(|t| matches!(t.place, Place::Resident(_)))
                        .map(|t| t.mapped)
                        .sum();
                    format!(
                        "nothing left to evict: {pool} B are tensors under MARMOSET_MIN_TENSOR \
                         ({} B), which are never evicted, and {own} B the call's own tensors",
                        self.min_tensor
                    )
                };
                return Err(format!(
                    "{bytes} B more would exceed the budget of {} B ({} B in use; {why})",
                    self.budget,
                    self.used - self.releasing
                ));
            };
            let gone = if dead {
                self.release_dead(v)
            } else {
                self.evict(v)
            };
            let a = alloc_of(v);
            match (gone, online()) {
                (Err(code), o) => {
                    first_refusal.get_or_insert(code);
                    refused.insert(v);
                    if let Some(o) = o {
                        (o.kept)(a);
                    }
                }
                (Ok(()), Some(o)) if dead && !(o.is_dropped)(a) => (o.lost)(a),
                _ => {}
            }
        }
        while self.used + bytes > self.budget
            && (self.reclaim_earliest(false) || self.reclaim_earliest(true))
        {}
        Ok(())
    }
    fn map(&mut self, va: u64, mapped: u64) -> Result<u64, c_int> {
        let p = prop();
        let mut phys = 0u64;
        call!(cuMemCreate(&mut phys, mapped as usize, &p, 0))?;
        if let Err(e) = call!(cuMemMap(va, mapped as usize, 0, phys, 0)) {
            let _ = call!(cuMemRelease(phys));
            return Err(e);
        }
        let acc = AccessDesc {
            location_type: 1,
            location_id: driver::device(),
            flags: 3,
        };
        if let Err(e) = call!(cuMemSetAccess(va, mapped as usize, &acc, 1)) {
            let _ = call!(cuMemUnmap(va, mapped as usize));
            let _ = call!(cuMemRelease(phys));
            return Err(e);
        }
        self.used += mapped;
        stats::mapped(self, va, mapped);
        Ok(phys)
    }

    /// The bytes the pool of tensors under `min_tensor` holds, live and free.
    fn pool_bytes(&self) -> u64 {
        self.small_live.values().sum::<u64>()
            + self
                .small_free
                .iter()
                .map(|(class, v)| class * v.len() as u64)
                .sum::<u64>()
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
                oom(
                    self,
                    Level::Warn,
                    format!("memory: out of memory for {size} B: {why}"),
                );
                return Err(OUT_OF_MEMORY);
            }
            let mut p = 0u64;
            call!(cuMemAlloc_v2(&mut p, class as usize))?;
            self.used += class;
            self.small_live.insert(p, class);
            return Ok(p);
        }
        let mapped = size.max(1).div_ceil(self.gran) * self.gran;
        // Mapped now, not at the first touch: a kernel may touch it through a pointer no
        // record names (a library's own workspace), and an unmapped range traps. What is not
        // written yet is not dead for the same reason: only a plan says what is.
        if let Err(why) = self.make_room(mapped, &HashSet::new()) {
            oom(
                self,
                Level::Warn,
                format!("memory: out of memory for {size} B: {why}"),
            );
            return Err(OUT_OF_MEMORY);
        }
        let mut va = 0u64;
        call!(cuMemAddressReserve(&mut va, mapped as usize, 0, 0, 0))?;
        let place = match self.map(va, mapped) {
            Ok(phys) => Place::Resident(phys),
            Err(e) => {
                let _ = call!(cuMemAddressFree(va, mapped as usize));
                return Err(e);
            }
        };
        self.tensors.insert(
            va,
            Tensor {
                size,
                mapped,
                place,
                last_use: self.clock,
                streams: HashSet::new(),
                internal,
                arrival: None,
                dead: false,
                keep: false,
                pins: 0,
                lent: false,
            },
        );
        Ok(va)
    }

    fn free(&mut self, ptr: u64, stream: Option<u64>) -> Option<c_int> {
        if let Some(class) = self.small_live.remove(&ptr) {
            self.small_free.entry(class).or_default().push(ptr);
            return Some(0);
        }
        let t = self.tensors.remove(&ptr)?;
        // Its address may be another tensor's next.
        self.cramped.remove(&ptr);
        if let Some(e) = t.arrival {
            // A release below waits for the prefetch's copy in too.
            let _ = call!(cuStreamWaitEvent(self.join as P, e as P, 0));
            destroy_event(e);
        }
        match t.place {
            Place::Evicted(_) | Place::Empty { .. } => {
                let buf = match t.place {
                    Place::Evicted(b) => Some(b),
                    _ => None,
                };
                match self.releases.iter_mut().find(|r| r.va == ptr && !r.free_va) {
                    // Its copy out or drop is still under way: the address goes with the memory.
                    Some(r) => {
                        r.free_va = true;
                        if let Some(b) = buf {
                            // The buffer is free once the copy out (on the swap-out stream) is.
                            match event() {
                                Some(e) if record(e, self.swap_out as u64).is_ok() => {
                                    self.host_busy.push((e, b, t.size))
                                }
                                other => {
                                    if let Some(e) = other {
                                        destroy_event(e);
                                    }
                                    sync_event(r.event);
                                    self.host_free.entry(t.size).or_default().push(b);
                                }
                            }
                        }
                    }
                    None => {
                        if let Some(b) = buf {
                            self.host_free.entry(t.size).or_default().push(b);
                        }
                        let _ = call!(cuMemAddressFree(ptr, t.mapped as usize));
                    }
                }
            }
            Place::Resident(phys) => {
                // Released once the work issued before on its streams (and the freeing one) is done.
                let mut streams = t.streams.clone();
                streams.extend(stream);
                let e = event().unwrap_or(0);
                let mut waited = e != 0;
                if e != 0 {
                    // One event after all of them: a private stream waits on each, then records.
                    wait_for(self.join, &streams);
                    waited = record(e, self.join as u64).is_ok();
                }
                if waited {
                    self.releasing += t.mapped;
                    self.releases.push(Pending {
                        event: e,
                        va: ptr,
                        mapped: t.mapped,
                        phys,
                        free_va: true,
                        copy: None,
                    });
                } else {
                    let _ = call!(cuMemUnmap(ptr, t.mapped as usize));
                    let _ = call!(cuMemRelease(phys));
                    let _ = call!(cuMemAddressFree(ptr, t.mapped as usize));
                    self.used -= t.mapped;
                }
            }
        }
        Some(0)
    }
}

fn alloc_of(va: u64) -> u64 {
    crate::core::registry::points_into(va)
        .map(|(id, _)| id)
        .unwrap_or(0)
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
    with(|m| m.budget.saturating_sub(m.preexisting + m.foreign_bytes))
}

/// How the allocator holds what the program allocates now, as the planner's model must see it
/// (None: not managed); `pool`: the bytes the pool of smaller tensors holds now.
pub fn holding() -> Option<planner::trace::Held> {
    if !active() {
        return None;
    }
    with(|m| planner::trace::Held {
        gran: m.gran,
        min_tensor: m.min_tensor,
        pool: m.pool_bytes(),
        // What libraries mapped themselves since moves no more than what was there before.
        preexisting: m.preexisting + m.foreign_bytes,
    })
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
    match with_room(|m| m.alloc(size as u64, false))? {
        Ok(p) => {
            // SAFETY: non-null output pointer.
            unsafe { *out = p };
            Some(0)
        }
        Err(e) => Some(e),
    }
}

/// Whether tensors of these sizes (a replay's operands and workspace) fit in the budget at once,
/// with everything that can be evicted gone: what never moves (memory held before Marmoset,
/// Marmoset's own buffers, the pool of small tensors) and their pages. True when not managed.
pub fn room_for(sizes: &[u64]) -> bool {
    if !active() {
        return true;
    }
    with(|m| {
        let fixed: u64 = m.preexisting
            + m.foreign_bytes
            + m.tensors
                .values()
                .filter(|t| t.internal && matches!(t.place, Place::Resident(_)))
                .map(|t| t.mapped)
                .sum::<u64>()
            + m.pool_bytes();
        let wanted: u64 = sizes
            .iter()
            .map(|&b| b.max(1).div_ceil(m.gran) * m.gran)
            .sum();
        fixed + wanted <= m.budget
    })
    .unwrap_or(false)
}

/// Marmoset's own device memory (workspaces): counted in the budget, never evicted.
pub fn alloc_internal(size: usize) -> Option<u64> {
    if !active() {
        return None;
    }
    with_room(|m| m.alloc(size as u64, true)).and_then(Result::ok)
}

/// Whether a program's allocation of `size` bytes is served from the pool of tensors under
/// `MARMOSET_MIN_TENSOR` (which no plan moves).
pub fn pools(size: u64) -> bool {
    size < config().min_tensor && active()
}

/// Before the program frees the allocation at `ptr` (while the registry still knows it): what
/// the online policy dropped and rebuilds from it is rebuilt first, on the free's stream.
pub fn before_free(ptr: u64, stream: Option<u64>) {
    if !active() {
        return;
    }
    if let Some((id, 0)) = crate::core::registry::points_into(ptr)
        && let Some(o) = online()
    {
        (o.before_free)(id, stream.unwrap_or(0));
    }
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

/// cudaMemGetInfo / cuMemGetInfo_v2: the budget is the device, so that a framework sizes
/// itself to it; except to a framework that would rewrite its computation around it
/// ([`plans_around_the_device`]), which sees the device as it is.
pub fn mem_info(free: *mut usize, total: *mut usize) -> Option<c_int> {
    if !active() || free.is_null() || total.is_null() || plans_around_the_device() {
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

/// Whether the program is TensorFlow allocating per tensor (`TF_GPU_ALLOCATOR=cuda_malloc_async`,
/// as Marmoset sets it). TensorFlow takes the device's memory as the limit of its allocator,
/// and its graph optimizer (Grappler's memory optimizer, on by default) inserts copies of
/// tensors out to the host and back wherever its estimate of a graph's peak exceeds that
/// limit: under a budget it would run another computation, its own swaps in it, which no
/// policy can plan, reorder or recompute through. Marmoset virtualises the memory; the program
/// runs the computation it runs without it. With its BFC allocator (one allocation of all it
/// is told the device has) it still sees the budget.
fn plans_around_the_device() -> bool {
    static TENSORFLOW: AtomicBool = AtomicBool::new(false);
    if TENSORFLOW.load(Ordering::Relaxed) {
        return true;
    }
    let yes = std::env::var("TF_GPU_ALLOCATOR").is_ok_and(|v| v.trim() == "cuda_malloc_async")
        && crate::ffi::real::loaded(c"libtensorflow_framework.so.2");
    if yes {
        TENSORFLOW.store(true, Ordering::Relaxed);
    }
    yes
}

/// Before an operation: every tensor it touches resident, its bytes copied back only where the
/// operation reads them, and held there until the returned [`Hold`] is dropped, which the
/// caller does once the operation is issued on its stream. Err: the operation cannot run.
pub fn before(event: &Event, stream: Option<u64>) -> Result<Hold, c_int> {
    before_as(event, stream, true)
}

/// [`before`] for a replay of Marmoset's own (a recomputation): not one of the program's
/// writes, so the online policy's producers stay as they are.
pub fn before_replay(event: &Event, stream: Option<u64>) -> Result<Hold, c_int> {
    before_as(event, stream, false)
}

/// Before a replay of Marmoset's own takes its scratch: what the online policy dropped and the
/// replay reads is rebuilt now, so that a chain of rebuilds holds one replay's scratch at a
/// time, not every link's at once.
pub fn before_scratch(event: &Event, stream: Option<u64>) {
    if !active() {
        return;
    }
    if let Some(o) = online() {
        let (_, reads) = operands(event);
        (o.before_use)(event, &reads, stream.unwrap_or(0), false);
        (o.after_use)(event);
    }
}

/// The call's operands: each touched allocation's address with whether the call needs its
/// contents, and the allocations it reads.
fn operands(event: &Event) -> (Vec<(u64, bool)>, Vec<u64>) {
    let allocs: HashMap<u64, (u64, u64)> = event
        .touches()
        .iter()
        .filter_map(|t| crate::core::registry::allocation(t.alloc).map(|a| (t.alloc, a)))
        .collect();
    let roles = planner::shimtrace::roles(event, &allocs);
    let vas = roles
        .iter()
        .filter_map(|(id, role)| allocs.get(id).map(|a| (a.0, role.reads())))
        .collect();
    let reads = roles
        .iter()
        .filter(|(_, role)| role.reads())
        .map(|(id, _)| *id)
        .collect();
    (vas, reads)
}

fn before_as(event: &Event, stream: Option<u64>, program: bool) -> Result<Hold, c_int> {
    if !active() || event.touches().is_empty() {
        return Ok(Hold::none());
    }
    let (vas, reads) = operands(event);
    // What the online policy dropped and this call needs is rebuilt first; none of the call's
    // tensors is dropped again until it is held for the call (see `Online::after_use`).
    if let Some(o) = online() {
        (o.before_use)(event, &reads, stream.unwrap_or(0), program);
    }
    let held = with_room(|m| {
        m.ensure(&vas, stream.unwrap_or(0))?;
        Ok(Hold::take(m, vas.iter().map(|v| v.0).collect()))
    })
    .unwrap_or(Ok(Hold::none()));
    if let Some(o) = online() {
        (o.after_use)(event);
    }
    held
}

/// At exit: waits for the copies out still under way, so that their `evict` records are
/// written (the trace is flushed after this).
pub fn settle() {
    if let Ok(mut g) = MANAGER.try_lock()
        && let Some(m) = g.as_mut()
    {
        m.reclaim(true);
    }
}
