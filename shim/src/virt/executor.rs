//! The executor: guided execution (Capuchin §4.2). A plan the bridge offers waits until the
//! next iteration boundary, then guides every iteration until the program diverges; a
//! divergence makes the rest of the iteration passive (the plan is dropped: the tracker looks
//! for the iteration again and the bridge replans).
//!
//! What it does, at each call's offset in the iteration:
//! - after the evicted-access, the eviction: the copy out on the swap-out stream, the host not
//!   waiting for it (the memory goes once it is done);
//! - at the in-trigger, the prefetch: the copy in on the swap-in stream, once the in-trigger's
//!   stream has reached it (where the plan's timeline starts it; the host may be far ahead),
//!   the back-access's stream waiting for it by event;
//! - after a last read, the drop of contents the model frees there (their next access
//!   overwrites them whole), and of contents it recomputes later: dead, they are the first to
//!   go, without a copy, when room is needed;
//! - before the back-access of a recomputed tensor whose memory went, the replay of its
//!   producing call (`recompute`), its dropped sources first; a source rebuilt only for it
//!   that the plan drops after this call goes as soon as the last replay that reads it is done.
//!
//! The plan names tensors as its iteration did (`TensorId`); the tracker gives the current
//! iteration's allocation. A swap that fails leaves the tensor where it is: the passive
//! mechanism restores on demand before any use. At each iteration boundary, the feedback: a
//! prefetch that arrived late by the device's clock starts one call earlier ([`feedback`]).

use crate::core::config::Level;
use crate::core::state::log;
use crate::virt::recompute::Recipe;
use crate::virt::sequence::Found;
use planner::iteration::TensorId;
use planner::shimtrace::Converted;
use planner::timeline::{Outcome, Plan};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A plan for the iteration the tracker found.
pub struct Ready {
    pub found: Found,
    /// The model (call offsets, tensor names) and the decisions the executor acts on.
    pub converted: Converted,
    pub plan: Plan,
    pub outcome: Outcome,
    /// The budget the plan keeps within, as its model holds memory: what `outcome`'s memory
    /// curve is measured against.
    pub planned_within: u64,
    /// For each storage the plan recomputes: its producing call, ready to replay.
    pub recipes: HashMap<usize, Recipe>,
    /// The most workspace the plan left room to lend a convolution (the joint plan's cap).
    pub workspace_cap: Option<u64>,
}

mod steps;
use steps::Steps;

struct Executor {
    /// A plan made since the last boundary.
    offered: Option<Arc<Ready>>,
    /// The plan guiding the current iteration.
    active: Option<Steps>,
    /// Iterations guided so far.
    guided: u64,
    /// Tensors dropped for recomputation and not yet brought back, with their recipe's index.
    dropped: Vec<(TensorId, usize)>,
    /// MARMOSET_VERIFY: the bytes each of them held when dropped.
    saved: Vec<(TensorId, Vec<u8>)>,
    /// Each of them as an allocation with its recipe pinned to allocations (taken at the drop).
    pinned: Vec<(TensorId, u64, Recipe)>,
    /// Tensors dropped for recomputation whose back-access the plan no longer reaches (the
    /// program diverged, or the iteration ended first): replayed before any call touches them.
    orphans: Vec<(u64, Recipe)>,
    /// Tensors rebuilt early for the call under way, dropped again after it (see
    /// `rebuild_touched`).
    redrop: Vec<(TensorId, usize, u64, Recipe)>,
    /// The iteration the guiding plan was made for (what a replan plans again).
    found: Option<Found>,
    /// The guiding plan fits the budget as its model counts (one that does not is not
    /// replanned for memory it was short of).
    feasible: bool,
    /// The guiding plan's predicted iteration, in seconds.
    predicted_s: f64,
    /// The iteration under way is guided from its first call (one a plan was adopted into
    /// midway began passively: what its passive calls left is not the plan's to answer for).
    whole: bool,
    /// A replan asked at the last boundary (see [`take_replan`]).
    replan: Option<Replan>,
}

