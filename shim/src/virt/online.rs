//! The online policy: DTR's heuristic in process, for whatever no plan guides (the steps before
//! a program's iteration is found and planned, an iteration of a kind never seen, a program that
//! never repeats). When room is needed, the victim is the resident tensor with the least
//! `cost / (size x staleness)` (Kirisame et al., DTR), where the cost of a tensor the shim can
//! rebuild is its producing call's device time, and of any other its copy out and back in over
//! PCIe. A victim that can be rebuilt is dropped, without a copy, and replayed before its next
//! use (recomputation on a miss); the rest are swapped, as under `lru`, which the heuristic
//! becomes when nothing can be rebuilt.
//!
//! The rules that keep a drop exact:
//! - **The producing call.** Each replayable call's record and lineage are kept for the
//!   allocations it wrote (its first writes seen as writes, `planner::shimtrace::first_writes`),
//!   with the version of every allocation it touched; a later write to an allocation replaces or
//!   forgets its producer.
//! - **Sources unchanged.** A tensor is dropped only while its producer's sources hold the
//!   versions the call read, live, with bytes somewhere (resident, swapped, or dropped in turn
//!   and rebuilt first). Rebuilds go two deep at most (DTR's cascades, bounded): what a dropped
//!   tensor reads is not dropped after it. Before a call writes a dropped tensor's source, or
//!   the program frees one, the dropped tensor is rebuilt; a version moves on before the call
//!   that writes it.
//! - **Rebuilt before any use.** A call that touches a dropped tensor, the program's or a replay
//!   of Marmoset's own, gets it rebuilt first, on its stream.
//!
//! Only while no plan guides does it choose; what it dropped before a plan took over stays
//! dropped until used, and a plan that drops contents a dropped tensor reads has it rebuilt
//! first. Contents a plan releases as dead are guarded by the same recipes (see `dead`).
//! `MARMOSET_ONLINE=0` turns it off (least recently used, swapped; dead contents unguarded).

use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::virt::recompute::Recipe;
use planner::iteration::TensorId;
use planner::shimtrace::{
    first_writes, in_place_update, replay_scope, replays_in_shim, whole_copy,
};
use planner::trace::{Access, Event, Record, Replay};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

mod dead;
pub use dead::{guard, kept, lost};

/// The call that wrote an allocation's current contents, replayable.
#[derive(Clone)]
struct Producer {
    /// The call as its replay sees it, and its lineage.
    event: Arc<Event>,
    replay: Arc<Replay>,
    /// Exact in-place updates of the allocation since (a ReLU after a batch norm): replayed in
    /// order after the call, as one chain.
    members: Vec<(Arc<Event>, Arc<Replay>)>,
    /// Every allocation the call touched, with its version after the call.
    versions: Arc<[(u64, u64)]>,
    /// Its device time, once its timing record came (seconds).
    device_s: Option<f64>,
    seq: u64,
}

/// A dropped tensor: how to rebuild it, and what that reads.
struct Dropped {
    recipe: Recipe,
    sources: Vec<u64>,
    /// Dead contents a plan released, guarded (see `dead`): rebuilt only if read, forgotten
    /// when overwritten or when a source changes; with the length of its chain of guarded
    /// sources.
    guard: Option<u32>,
}

#[derive(Default)]
struct Online {
    sizes: HashMap<u64, u64>,
    /// Versions of the live allocations: each write moves one on, once before the call (see
    /// [`before_use`]) and once when its record comes.
    versions: HashMap<u64, u64>,
    /// Tensors of calls being prepared (between `before_use` and `after_use`): never dropped.
    busy: HashMap<u64, u32>,
    /// Allocations no call has written yet (by the records).
    unwritten: std::collections::HashSet<u64>,
    producers: HashMap<u64, Producer>,
    /// Each thread's lineage, for its next call.
    lineage: HashMap<u64, Arc<Replay>>,
    /// Calls whose timing has not come, with the allocations they produced.
    untimed: HashMap<u64, Vec<u64>>,
    dropped: HashMap<u64, Dropped>,
    /// MARMOSET_VERIFY: the bytes each dropped tensor held.
    saved: HashMap<u64, Vec<u8>>,
    /// How many dropped tensors read each allocation.
    read_by: HashMap<u64, u32>,
    /// Evictions' bytes and device time: the link's measured speed.
    evicted: (u64, f64),
    /// Replayable calls' device time and the bytes they produced: what a call whose timing
    /// has not come yet is estimated to cost.
    rate: (f64, u64),
}

