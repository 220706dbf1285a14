//! The rules of a plan as the shim carries it out: what it can and cannot do of a policy's
//! plan, given when the program frees and overwrites each tensor. Every policy's plan is judged
//! (and its prediction made) as carried out.

use crate::model::{Step, Trace};
use crate::timeline::{Decision, Link, Outcome, Plan};

/// The plan as the shim carries it out: the shim cannot keep a tensor past the program's free
/// or overwrite of it, so it does no `Extend`, and a recomputation whose sources (its producer's
/// inputs) are not all still there at its back-access, as the program frees and overwrites
/// them, is not carried out (the tensor stays resident). Nor is a drop for good (`back` never):
/// the shim drops dead contents at the program's free of them (the model's `Free`), and a
/// tensor the program still holds may be read in the next iteration.
pub fn carried_out(t: &Trace, plan: &Plan) -> Plan {
    let until = valid_until(t);
    plan.iter()
        .copied()
        .filter(|&(st, d)| match d {
            Decision::Extend { .. } => false,
            Decision::Recompute {
                back: usize::MAX, ..
            } => false,
            Decision::Recompute { back, .. } => sourced(t, &until, st, back),
            Decision::Swap { .. } => true,
        })
        .collect()
}

/// A policy's plan and its replay as the shim carries them out ([`carried_out`]), replayed
/// again where that left decisions out: the prediction the shim's plan record gives, and the
/// one `marmoset plan` gives on the trace of a planned run.
pub fn as_carried_out(
    t: &Trace,
    budget: u64,
    link: Link,
    (plan, outcome): (Plan, Outcome),
) -> (Plan, Outcome) {
    let done = carried_out(t, &plan);
    if done.len() == plan.len() {
        return (plan, outcome);
    }
    let o = crate::timeline::simulate(t, budget, link, &done);
    (done, o)
}

/// Through which operation each content stays in its allocation: its last read (the program
/// frees or overwrites it after), the operation that updates it in place, or for good
/// (`usize::MAX`). A replay at a back-access after that would read what is there by then.
pub fn valid_until(t: &Trace) -> Vec<usize> {
    let mut until = vec![usize::MAX; t.storages.len()];
    for (o, op) in t.ops.iter().enumerate() {
        for &(old, _) in &op.inplace {
            until[old] = until[old].min(o);
        }
    }
    let mut at = None;
    for step in &t.steps {
        match (*step, at) {
            (Step::Op(o), _) => at = Some(o),
            (Step::Free(st), Some(o)) => until[st] = until[st].min(o),
            _ => {}
        }
    }
    until
}

/// Whether a recomputation of `s` at operation `back` can be carried out: its [`slice`] exists.
pub fn sourced(t: &Trace, until: &[usize], s: usize, back: usize) -> bool {
    slice(t, until, s, back).is_some()
}

/// The most operations a recomputation replays (a slice longer than this is not carried out).
pub const SLICE_LIMIT: usize = 24;

/// The operations a recomputation of `s` at operation `back` replays, in program order (`until`:
/// [`valid_until`]): `s`'s producer, and the producers of every source of those that no longer
/// holds its contents at `back` because an operation updated it in place (TensorFlow forwards
/// an input's buffer as an op's output: a GEMM's output scaled in place, then read by a GELU's
/// kernels, each updating its own output in place). Those sources are rebuilt on the way, into
/// scratch of the replay's own, as each was before the update; the rest are read where they
/// are, so each must hold its contents at `back`. Each allocation the slice writes is the
/// replay's own from its first write on, so every version of it the slice reads is made by the
/// slice too (the update that made it joins). None: a source the program freed or overwrote
/// (nothing rebuilds it), one without a producer, or more than [`SLICE_LIMIT`] operations.
pub fn slice(t: &Trace, until: &[usize], s: usize, back: usize) -> Option<Vec<usize>> {
    // Replaced in place: gone at the operation that updated it (not freed before).
    let replaced = |i: usize| {
        until
            .get(i)
            .and_then(|&u| t.ops.get(u))
            .is_some_and(|op| op.inplace.iter().any(|v| v.0 == i))
    };
    let mut ops: Vec<usize> = Vec::new();
    let mut want = vec![s];
    let mut first: Option<Vec<usize>> = None;
    loop {
        while let Some(x) = want.pop() {
            let p = t.storages.get(x)?.producer?;
            if ops.contains(&p) {
                continue;
            }
            ops.push(p);
            if ops.len() > SLICE_LIMIT {
                return None;
            }
            for &i in &t.ops[p].inputs {
                if i == x || until.get(i).is_some_and(|&u| u >= back) {
                    continue;
                }
                // Gone by `back`: rebuilt on the way only where an update in place replaced
                // it (the program freed or overwrote the rest).
                if !replaced(i) {
                    return None;
                }
                want.push(i);
            }
        }
        // The allocations the slice writes are its own from their first write: a version of
        // one that a member reads is made by the slice too. Only a slice with an update in
        // place can write an allocation it also reads.
        if ops.len() > 1 || ops.iter().any(|&p| !t.ops[p].inplace.is_empty()) {
            let first = first.get_or_insert_with(|| first_versions(t));
            let written: Vec<usize> = ops
                .iter()
                .flat_map(|&p| {
                    let op = &t.ops[p];
                    op.outputs
                        .iter()
                        .chain(op.inplace.iter().map(|v| &v.1))
                        .map(|&o| first[o])
                })
                .collect();
            for &p in &ops {
                for &i in &t.ops[p].inputs {
                    let made = t.storages[i].producer.is_some_and(|q| ops.contains(&q));
                    if !made && written.contains(&first[i]) {
                        want.push(i);
                    }
                }
            }
        }
        if want.is_empty() {
            break;
        }
    }
    ops.sort_unstable();
    Some(ops)
}

/// Each storage's first version: itself, or for an in-place version the storage its chain of
/// updates began with (the versions of one allocation share its memory).
fn first_versions(t: &Trace) -> Vec<usize> {
    let mut first: Vec<usize> = (0..t.storages.len()).collect();
    for op in &t.ops {
        for &(old, new) in &op.inplace {
            if old < first.len() && new < first.len() {
                first[new] = first[old];
            }
        }
    }
    first
}