/// A replan guided execution's memory feedback asks for.
pub struct Replan {
    /// The iteration to plan again.
    pub found: Found,
    /// The most memory a call needed beyond what the plan left it.
    pub short: u64,
    /// The guiding plan's predicted iteration, in seconds.
    pub predicted_s: f64,
}

static EXECUTOR: Mutex<Executor> = Mutex::new(Executor {
    offered: None,
    active: None,
    guided: 0,
    dropped: Vec::new(),
    saved: Vec::new(),
    pinned: Vec::new(),
    orphans: Vec::new(),
    redrop: Vec::new(),
    found: None,
    feasible: false,
    predicted_s: 0.0,
    whole: false,
    replan: None,
});

/// A new plan, applied from the next iteration boundary.
pub fn offer(r: Arc<Ready>) {
    if let Ok(mut e) = EXECUTOR.lock() {
        e.offered = Some(r);
    }
}

/// An iteration of `period` calls begins. Called with the tracker's lock held: nothing here
/// may reach the tracker.
pub fn boundary(period: usize) {
    if let Ok(mut e) = EXECUTOR.lock() {
        // Guided execution's memory feedback: an iteration the plan guided in which live
        // tensors it keeps had to leave for a call is planned again, within less (the model
        // and the allocator disagree by that much: pages, workspaces, timing).
        let short = crate::virt::memory::take_unplanned();
        if short > 0
            && e.active.is_some()
            && e.whole
            && e.feasible
            && e.offered.is_none()
            && let Some(found) = e.found.clone()
        {
            e.replan = Some(Replan {
                found,
                short,
                predicted_s: e.predicted_s,
            });
        }
        // A plan for another iteration (made before a divergence) is stale.
        if let Some(r) = e.offered.take()
            && r.found.period == period
        {
            let steps = Steps::of(&r);
            log(
                Level::Info,
                &format!(
                    "executor: the plan guides from this iteration ({:.3} ms predicted; {} evictions, {} prefetches, {} drops of dead contents planned)",
                    r.outcome.makespan * 1e3,
                    steps.evict.values().map(Vec::len).sum::<usize>(),
                    steps.prefetch.values().map(Vec::len).sum::<usize>(),
                    steps.drop.values().map(Vec::len).sum::<usize>()
                ),
            );
            set_uses(Some(steps.uses.clone()));
            e.active = Some(steps);
            e.found = Some(r.found.clone());
            e.feasible = r.outcome.feasible;
            e.predicted_s = r.outcome.makespan;
            GUIDING.store(true, Ordering::Relaxed);
            crate::virt::memory::set_guided(true);
            crate::core::own_memory::set_lend_cap(r.workspace_cap);
        }
        if let Some(s) = e.active.as_mut() {
            // Every launch of this iteration gives its recipes their parameters.
            s.stale.clear();
            e.guided += 1;
        }
        e.whole = e.active.is_some();
        orphan(&mut e);
        e.saved.clear();
    }
}

impl Executor {
    /// Tensor `name` (the plan's tensor `i`, allocation `id`) is dropped, to be rebuilt by
    /// `recipe` (pinned to allocations).
    fn note_drop(&mut self, name: TensorId, i: usize, id: u64, recipe: Recipe) {
        self.dropped.retain(|d| d.0 != name);
        self.dropped.push((name, i));
        self.pinned.retain(|q| q.0 != name);
        self.pinned.push((name, id, recipe));
    }
}

/// The tensors dropped for recomputation and not yet rebuilt become orphans.
fn orphan(e: &mut Executor) {
    let dropped = std::mem::take(&mut e.dropped);
    let pinned = std::mem::take(&mut e.pinned);
    for (name, _) in dropped {
        if let Some((_, id, r)) = pinned.iter().find(|p| p.0 == name) {
            e.orphans.retain(|o| o.0 != *id);
            e.orphans.push((*id, r.clone()));
        }
    }
    note_dropped(e);
}