static ONLINE: Mutex<Option<Online>> = Mutex::new(None);
/// Whether any tensor is dropped (kept in step with `dropped`): most calls take no lock.
static ANY: AtomicBool = AtomicBool::new(false);
/// Held while rebuilding, so that a call on another thread never finds a tensor half rebuilt.
static REBUILDING: Mutex<()> = Mutex::new(());

thread_local! {
    /// Set while this thread rebuilds: the replay's own check must not wait for itself.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn with<R>(f: impl FnOnce(&mut Online) -> R) -> Option<R> {
    let mut g = ONLINE.lock().ok()?;
    Some(f(g.get_or_insert_with(Online::default)))
}

/// Whether the passive mechanism chooses by the heuristic now: a planner policy, the setting
/// on, and no plan guiding.
pub fn choosing() -> bool {
    config().online && crate::virt::tracker::enabled() && !crate::virt::executor::guiding()
}

/// Sees one record (the bus's observer, under a planner policy).
pub fn observe(r: &Record) {
    if !config().online || !crate::virt::tracker::enabled() {
        return;
    }
    let _ = with(|o| o.see(r));
}

impl Online {
    fn see(&mut self, r: &Record) {
        match &r.event {
            Event::Lineage { replay } => {
                self.lineage.insert(r.tid, Arc::new(replay.clone()));
            }
            Event::Alloc {
                alloc,
                size,
                result,
                ..
            } if *result == 0 => {
                self.sizes.insert(*alloc, *size);
                self.versions.insert(*alloc, 0);
                self.unwritten.insert(*alloc);
            }
            Event::Free {
                alloc: Some(alloc), ..
            } => {
                self.sizes.remove(alloc);
                self.versions.remove(alloc);
                self.unwritten.remove(alloc);
                self.saved.remove(alloc);
                self.producers.remove(alloc);
                self.forget(*alloc);
            }
            Event::Timing { of, device_ms } => {
                let Some(made) = self.untimed.remove(of) else {
                    return;
                };
                let bytes: u64 = made.iter().filter_map(|a| self.sizes.get(a)).sum();
                self.rate.0 += device_ms * 1e-3;
                self.rate.1 += bytes;
                for a in made {
                    if let Some(p) = self.producers.get_mut(&a).filter(|p| p.seq == *of) {
                        p.device_s = Some(device_ms * 1e-3);
                    }
                }
            }
            Event::Evict {
                bytes, device_ms, ..
            } if *device_ms > 0.0 => {
                self.evicted.0 += bytes;
                self.evicted.1 += device_ms * 1e-3;
            }
            e if !e.touches().is_empty() => self.call(r, e),
            _ => {}
        }
    }

