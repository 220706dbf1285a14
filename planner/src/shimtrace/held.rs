//! The model as the shim's allocator holds memory. The shim plans it, not the trace's byte
//! counts: a tensor from the allocator's minimum size takes whole pages, a smaller one sits in
//! a pool that never moves (nothing to plan: its bytes come off the budget), and a replay's
//! workspace is Marmoset's own, whole pages too. The `plan` record says how memory was held,
//! so that `marmoset plan` on the run's trace plans the same model.

use crate::model::Trace;
use crate::trace::{Event, Held, Record};

/// Makes `t` the model as held by `h` (its budget: [`Held::left_of`]).
pub fn as_held(t: &mut Trace, h: &Held) {
    let gran = h.gran.max(1);
    t.page = gran;
    // A swap copies the tensor's own bytes, not its pages (the shim's copies in and out).
    t.copied = t
        .storages
        .iter()
        .map(|s| if s.size >= h.min_tensor { s.size } else { 0 })
        .collect();
    for s in &mut t.storages {
        s.size = if s.size >= h.min_tensor {
            s.size.div_ceil(gran) * gran
        } else {
            0
        };
    }
    for o in &mut t.ops {
        o.scratch = o.scratch.div_ceil(gran) * gran;
    }
}

/// Where the run's last plan that guided is among `records` (the memory feedback's declined
/// replans never guided), if any: the shim planned on the records before it.
pub fn last_guiding_plan(records: &[Record]) -> Option<usize> {
    records.iter().rposition(|r| {
        matches!(
            r.event,
            Event::Plan {
                declined: false,
                ..
            }
        )
    })
}

/// The model of a trace as the shim planned it: the records before its last plan that guided,
/// at their longest repetition ([`super::convert`]) where it has the plan's operations, else
/// as the shim's tracker found them where the trace says how (the `iteration` record of a fresh
/// plan: the records before it, at its period, or the one iteration it saw once; a plan
/// reused: the one made for its kind): steps that repeat one by one may also repeat every few
/// steps, a longer stretch. Where neither has the plan's operations, the longest repetition.
pub fn convert_as_planned(records: &[Record]) -> Result<super::Converted, String> {
    let Some(upto) = last_guiding_plan(records) else {
        return super::convert(records);
    };
    let head = &records[..upto];
    // The records before the plan at their longest repetition, where that is the shim's
    // iteration (as many operations as the plan's): the timings recorded since the iteration
    // was found are the ones a replan (the memory feedback's) was made with.
    let longest = super::convert(head);
    let ops_planned = match records[upto].event {
        Event::Plan { ops, .. } => ops,
        _ => 0,
    };
    if let Ok(c) = &longest
        && c.iteration.is_ok()
        && c.trace.ops.len() as u64 == ops_planned
    {
        return longest;
    }
    let as_found = || {
        // A plan reused was made fresh for its kind before.
        let fresh = match records[upto].event {
            Event::Plan {
                reused: true,
                iteration_kind: Some(kind),
                ..
            } => head.iter().rposition(|r| {
                matches!(r.event, Event::Plan { reused: false, declined: false,
                    iteration_kind: Some(k), .. } if k == kind)
            })?,
            _ => upto,
        };
        let head = &records[..fresh];
        let Event::Plan {
            start,
            period,
            ops,
            reused: false,
            ..
        } = records[fresh].event
        else {
            return None;
        };
        let found = head.iter().rposition(|r| {
            matches!(r.event, Event::Iteration { start: s, period: p, .. }
                if s == start && p == period)
        })?;
        let Event::Iteration { calls, .. } = head[found].event else {
            return None;
        };
        // The tracker had every record before the iteration record.
        let c = if calls > period {
            super::convert_with(&head[..found], true, Some(period as usize))
        } else {
            super::convert_once(head, true, start, head[found].seq)
        };
        c.ok()
            .filter(|c| c.iteration.is_ok() && c.trace.ops.len() as u64 == ops)
    };
    match as_found() {
        Some(c) => Ok(c),
        None => longest,
    }
}

/// How the run's last plan that guided held memory, and the PCIe bandwidths it assumed (host to
/// device, device to host, bytes per second); None where no plan record says.
pub fn held_and_links(records: &[Record]) -> (Option<Held>, Option<(f64, f64)>) {
    match last_guiding_plan(records).map(|i| &records[i].event) {
        Some(Event::Plan { held, pcie_bps, .. }) => (*held, *pcie_bps),
        _ => (None, None),
    }
}

/// Whether the last plan that guided was the joint plan's, with a cap on the workspace lent
/// a convolution: `marmoset plan` plans the trace so ([`crate::model::Trace::lends_workspaces`]).
pub fn lent_workspaces(records: &[Record]) -> bool {
    matches!(
        last_guiding_plan(records).map(|i| &records[i].event),
        Some(Event::Plan {
            workspace_cap: Some(_),
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Storage};

    #[test]
    fn a_held_model_rounds_to_pages_and_leaves_small_tensors_to_the_pool() {
        let mut t = Trace::default();
        for size in [100, 4096, 4097, 10_000] {
            t.storages.push(Storage {
                size,
                constant: false,
                producer: None,
            });
        }
        t.ops.push(Op {
            scratch: 1,
            ..Op::new("conv", 1.0, vec![], vec![])
        });
        let h = Held {
            gran: 4096,
            min_tensor: 4096,
            pool: 1000,
            preexisting: 500,
        };
        as_held(&mut t, &h);
        assert_eq!(h.left_of(50_000), 49_000);
        assert_eq!(h.left_of_device(50_000), 48_500);
        let sizes: Vec<u64> = t.storages.iter().map(|s| s.size).collect();
        assert_eq!(sizes, [0, 4096, 8192, 12_288]);
        // A swap copies the tensor's own bytes, not its pages.
        assert_eq!(t.copied, [0, 4096, 4097, 10_000]);
        assert_eq!(t.copy_bytes(3), 10_000);
        assert_eq!(t.ops[0].scratch, 4096);
        // The pool outgrows the budget: nothing left, not an underflow.
        assert_eq!(h.left_of(10), 0);
    }
}

#[cfg(test)]
mod guiding_tests {
    use super::*;

    #[test]
    fn a_declined_replan_is_not_the_plan_that_guided() {
        let plan = |seq: u64, budget: u64, declined: bool| {
            format!(
                r#"{{"seq":{seq},"t_ns":0,"tid":1,"kind":"plan","policy":"auto","budget":{budget},"start":0,"period":4,"ops":2,"swaps":0,"recomputes":0,"feasible":true,"predicted_ms":1.0,"planning_ms":1.0,"swap_bytes":0,"recompute_ms":0.0,"held":{{"gran":2097152,"min_tensor":{budget},"pool":0}},"feedback":{declined},"declined":{declined}}}"#
            )
        };
        let text = [
            r#"{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":1,"pid":1,"policy":"auto","marmoset":"0","run":"r"}"#.to_string(),
            plan(1, 1000, false),
            plan(2, 900, true),
        ]
        .join("\n");
        let records = crate::trace::read(&text).unwrap();
        assert_eq!(last_guiding_plan(&records), Some(1));
        let (held, _) = held_and_links(&records);
        assert_eq!(held.map(|h| h.min_tensor), Some(1000));
        assert_eq!(last_guiding_plan(&records[..1]), None);
    }
}