/// The iteration under way is of a kind planned before, recognised from its first calls: its
/// plan guides from the next call (what it says of the calls already run is past).
pub fn adopt(r: Arc<Ready>) {
    let now = crate::virt::sequence::next_offset();
    if let Ok(mut e) = EXECUTOR.lock() {
        let mut steps = Steps::of(&r);
        // Launches already past in this iteration gave their recipes no parameters of it.
        if let Some(now) = now {
            steps.stale = steps
                .refresh
                .iter()
                .filter(|(call, _)| **call < now)
                .flat_map(|(_, list)| list.iter().map(|x| x.0))
                .collect();
        }
        e.offered = None;
        // Replacing a plan that guides (a replan): what it dropped is rebuilt before any use.
        let replacing = e.active.is_some();
        if replacing {
            orphan(&mut e);
        }
        set_uses(Some(steps.uses.clone()));
        e.active = Some(steps);
        e.found = Some(r.found.clone());
        e.feasible = r.outcome.feasible;
        e.predicted_s = r.outcome.makespan;
        // A plan replacing one that guided (a replan) answers for the iteration with it; one
        // taking over from passive execution does not.
        e.whole = e.whole && replacing;
        GUIDING.store(true, Ordering::Relaxed);
        crate::virt::memory::set_guided(true);
        crate::core::own_memory::set_lend_cap(r.workspace_cap);
        e.guided += 1;
    }
    // What the passive part of this iteration needed is not the plan's to answer for.
    crate::virt::memory::take_unplanned();
}

/// The replan asked at the last boundary, if any. Taken outside the tracker's lock (the
/// bridge reads the tracker's records).
pub fn take_replan() -> Option<Replan> {
    EXECUTOR.lock().ok()?.replan.take()
}

/// Whether the program has left a plan that guided it: it runs iterations of more than one
/// kind, and a plan's word that contents are dead is a prediction it may not keep.
static CHANGED: AtomicBool = AtomicBool::new(false);

/// The program left the planned sequence: passive until a new plan. Contents dropped as dead
/// and not yet released are kept from now on (see `CHANGED`).
pub fn diverged() {
    let guided = EXECUTOR
        .lock()
        .is_ok_and(|e| e.active.is_some() || e.offered.is_some());
    if guided {
        CHANGED.store(true, Ordering::Relaxed);
        crate::virt::memory::keep_dead();
    }
    if let Ok(mut e) = EXECUTOR.lock() {
        e.active = None;
        e.found = None;
        e.replan = None;
        set_uses(None);
        GUIDING.store(false, Ordering::Relaxed);
        crate::virt::memory::set_guided(false);
        crate::core::own_memory::set_lend_cap(None);
        e.offered = None;
        orphan(&mut e);
    }
}

/// Whether a plan guides the iteration under way (kept in step with the executor's `active`).
static GUIDING: AtomicBool = AtomicBool::new(false);

/// The guiding plan's [`Steps::uses`], apart from the executor's state: the allocator asks
/// for them while it makes room (under its own lock), and this lock is taken under no other.
static USES: Mutex<Option<Arc<[Vec<TensorId>]>>> = Mutex::new(None);

fn set_uses(uses: Option<Arc<[Vec<TensorId>]>>) {
    if let Ok(mut u) = USES.lock() {
        *u = uses;
    }
}

/// While a plan guides: how many calls ahead the plan's operations next touch each
/// allocation, from the next call over one iteration (see `sequence::next_uses`); what the
/// allocator chooses victims by then.
pub fn ahead() -> Option<HashMap<u64, usize>> {
    let uses = USES.lock().ok()?.clone()?;
    crate::virt::sequence::next_uses(&uses)
}

/// Whether a plan guides the iteration under way: while none does, the passive mechanism
/// chooses for itself (`virt::online`).
pub fn guiding() -> bool {
    GUIDING.load(Ordering::Relaxed)
}

#[derive(Clone, Copy)]
enum Kind {
    Prefetch,
    Evict,
    Drop,
}

/// What the plan says at the call at `offset`: its prefetches (before it), or its evictions or
/// drops (after it).
fn step(offset: usize, kind: Kind) -> Vec<TensorId> {
    let Ok(e) = EXECUTOR.lock() else {
        return Vec::new();
    };
    let Some(s) = &e.active else {
        return Vec::new();
    };
    if offset >= s.period {
        return Vec::new();
    }
    let m = match kind {
        Kind::Prefetch => &s.prefetch,
        Kind::Evict => &s.evict,
        Kind::Drop => &s.drop,
    };
    m.get(&offset).cloned().unwrap_or_default()
}