    /// A call: the versions of what it writes move on, and a replayable call becomes the
    /// producer of what it rebuilds.
    fn call(&mut self, r: &Record, event: &Event) {
        let lineage = self.lineage.remove(&r.tid);
        let seen = first_writes(
            event,
            |a| self.unwritten.contains(&a),
            |a| self.sizes.get(&a).copied(),
        );
        let mut written: Vec<u64> = Vec::new();
        for t in event.touches() {
            if t.access != Access::R && !written.contains(&t.alloc) {
                written.push(t.alloc);
                self.unwritten.remove(&t.alloc);
            }
        }
        // An in-place update of contents whose producer is known (and valid) joins its
        // chain: the contents are the chain's.
        let chained = lineage.as_ref().and_then(|l| {
            let a = in_place_update(event, Some(l), |a| self.sizes.get(&a).copied())?;
            let p = self.producers.get(&a)?;
            let valid = p
                .versions
                .iter()
                .all(|&(b, v)| self.versions.get(&b) == Some(&v) || written.contains(&b));
            valid.then(|| (a, p.clone(), l.clone()))
        });
        // A whole copy of contents whose producer is known (and valid): the copy's
        // destination has that producer's chain, the copy appended, as its own (a replay
        // rebuilds the source aside, then copies).
        let copied = whole_copy(event, |a| self.sizes.get(&a).copied()).and_then(|(src, dst)| {
            let p = self.producers.get(&src)?;
            let valid = p
                .versions
                .iter()
                .all(|&(b, v)| self.versions.get(&b) == Some(&v));
            valid.then(|| (dst, p.clone()))
        });
        for a in &written {
            if let Some(v) = self.versions.get_mut(a) {
                *v += 1;
            }
            self.producers.remove(a);
        }
        if let Some((dst, mut p)) = copied {
            p.members
                .push((Arc::new(event.clone()), Arc::new(Replay::Copy)));
            let mut versions = p.versions.to_vec();
            if let Some(&v) = self.versions.get(&dst) {
                versions.push((dst, v));
            }
            p.versions = versions.into();
            self.producers.insert(dst, p);
            return;
        }
        if let Some((a, mut p, l)) = chained {
            p.members.push((Arc::new(event.clone()), l));
            let mut versions: Vec<(u64, u64)> = p.versions.to_vec();
            for t in event.touches() {
                let Some(&v) = self.versions.get(&t.alloc) else {
                    continue;
                };
                match versions.iter_mut().find(|x| x.0 == t.alloc) {
                    Some(x) => x.1 = v,
                    None => versions.push((t.alloc, v)),
                }
            }
            p.versions = versions.into();
            self.producers.insert(a, p);
            return;
        }
        // A legacy convolution under μ-cuDNN ran as micro-batches its replay would not run
        // (a backend execution's replay runs as it ran: `recompute::cudnn`).
        let microbatched_conv = config().microbatching_legacy()
            && matches!(
                lineage.as_deref(),
                Some(Replay::Cudnn { conv: Some(_), .. })
            );
        let Some(lineage) =
            lineage.filter(|l| !microbatched_conv && replays_in_shim(&seen, Some(l)))
        else {
            return;
        };
        // What a replay rebuilds: its whole writes, but scratch (and batch normalisation's
        // statistics: see `replay_scope`).
        let scratch: Vec<u64> = match &*seen {
            Event::Cudnn { tensors, .. } | Event::Cublas { tensors, .. } => tensors
                .iter()
                .filter(|t| t.role == "workspace" || t.role == "reserve")
                .filter_map(|t| crate::core::registry::points_into(t.ptr).map(|x| x.0))
                .collect(),
            _ => Vec::new(),
        };
        let base = |a: u64| crate::core::registry::allocation(a).map(|x| x.0);
        let scope = replay_scope(&seen, base);
        let rebuilt: Vec<u64> = seen
            .touches()
            .iter()
            .filter(|t| t.access == Access::W && !scratch.contains(&t.alloc))
            .map(|t| t.alloc)
            .filter(|a| scope.as_ref().is_none_or(|s| s.0.contains(a)))
            .collect();
        if rebuilt.is_empty() {
            return;
        }
        let versions: Arc<[(u64, u64)]> = seen
            .touches()
            .iter()
            .filter(|t| !scratch.contains(&t.alloc))
            .filter_map(|t| Some((t.alloc, *self.versions.get(&t.alloc)?)))
            .collect();
        let event = Arc::new(seen.into_owned());
        for &a in &rebuilt {
            self.producers.insert(
                a,
                Producer {
                    event: event.clone(),
                    replay: lineage.clone(),
                    members: Vec::new(),
                    versions: versions.clone(),
                    device_s: None,
                    seq: r.seq,
                },
            );
        }
        self.untimed.insert(r.seq, rebuilt);
        // Timings come within a few calls; a call never timed is not waited for forever.
        if self.untimed.len() > 4096 {
            let oldest = self.untimed.keys().min().copied();
            if let Some(k) = oldest {
                self.untimed.remove(&k);
            }
        }
    }

    /// Allocation `a` is gone: it is no longer dropped, nor read by a dropped tensor's replay.
    fn forget(&mut self, a: u64) {
        if let Some(d) = self.dropped.remove(&a).filter(|d| d.guard.is_none()) {
            for s in d.sources {
                if let Some(n) = self.read_by.get_mut(&s) {
                    *n -= 1;
                    if *n == 0 {
                        self.read_by.remove(&s);
                    }
                }
            }
        }
        ANY.store(!self.dropped.is_empty(), Ordering::Relaxed);
    }

    /// A replay's device time: the call's own, measured; until its timing comes, the bytes it
    /// produced at the rate measured so far; before any, what copying them one way over the
    /// link would take (half a swap's cost: device memory is faster than the link).
    fn cost(&self, p: &Producer, a: u64) -> Option<f64> {
        p.device_s.or_else(|| {
            let (secs, bytes) = self.rate;
            let size = *self.sizes.get(&a)? as f64;
            Some(if bytes > 0 {
                secs / bytes as f64 * size
            } else {
                size / self.link_bps()
            })
        })
    }

