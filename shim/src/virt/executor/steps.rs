//! A plan as the hooks need it: per call offset within the iteration, what to do (evictions,
//! prefetches, drops, recomputations and their recipes), from the planner's decisions on its
//! model of the iteration.

use super::Ready;
use crate::core::config::Level;
use crate::core::state::log;
use crate::virt::recompute::Recipe;
use planner::iteration::TensorId;
use planner::model::Step;
use planner::timeline::{Decision, Stall};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The plan as the hooks need it: per call offset within the iteration, what to do.
pub(super) struct Steps {
    pub(super) period: usize,
    /// Tensors to prefetch before the call at this offset (its in-trigger).
    pub(super) prefetch: HashMap<usize, Vec<TensorId>>,
    /// Tensors to evict after the call at this offset (their evicted-access).
    pub(super) evict: HashMap<usize, Vec<TensorId>>,
    /// Tensors whose contents are dead after the call at this offset: the model frees them
    /// there (their next access overwrites them whole), or the plan recomputes them later.
    pub(super) drop: HashMap<usize, Vec<TensorId>>,
    /// Recomputations before the call at this offset (their back-access): indices in `recipes`.
    pub(super) recompute: HashMap<usize, Vec<usize>>,
    /// Tensor dropped for recomputation after the call at this offset, with its recipe.
    pub(super) dropped_at: HashMap<usize, Vec<(TensorId, usize)>>,
    /// The same drops by the offset of the operation's first call: a tensor the
    /// recomputations before it rebuild only as a source goes once they are done with it.
    pub(super) early: HashMap<usize, Vec<(TensorId, usize)>>,
    pub(super) recipes: Vec<(TensorId, Recipe)>,
    /// The launches whose current parameters recipes take, by offset: (recipe, chain member).
    pub(super) refresh: HashMap<usize, Vec<(usize, Option<usize>)>>,
    /// Recipes whose launches' parameters this iteration has not given them (the plan was
    /// adopted after one of those launches): not dropped until the next iteration, whose
    /// launches do (a kernel that draws from a generator's state by value would draw another
    /// mask with the iteration before's).
    pub(super) stale: std::collections::HashSet<usize>,
    /// Tensors whose back-access the plan's own timeline has waiting for the copy in: late by
    /// design (an in-trigger after the operation the swap relieves), not for the feedback to
    /// move. The allocator's own rule (`memory::take_late`: a prefetch that had to make room)
    /// does not cover these: without this set, `capuchin` on BERT at batch 4, half its peak,
    /// ran 59.33 ms against 56.11 predicted (55.99 with it; simulated).
    pub(super) waits: HashSet<TensorId>,
    /// Per call offset, the tensors the model's operation there reads or writes (an
    /// operation's at its first call): what the calls ahead need (see `executor::ahead`).
    pub(super) uses: Arc<[Vec<TensorId>]>,
    /// Per call offset, the memory the plan's own timeline leaves free while the call runs
    /// (the budget it planned within less the most it held during the operation there, or the
    /// one before): how much a prefetch moved there may take without making the allocator
    /// evict what the plan keeps. `None`: the timeline gave no memory curve.
    pub(super) room: Option<Vec<u64>>,
    /// The bytes each prefetched tensor takes in the model.
    pub(super) bytes: HashMap<TensorId, u64>,
}