/// Before a call that will be recorded is forwarded: the recomputations and prefetches whose
/// back-access or in-trigger it is. `touches`: the call's own allocations (never evicted to make
/// room); `stream`: where it runs (recomputations go there, right before it).
pub fn before_call(touches: &[u64], stream: u64) {
    // Most calls find nothing dropped: no lock taken for it.
    let offset = crate::virt::sequence::next_offset();
    let planned = offset.map(recomputations).unwrap_or_default();
    if DROPPED.load(Ordering::Relaxed) {
        rebuild_touched(touches, stream, &planned);
    }
    let Some(offset) = offset else {
        return;
    };
    if !planned.is_empty() {
        recompute(&planned, stream, &early(offset), touches);
    }
    let ids: Vec<u64> = step(offset, Kind::Prefetch)
        .into_iter()
        .filter_map(crate::virt::sequence::resolve)
        .collect();
    // Those whose copy out is still queued keep their memory first (no room needed); then the
    // others come in, never at the cost of this call's tensors or of each other.
    let rest: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|&id| !crate::virt::memory::take_back(id))
        .collect();
    let mut protect = touches.to_vec();
    protect.extend(&ids);
    for id in rest {
        crate::virt::memory::prefetch(id, &protect, stream);
    }
}

/// A call that touches a tensor dropped for recomputation before its back-access (a kernel's
/// parameter word the model took for a stale hint, a program that strayed) gets it rebuilt
/// first: mapping it as it is would hand the call bytes that are not there. The model counts
/// the touch as no access (the contents' version is unchanged), so the tensor is dropped again
/// after the call, and its back-access rebuilds it again if its memory went meanwhile: memory
/// as planned, at the price of one more replay. Orphans are rebuilt for good.
fn rebuild_touched(touches: &[u64], stream: u64, planned: &[usize]) {
    orphans(touches, stream);
    let early: Vec<usize> = {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        let hit: Vec<(TensorId, usize, u64, Recipe)> = e
            .pinned
            .iter()
            .filter(|p| touches.contains(&p.1))
            .filter_map(|p| {
                let i = e.dropped.iter().find(|d| d.0 == p.0)?.1;
                // Its back-access: the plan's own recomputation comes next.
                (!planned.contains(&i)).then(|| (p.0, i, p.1, p.2.clone()))
            })
            .collect();
        let early = hit.iter().map(|h| h.1).collect();
        for h in &hit {
            log(
                Level::Debug,
                &format!(
                    "executor: allocation {} is touched before its back-access: rebuilt for the call, dropped again after it",
                    h.2
                ),
            );
        }
        e.redrop.extend(hit);
        early
    };
    if !early.is_empty() {
        recompute(&early, stream, &[], touches);
    }
}

/// After the call: the tensors rebuilt early for it are dropped again (their back-access is
/// still to come).
fn redrop() {
    let again = {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        if e.redrop.is_empty() {
            return;
        }
        let again = std::mem::take(&mut e.redrop);
        for (name, i, id, r) in &again {
            e.note_drop(*name, *i, *id, r.clone());
        }
        note_dropped(&e);
        again
    };
    for (name, _, id, _) in again {
        drop_contents(name, id);
    }
}

/// Drops the contents of tensor `name` (allocation `id`), dropped for recomputation; under
/// MARMOSET_VERIFY a host copy is kept first, to compare with the recomputed bytes.
fn drop_contents(name: TensorId, id: u64) {
    if crate::core::state::config().verify
        && let Some(bytes) = crate::virt::memory::snapshot(id)
        && let Ok(mut e) = EXECUTOR.lock()
    {
        e.saved.retain(|s| s.0 != name);
        e.saved.push((name, bytes));
    }
    crate::virt::memory::mark_dead(id);
}

/// Whether any tensor is dropped for recomputation or orphaned (kept in step with `pinned`
/// and `orphans`, under the executor's lock).
static DROPPED: AtomicBool = AtomicBool::new(false);