    /// Allocation `a`'s sources if it can be dropped now, and its rebuild's cost (seconds): its
    /// replay's, and that of each source dropped too (rebuilt first, DTR's evicted
    /// neighbourhood, one level deep).
    fn droppable(&self, a: u64) -> Option<(f64, Vec<u64>)> {
        let p = self.producers.get(&a)?;
        // DTR's cost is the producing call's time: a chain with a cuDNN member (a bias added to
        // a convolution's output) costs another library call and its operands, and is rebuilt
        // for a guard only (see `dead`), never chosen as a victim.
        if p.members
            .iter()
            .any(|(e, _)| matches!(**e, Event::Cudnn { .. }))
        {
            return None;
        }
        // Rebuilds go two deep at most: nothing a dropped tensor reads is dropped after it,
        // and a dropped source must read only what holds its bytes.
        if self.dropped.contains_key(&a)
            || self.busy.contains_key(&a)
            || self.read_by.contains_key(&a)
        {
            return None;
        }
        let mut cost = self.cost(p, a)?;
        let mut sources = Vec::new();
        for &(b, v) in p.versions.iter() {
            // Another output of the call is written aside by the replay (see
            // `Recipe::for_target`): what it holds now does not matter.
            if b != a && p.rebuilds(b) {
                continue;
            }
            // Everything else the call touched holds what it held after the call: the target
            // its output, each source what it read.
            if self.versions.get(&b) != Some(&v) {
                return None;
            }
            if b != a {
                if let Some(d) = self.dropped.get(&b) {
                    // A guarded source may be forgotten, not rebuilt: it holds no bytes.
                    if d.guard.is_some() || d.sources.iter().any(|s| self.dropped.contains_key(s)) {
                        return None;
                    }
                    cost += self
                        .producers
                        .get(&b)
                        .and_then(|q| self.cost(q, b))
                        .unwrap_or(0.0);
                }
                sources.push(b);
            }
        }
        Some((cost, sources))
    }
}

impl Producer {
    /// Whether the call wrote `b` (an output: rebuilt by the replay, or written aside).
    fn rebuilds(&self, b: u64) -> bool {
        self.event
            .touches()
            .iter()
            .any(|t| t.alloc == b && t.access == Access::W)
    }
}

/// The measured PCIe speed of this run's evictions (bytes per second), else of the copy that
/// measured the link for a plan, else a PCIe 4.0 x16 link's.
pub fn link_bps() -> f64 {
    with(|o| o.link_bps()).unwrap_or_else(unmeasured_link)
}

fn unmeasured_link() -> f64 {
    crate::virt::memory::link::measured().unwrap_or(25e9)
}

impl Online {
    fn link_bps(&self) -> f64 {
        let (bytes, secs) = self.evicted;
        if bytes > 0 && secs > 0.0 {
            bytes as f64 / secs
        } else {
            unmeasured_link()
        }
    }
}

/// Whether allocation `a` is dropped, to be rebuilt before its next use.
pub fn is_dropped(a: u64) -> bool {
    ANY.load(Ordering::Relaxed) && with(|o| o.dropped.contains_key(&a)).unwrap_or(false)
}

/// Allocation `a`'s replay cost (seconds) and sources, if it can be dropped now (asked by the
/// memory manager, under its lock).
pub fn droppable(a: u64) -> Option<(f64, Vec<u64>)> {
    with(|o| o.droppable(a)).flatten()
}

/// Allocation `a` is being dropped (asked by the memory manager, under its lock, right before
/// it releases the memory): true when its recipe is made and it is counted as dropped; false
/// when it cannot be rebuilt, and must be kept or swapped.
pub fn drop(a: u64) -> bool {
    with(|o| {
        let Some((_, sources)) = o.droppable(a) else {
            return false;
        };
        let Some(recipe) = o.recipe(a) else {
            return false;
        };
        for &s in &sources {
            *o.read_by.entry(s).or_default() += 1;
        }
        o.dropped.insert(
            a,
            Dropped {
                recipe,
                sources,
                guard: None,
            },
        );
        ANY.store(true, Ordering::Relaxed);
        true
    })
    .unwrap_or(false)
}

