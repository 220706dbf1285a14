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

/// Whether every source of `s`'s producer still holds its contents at operation `back`
/// (`until`: [`valid_until`]); false for a storage without a producer.
pub fn sourced(t: &Trace, until: &[usize], s: usize, back: usize) -> bool {
    t.storages
        .get(s)
        .and_then(|st| st.producer)
        .is_some_and(|p| {
            t.ops[p]
                .inputs
                .iter()
                .all(|&i| until.get(i).is_some_and(|&u| u >= back))
        })
}