fn note_dropped(e: &Executor) {
    DROPPED.store(
        !e.pinned.is_empty() || !e.orphans.is_empty(),
        Ordering::Relaxed,
    );
}

/// Orphans this call touches are rebuilt first: their memory may have gone, and no plan step
/// will bring them back (the alternative is reading bytes that are not there).
fn orphans(touches: &[u64], stream: u64) {
    let due: Vec<(u64, Recipe)> = {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        if e.orphans.is_empty() {
            return;
        }
        e.orphans
            .retain(|o| crate::core::registry::allocation(o.0).is_some());
        let (due, rest) = std::mem::take(&mut e.orphans)
            .into_iter()
            .partition(|o| touches.contains(&o.0));
        e.orphans = rest;
        note_dropped(&e);
        due
    };
    for (id, recipe) in due {
        // Still there (taken back, or only marked dead): kept as it is.
        if crate::virt::memory::revive(id) {
            continue;
        }
        match rebuild(&recipe, stream, id) {
            Ok(()) => {
                crate::core::bus::emit(planner::trace::Event::Recompute {
                    alloc: id,
                    api: recipe.api().to_string(),
                });
                log(
                    Level::Info,
                    &format!(
                        "executor: allocation {id}, dropped for recomputation before the program left the plan, rebuilt before its use"
                    ),
                );
            }
            Err(why) => log(
                Level::Error,
                &format!(
                    "executor: recomputing allocation {id} failed ({why}); its contents are lost"
                ),
            ),
        }
    }
}

/// Replays `recipe` to rebuild allocation `id`. A replay that fails (no room within the budget
/// for its workspace or operands) runs once more beyond the budget: the dropped contents exist
/// nowhere else, and the budget is Marmoset's, not the device's.
fn rebuild(recipe: &Recipe, stream: u64, id: u64) -> Result<(), String> {
    crate::virt::recompute::replay(recipe, stream).or_else(|why| {
        log(
            Level::Warn,
            &format!(
                "executor: recomputing allocation {id} within the budget failed ({why}); rebuilding it beyond the budget"
            ),
        );
        crate::virt::memory::beyond_budget(|| crate::virt::recompute::replay(recipe, stream))
    })
}

/// What the active plan lists at call `offset` in one of its maps.
fn listed<T: Clone>(offset: usize, map: fn(&Steps) -> &HashMap<usize, Vec<T>>) -> Vec<T> {
    let Ok(e) = EXECUTOR.lock() else {
        return Vec::new();
    };
    e.active
        .as_ref()
        .and_then(|s| map(s).get(&offset).cloned())
        .unwrap_or_default()
}

/// The drops after the operation whose first call is at `offset` (see `Steps::early`).
fn early(offset: usize) -> Vec<(TensorId, usize)> {
    listed(offset, |s| &s.early)
}

/// The recipes to replay before the call at `offset`.
fn recomputations(offset: usize) -> Vec<usize> {
    listed(offset, |s| &s.recompute)
}

/// One step of a collective recomputation: recipe `i` rebuilds tensor `name`, reading
/// `sources` among the tensors the same recomputation rebuilds.
struct Rebuild {
    i: usize,
    name: TensorId,
    recipe: Recipe,
    sources: Vec<TensorId>,
}