impl Online {
    /// The recipe that rebuilds allocation `a` from its producer (and the in-place
    /// updates since), if the shim can replay it now.
    fn recipe(&self, a: u64) -> Option<Recipe> {
        let p = self.producers.get(&a)?;
        let sizes = &self.sizes;
        let name = |b: u64| {
            Some(TensorId::Persistent {
                alloc: b,
                size: *sizes.get(&b)?,
            })
        };
        let base = |b: u64| crate::core::registry::allocation(b).map(|x| x.0);
        let target = name(a)?;
        let recipe = Recipe::of(&p.event, &p.replay, name, base)?;
        let size = |b: u64| sizes.get(&b).copied();
        let members: Option<Vec<Recipe>> = p
            .members
            .iter()
            .map(|(e, l)| {
                Recipe::member(e, l, name, base, size).or_else(|| Recipe::copy(e, name, size))
            })
            .collect();
        let recipe = recipe.chain(members?, &[]).for_target(target);
        recipe.alive().is_ok().then_some(recipe)
    }
}

/// Before a call is issued (`program`: the program's, else a replay of Marmoset's own; `reads`:
/// the allocations whose contents it needs): the dropped tensors it touches, and those whose
/// sources it may write, are rebuilt first, on its stream (guarded dead contents only if it
/// reads them, forgotten otherwise: see `dead`); and what the program's call may write moves
/// to a new version now, so that nothing made from the old one is dropped from here on.
pub fn before_use(event: &Event, reads: &[u64], stream: u64, program: bool) {
    if !config().online || !crate::virt::tracker::enabled() {
        return;
    }
    let any = ANY.load(Ordering::Relaxed);
    let touches = event.touches();
    let _ = with(|o| {
        for t in touches {
            *o.busy.entry(t.alloc).or_default() += 1;
        }
    });
    if !program && !any {
        return;
    }
    let written: Vec<u64> = touches
        .iter()
        .filter(|t| program && t.access != Access::R)
        .map(|t| t.alloc)
        .collect();
    let _serial = serial(any);
    let due = with(|o| {
        let mut due = Vec::new();
        let mut stale = Vec::new();
        for (&a, d) in &o.dropped {
            let changed = touches.iter().any(|t| t.alloc == a)
                || written.iter().any(|w| d.sources.contains(w));
            match d.guard {
                None if changed => due.push(a),
                Some(_) if reads.contains(&a) => due.push(a),
                Some(_) if changed => stale.push(a),
                _ => {}
            }
        }
        // A replay of Marmoset's own rebuilds the same contents: what was made from them holds.
        for a in stale {
            if program {
                o.unguard(a);
            } else {
                o.dropped.remove(&a);
                o.saved.remove(&a);
            }
        }
        ANY.store(!o.dropped.is_empty(), Ordering::Relaxed);
        // Its producer stays: an in-place update joins it when the call's record comes.
        for w in &written {
            if let Some(v) = o.versions.get_mut(w) {
                *v += 1;
            }
        }
        due
    })
    .unwrap_or_default();
    rebuild(due, stream);
}

/// The call's tensors are held for it (or it failed): they may be dropped again.
pub fn after_use(event: &Event) {
    if !config().online || !crate::virt::tracker::enabled() {
        return;
    }
    let _ = with(|o| {
        for t in event.touches() {
            if let Some(n) = o.busy.get_mut(&t.alloc) {
                *n -= 1;
                if *n == 0 {
                    o.busy.remove(&t.alloc);
                }
            }
        }
    });
}

/// MARMOSET_VERIFY: keeps the bytes dropped tensor `a` held (the allocator, as it drops it).
pub fn saved(a: u64, bytes: Vec<u8>) {
    let _ = with(|o| o.saved.insert(a, bytes));
}

/// MARMOSET_VERIFY: the rebuilt bytes of `a` must be those it held when dropped; when they are
/// not, those go back, and it is kept from now on, not recomputed (its producer forgotten).
fn verify(a: u64, api: &str) {
    let Some(saved) = with(|o| o.saved.remove(&a)).flatten() else {
        return;
    };
    if crate::virt::memory::matches_or_restore(a, &saved) {
        return;
    }
    let _ = with(|o| o.producers.remove(&a));
    log(
        Level::Warn,
        &format!(
            "online: MARMOSET_VERIFY: replaying {api} did not give allocation {a} the bytes it held when dropped; its saved bytes are back, and it is kept from now on, not recomputed"
        ),
    );
}