impl Steps {
    pub(super) fn of(r: &Ready) -> Steps {
        let c = &r.converted;
        // Before an operation: before its first call; after it: after its last (a chain's
        // last member).
        let offset = |op: usize| c.ops.get(op).map(|o| o.0);
        let end = |op: usize| c.last_call(op);
        let mut s = Steps {
            period: r.found.period,
            prefetch: HashMap::new(),
            evict: HashMap::new(),
            drop: HashMap::new(),
            recompute: HashMap::new(),
            dropped_at: HashMap::new(),
            early: HashMap::new(),
            recipes: Vec::new(),
            refresh: HashMap::new(),
            stale: Default::default(),
            waits: r
                .outcome
                .stalls
                .iter()
                .filter_map(|st| match *st {
                    Stall::SwapIn { storage, .. } => c.storages.get(storage).map(|o| o.tensor),
                    _ => None,
                })
                .collect(),
            uses: uses(c, r.found.period),
            room: room(r),
            bytes: HashMap::new(),
        };
        let valid_until = planner::memory::carried_out::valid_until(&c.trace);
        let sourced = |storage: usize, back: usize| {
            planner::memory::carried_out::sourced(&c.trace, &valid_until, storage, back)
        };
        let mut last_op = None;
        for step in &c.trace.steps {
            match *step {
                Step::Op(o) => last_op = Some(o),
                Step::Free(st) => {
                    if let (Some(a), Some(origin)) = (last_op.and_then(end), c.storages.get(st)) {
                        s.drop.entry(a).or_default().push(origin.tensor);
                    }
                }
            }
        }
        for &(storage, d) in &r.plan {
            let Some(origin) = c.storages.get(storage) else {
                continue;
            };
            if let Decision::Swap {
                after,
                trigger,
                back,
            } = d
                && let (Some(a), Some(t), Some(b)) = (end(after), offset(trigger), offset(back))
                && a < t
                && t <= b
            {
                s.evict.entry(a).or_default().push(origin.tensor);
                s.prefetch.entry(t).or_default().push(origin.tensor);
                s.bytes
                    .insert(origin.tensor, c.trace.storages[storage].size);
            }
            // A recomputation the shim can replay: dropped after `after`, replayed before
            // `back` if its memory went meanwhile. Any other stays resident (costs memory, never
            // bytes).
            // Only where every source still holds its contents at the back-access: the shim
            // cannot keep a source past the program's free or overwrite of it (the planner's
            // `Extend`).
            if let Decision::Recompute { after, back } = d {
                let why = if !sourced(storage, back) {
                    "a source is freed or overwritten before its back-access"
                } else if !r.recipes.contains_key(&storage) {
                    "its producing call cannot be replayed"
                } else {
                    "its drop would not come before its back-access"
                };
                if let Some(recipe) = r.recipes.get(&storage).filter(|_| sourced(storage, back))
                    && let (Some(a), Some(b)) = (end(after), offset(back))
                    && a < b
                {
                    let i = s.recipes.len();
                    for (call, member) in recipe.launches() {
                        s.refresh.entry(call).or_default().push((i, member));
                    }
                    s.recipes
                        .push((origin.tensor, recipe.clone().for_target(origin.tensor)));
                    s.dropped_at.entry(a).or_default().push((origin.tensor, i));
                    if let Some(o) = offset(after) {
                        s.early.entry(o).or_default().push((origin.tensor, i));
                    }
                    s.recompute.entry(b).or_default().push(i);
                } else if back != usize::MAX {
                    log(
                        Level::Debug,
                        &format!(
                            "executor: {:?} stays resident: its planned recomputation is not carried out ({why})",
                            origin.tensor
                        ),
                    );
                }
            }
        }
        s
    }
}

/// Per call offset of the iteration, the memory the plan's timeline leaves free while the call
/// runs (see [`Steps::room`]); `None` without a memory curve.
fn room(r: &Ready) -> Option<Vec<u64>> {
    let c = &r.converted;
    let held = &r.outcome.usage.mem_at;
    if held.len() != c.trace.ops.len() {
        return None;
    }
    let spans: Vec<Option<(usize, usize)>> = (0..c.trace.ops.len())
        .map(|op| Some((c.ops.get(op)?.0, c.last_call(op)?)))
        .collect();
    Some(free_per_call(
        &spans,
        held,
        r.planned_within,
        r.found.period,
    ))
}

/// Per call offset of `period`: `within` less what `held` says the operation whose calls span
/// it (its first to its last, `spans`) holds at most, the least where spans meet; a call of no
/// operation (the model leaves out what touches no memory) gets the operation's before it, the
/// first ones all of `within`.
fn free_per_call(
    spans: &[Option<(usize, usize)>],
    held: &[u64],
    within: u64,
    period: usize,
) -> Vec<u64> {
    let mut out: Vec<Option<u64>> = vec![None; period];
    for (op, span) in spans.iter().enumerate() {
        let (Some((first, last)), Some(&h)) = (*span, held.get(op)) else {
            continue;
        };
        let free = within.saturating_sub(h);
        for x in out.iter_mut().take(last + 1).skip(first) {
            *x = Some(x.map_or(free, |y| y.min(free)));
        }
    }
    let mut before = within;
    out.into_iter()
        .map(|x| {
            before = x.unwrap_or(before);
            before
        })
        .collect()
}

/// Per call offset (of `period`), the tensors the operation that starts there reads, writes
/// or makes, by the model `c`.
fn uses(c: &planner::shimtrace::Converted, period: usize) -> Arc<[Vec<TensorId>]> {
    let mut out = vec![Vec::new(); period];
    for (op, o) in c.trace.ops.iter().enumerate() {
        let Some(&(offset, _)) = c.ops.get(op) else {
            continue;
        };
        let Some(list) = out.get_mut(offset) else {
            continue;
        };
        for &st in o.inputs.iter().chain(&o.outputs).chain(&o.mutates) {
            if let Some(origin) = c.storages.get(st)
                && !list.contains(&origin.tensor)
            {
                list.push(origin.tensor);
            }
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::free_per_call;

    /// Ten calls, a budget of 100: op 0 spans calls 1-2 holding 60, op 1 (a chain) calls 3-5
    /// holding 90, op 2 call 5 only (a call two spans share gets the lesser room) holding 95,
    /// op 3 call 8 holding 120 (over: no room). Calls of no operation take the one before's;
    /// call 0, before any, the whole budget.
    #[test]
    fn each_call_gets_the_room_its_operation_leaves() {
        let spans = [Some((1, 2)), Some((3, 5)), Some((5, 5)), Some((8, 8)), None];
        let held = [60, 90, 95, 120, 0];
        assert_eq!(
            free_per_call(&spans, &held, 100, 10),
            vec![100, 40, 40, 10, 10, 5, 5, 5, 0, 0]
        );
    }
}