/// The steps that rebuild the tensors of recipes `roots`, dropped for recomputation: each after
/// its dropped sources (Capuchin's collective recomputation), as the planner's model lays it
/// out (`timeline::Sim::chain`). They are no longer counted as dropped.
fn lay_out(e: &mut Executor, roots: &[usize]) -> Vec<Rebuild> {
    let Some(active) = e.active.as_ref() else {
        return Vec::new();
    };
    let index = |e: &Executor, name: TensorId| e.dropped.iter().find(|d| d.0 == name).map(|d| d.1);
    let mut order: Vec<Rebuild> = Vec::new();
    let mut seen: Vec<usize> = Vec::new();
    // Depth first, each step after its sources: (recipe, its sources pushed already).
    let mut stack: Vec<(usize, bool)> = roots.iter().rev().map(|&i| (i, false)).collect();
    while let Some((i, expanded)) = stack.pop() {
        let Some((name, recipe)) = active.recipes.get(i) else {
            continue;
        };
        if expanded {
            let sources = recipe
                .sources()
                .into_iter()
                .filter(|src| order.iter().any(|st| st.name == *src))
                .collect();
            order.push(Rebuild {
                i,
                name: *name,
                recipe: recipe.clone(),
                sources,
            });
            continue;
        }
        // Only what is dropped now, under this very recipe, and once.
        if seen.contains(&i) || !e.dropped.iter().any(|d| d.1 == i) {
            continue;
        }
        seen.push(i);
        stack.push((i, true));
        for src in recipe.sources().into_iter().rev() {
            if let Some(j) = index(e, src).filter(|j| !seen.contains(j)) {
                stack.push((j, false));
            }
        }
    }
    e.dropped.retain(|d| !order.iter().any(|st| st.i == d.1));
    e.pinned.retain(|p| !order.iter().any(|st| st.name == p.0));
    note_dropped(e);
    order
}

/// Recomputes the tensors of recipes `roots` whose memory went since they were dropped, their
/// dropped sources first (Capuchin's collective recomputation), before the call that touches
/// the allocations `touches`. A source rebuilt only for them that the plan drops after this
/// call (`early`, with its recipe) goes as soon as the last step that reads it is done, as in
/// the planner's model (`timeline::Sim::gather`): held until the call ended, a long chain's
/// sources took 270 MB the plan did not have (ResNet-50 at 0.3 of its peak).
fn recompute(roots: &[usize], stream: u64, early: &[(TensorId, usize)], touches: &[u64]) {
    let steps = {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        lay_out(&mut e, roots)
    };
    let mut uses: HashMap<TensorId, usize> = HashMap::new();
    for st in &steps {
        for src in &st.sources {
            *uses.entry(*src).or_default() += 1;
        }
    }
    for st in &steps {
        let Some(id) = crate::virt::sequence::resolve(st.name) else {
            continue;
        };
        // Still there (its memory was never needed meanwhile): kept as it is.
        if !crate::virt::memory::revive(id) {
            match rebuild(&st.recipe, stream, id) {
                Ok(()) => {
                    crate::core::bus::emit(planner::trace::Event::Recompute {
                        alloc: id,
                        api: st.recipe.api().to_string(),
                    });
                    verify(st.i, st.name, id, &st.recipe.api());
                }
                Err(why) => log(
                    Level::Error,
                    &format!(
                        "executor: recomputing allocation {id} failed ({why}); its contents are lost"
                    ),
                ),
            }
        }
        for src in &st.sources {
            let Some(n) = uses.get_mut(src) else { continue };
            *n -= 1;
            if *n == 0
                && let Some(&(_, j)) = early.iter().find(|d| d.0 == *src)
            {
                drop_early(*src, j, touches);
            }
        }
    }
}

/// Drops tensor `name`, rebuilt only as a source of a recomputation, once that is done with it
/// (the plan's recipe `j` rebuilds it later), unless the call itself touches it.
fn drop_early(name: TensorId, j: usize, touches: &[u64]) {
    let Some(recipe) = EXECUTOR
        .lock()
        .ok()
        .and_then(|e| Some(e.active.as_ref()?.recipes.get(j)?.1.clone()))
    else {
        return;
    };
    match droppable(name, &recipe) {
        Ok((id, _)) if touches.contains(&id) => {}
        Ok((id, pinned)) => {
            if let Ok(mut e) = EXECUTOR.lock() {
                e.note_drop(name, j, id, pinned);
                note_dropped(&e);
            }
            drop_contents(name, id);
        }
        Err(why) => log(
            Level::Debug,
            &format!(
                "executor: {name:?} is kept, not dropped for recomputation: replaying {}: {why}",
                recipe.api()
            ),
        ),
    }
}