/// Before the cuDNN execution plan at `plan` is destroyed: the dropped tensors rebuilt through
/// it are rebuilt now (on the legacy default stream, which waits for all others).
pub fn before_plan_gone(plan: u64) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let _serial = serial(true);
    let due = with(|o| {
        let through: Vec<(u64, bool)> = o
            .dropped
            .iter()
            .filter(|(_, d)| d.recipe.plans().contains(&plan))
            .map(|(b, d)| (*b, d.guard.is_some()))
            .collect();
        let mut due = Vec::new();
        for (b, guarded) in through {
            if guarded {
                o.unguard(b);
            } else {
                due.push(b);
            }
        }
        due
    })
    .unwrap_or_default();
    rebuild(due, 0);
}

/// Before a plan marks allocation `a`'s contents dead (they may go without a copy): the
/// dropped tensors rebuilt from it are rebuilt now, on `stream`.
pub fn before_loss(a: u64, stream: u64) {
    if !config().online || !crate::virt::tracker::enabled() || !ANY.load(Ordering::Relaxed) {
        return;
    }
    let _serial = serial(true);
    let due = with(|o| o.read_from(a)).unwrap_or_default();
    rebuild(due, stream);
}

/// Before the program frees allocation `a`: the dropped tensors rebuilt from it are rebuilt
/// now, on the free's stream; `a` itself, if dropped, is forgotten, and nothing made from it is
/// dropped from here on.
pub fn before_free(a: u64, stream: u64) {
    if !config().online || !crate::virt::tracker::enabled() {
        return;
    }
    let any = ANY.load(Ordering::Relaxed);
    let _serial = serial(any);
    // Nothing made from `a` is droppable from now; what was dropped is rebuilt while `a` still
    // counts as dropped, if it is, so that their replays rebuild it first.
    let due = with(|o| {
        o.versions.remove(&a);
        o.producers.remove(&a);
        o.unguard_readers(a);
        o.read_from(a)
    })
    .unwrap_or_default();
    rebuild(due, stream);
    let _ = with(|o| o.forget(a));
}

/// Rebuilds are one at a time across threads (`needed`: something is dropped), so that a call
/// on another thread never finds a tensor half rebuilt; a rebuild's own replays do not wait
/// for themselves.
fn serial(needed: bool) -> Option<std::sync::MutexGuard<'static, ()>> {
    (needed && !INSIDE.with(|i| i.get()))
        .then(|| REBUILDING.lock().unwrap_or_else(|p| p.into_inner()))
}

impl Online {
    /// The dropped tensors whose rebuild reads allocation `a` (but guarded dead contents,
    /// never rebuilt for their sources' sake).
    fn read_from(&self, a: u64) -> Vec<u64> {
        self.dropped
            .iter()
            .filter(|(b, d)| **b != a && d.guard.is_none() && d.sources.contains(&a))
            .map(|(b, _)| *b)
            .collect()
    }
}

/// Rebuilds each of the dropped tensors `due` on `stream`, one at a time: each is taken off the
/// dropped ones as its replay starts, so that a dropped source of it, still counted, is rebuilt
/// first by the replay's own check. Beyond the budget when no room is within it: the dropped
/// contents exist nowhere else.
fn rebuild(due: Vec<u64>, stream: u64) {
    if due.is_empty() {
        return;
    }
    let inside = INSIDE.with(|i| i.replace(true));
    for a in due {
        let Some(recipe) = with(|o| {
            let r = o.dropped.get(&a)?.recipe.clone();
            o.forget(a);
            Some(r)
        })
        .flatten() else {
            continue;
        };
        let done = crate::virt::recompute::replay(&recipe, stream).or_else(|why| {
            log(
                Level::Warn,
                &format!(
                    "online: rebuilding allocation {a} within the budget failed ({why}); rebuilding it beyond the budget"
                ),
            );
            crate::virt::memory::beyond_budget(|| crate::virt::recompute::replay(&recipe, stream))
        });
        match done {
            Ok(()) => {
                crate::core::bus::emit(Event::Recompute {
                    alloc: a,
                    api: recipe.api(),
                });
                verify(a, &recipe.api());
            }
            Err(why) => log(
                Level::Error,
                &format!("online: rebuilding allocation {a} failed ({why}); its contents are lost"),
            ),
        }
    }
    INSIDE.with(|i| i.set(inside));
}