/// Whether tensor `name` can be dropped for `recipe` to rebuild it: its allocation now and
/// the recipe pinned to allocations, or why not (a replay that failed after the drop would
/// lose the bytes). Asked without the executor's lock: the tracker and the memory manager
/// take their own.
fn droppable(name: TensorId, recipe: &Recipe) -> Result<(u64, Recipe), String> {
    recipe.ready()?;
    let id = crate::virt::sequence::resolve(name).ok_or("it has no allocation now")?;
    let pinned = recipe
        .pinned()
        .ok_or("one of its tensors has no allocation now")?;
    Ok((id, pinned))
}

/// Capuchin's feedback: a prefetch that arrived late starts one call earlier from the next
/// iteration on (never at or before its eviction), unless the plan has its back-access wait
/// for it: such an in-trigger sits after the operation the swap makes room for, and one call
/// earlier the copy in takes memory the plan did not leave there (the trainer at 0.3 of its
/// peak, simulated H100: moved one call earlier, a 512 MiB prefetch made the allocator evict
/// an activation the plan keeps, and restore it, every iteration: 46.4 ms against 28.4
/// predicted). Nor where the plan's own timeline leaves less memory free at the earlier call
/// than the tensor takes, for the same reason.
fn feedback() {
    let late = crate::virt::memory::take_late();
    if late.is_empty() {
        return;
    }
    // Names are resolved without the executor's lock (the tracker takes its own lock first).
    let planned: Vec<(usize, TensorId)> = {
        let Ok(e) = EXECUTOR.lock() else { return };
        let Some(s) = &e.active else { return };
        s.prefetch
            .iter()
            .flat_map(|(&o, names)| names.iter().map(move |&n| (o, n)))
            .filter(|(_, n)| !s.waits.contains(n))
            .collect()
    };
    for id in late {
        let Some(&(from, name)) = planned
            .iter()
            .find(|(_, n)| crate::virt::sequence::resolve(*n) == Some(id))
        else {
            continue;
        };
        let mut refused = None;
        let moved = {
            let Ok(mut e) = EXECUTOR.lock() else { return };
            let Some(s) = e.active.as_mut() else { return };
            let evicted_at = s
                .evict
                .iter()
                .filter(|(o, names)| **o < from && names.contains(&name))
                .map(|(&o, _)| o)
                .max();
            // The memory the plan leaves at the earlier call, and what the tensor takes.
            let room = |to: usize| match (&s.room, s.bytes.get(&name)) {
                (Some(room), Some(&bytes)) => room.get(to).map(|&r| (r, bytes)),
                _ => None,
            };
            match from
                .checked_sub(1)
                .filter(|&t| evicted_at.is_none_or(|a| t > a))
            {
                Some(to) if room(to).is_some_and(|(r, b)| r < b) => {
                    let (r, b) = room(to).unwrap_or_default();
                    refused = Some((to, r, b));
                    None
                }
                Some(to) => {
                    if let Some(v) = s.prefetch.get_mut(&from) {
                        v.retain(|&n| n != name);
                    }
                    s.prefetch.entry(to).or_default().push(name);
                    Some(to)
                }
                None => None,
            }
        };
        if let Some((to, room, bytes)) = refused {
            log(
                Level::Debug,
                &format!(
                    "executor: the late prefetch of allocation {id} stays at call {from}: the plan leaves {room} B free at call {to}, it takes {bytes} B"
                ),
            );
        }
        if let Some(to) = moved {
            crate::core::bus::emit(planner::trace::Event::Trigger {
                alloc: id,
                from: from as u64,
                to: to as u64,
            });
        }
    }
}

/// MARMOSET_VERIFY: the recomputed bytes must be those the tensor held when it was dropped;
/// when they are not, those bytes are written back and the tensor is never recomputed again
/// under this plan (kept instead).
fn verify(i: usize, name: TensorId, id: u64, api: &str) {
    let saved = {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        let Some(pos) = e.saved.iter().position(|s| s.0 == name) else {
            return;
        };
        e.saved.remove(pos).1
    };
    if crate::virt::memory::matches_or_restore(id, &saved) {
        return;
    }
    log(
        Level::Warn,
        &format!(
            "executor: MARMOSET_VERIFY: replaying {api} did not give allocation {id} the bytes it held when dropped; its saved bytes are back, and it is kept from now on, not recomputed"
        ),
    );
    if let Ok(mut e) = EXECUTOR.lock()
        && let Some(s) = e.active.as_mut()
    {
        for list in s.recompute.values_mut() {
            list.retain(|&j| j != i);
        }
        for list in s.dropped_at.values_mut() {
            list.retain(|&(_, j)| j != i);
        }
    }
}

/// After a recorded call (the tracker has seen it): the evictions whose evicted-access it was,
/// and the drops of contents that are dead from here or recomputed later.
pub fn after_call() {
    if DROPPED.load(Ordering::Relaxed) {
        redrop();
    }
    let params = crate::virt::recompute::take_params();
    let Some(offset) = crate::virt::sequence::last_offset() else {
        return;
    };
    if let Some(params) = params
        && let Ok(mut e) = EXECUTOR.lock()
        && let Some(s) = e.active.as_mut().filter(|s| offset < s.period)
        && let Some(list) = s.refresh.get(&offset).cloned()
    {
        // This iteration's parameters for the recipes of the launch just made, before any of
        // its outputs is dropped (below).
        for (i, member) in list {
            if let Some((_, r)) = s.recipes.get_mut(i) {
                r.refresh(member, &params);
            }
        }
    }
    feedback();
    for name in step(offset, Kind::Evict) {
        if let Some(id) = crate::virt::sequence::resolve(name) {
            crate::virt::memory::evict_planned(id);
        }
    }
    // The model's frees: contents dead until their next overwrite if the program goes on as
    // planned. Released without a copy while the program has never left a plan; once it has
    // (it runs iterations of several kinds), a continuation the plan did not foresee may read
    // them, and they are kept (copied out when their memory goes).
    let changes = CHANGED.load(Ordering::Relaxed);
    for name in step(offset, Kind::Drop) {
        if let Some(id) = crate::virt::sequence::resolve(name) {
            if changes {
                crate::virt::memory::mark_dead_kept(id);
            } else {
                crate::virt::memory::mark_dead(id);
            }
        }
    }
    // (name, recipe index, recipe, whether this iteration gave the recipe its parameters)
    let planned: Vec<(TensorId, usize, Recipe, bool)> = {
        let Ok(e) = EXECUTOR.lock() else { return };
        e.active
            .as_ref()
            .filter(|s| offset < s.period)
            .and_then(|s| {
                let list = s.dropped_at.get(&offset)?;
                Some(
                    list.iter()
                        .filter_map(|&(n, i)| {
                            Some((n, i, s.recipes.get(i)?.1.clone(), !s.stale.contains(&i)))
                        })
                        .collect(),
                )
            })
            .unwrap_or_default()
    };
    // Dropped only if the replay can be carried out (asked without the executor's lock: the
    // tracker and the memory manager take their own): a replay that failed after the drop
    // would lose the bytes. Otherwise the plan still has the memory go here: the tensor is
    // swapped out instead, and restored when the program reads it (left resident, the
    // allocator would make the room the plan counts on by evicting what the plan keeps).
    let mut drops = Vec::new();
    for (name, i, recipe, fresh) in planned {
        let ready = if fresh {
            droppable(name, &recipe)
        } else {
            Err("its launch in this iteration came before the plan was adopted".into())
        };
        match ready {
            Ok((id, p)) => drops.push((name, i, id, p)),
            Err(why) => {
                let swapped = crate::virt::sequence::resolve(name)
                    .is_some_and(crate::virt::memory::evict_planned);
                log(
                    Level::Debug,
                    &format!(
                        "executor: {name:?} is not dropped for recomputation (replaying {}: {why}): {}",
                        recipe.api(),
                        if swapped {
                            "swapped out instead"
                        } else {
                            "kept"
                        }
                    ),
                );
            }
        }
    }
    {
        let Ok(mut e) = EXECUTOR.lock() else { return };
        for (name, i, id, p) in &drops {
            e.note_drop(*name, *i, *id, p.clone());
        }
        note_dropped(&e);
    }
    for (name, _, id, _) in drops {
        drop_contents(name, id);
    }
}
