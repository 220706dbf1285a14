//! What `marmoset plan` would do with a trace that recorded no decisions, under the budget
//! (simulated on the profile's PCIe links): the decisions and each storage's residency in
//! operation order.

use super::MAX_ROWS;
use crate::svg::{Row, State, bytes};
use std::collections::BTreeMap;

/// What `marmoset plan` would do with the trace under the budget (simulated).
pub struct Planned {
    pub policy: String,
    pub profile: String,
    pub outcome: planner::timeline::Outcome,
    pub base_s: f64,
    pub peak: u64,
    /// (storage, size, what, when).
    pub table: Vec<(usize, u64, String, String)>,
    pub rows: Vec<Row>,
    pub ops: usize,
}

pub fn plan(text: &str, budget: u64, policy: &str, profile: &str) -> Result<Planned, String> {
    use planner::timeline::Decision;
    let records = planner::trace::read(text)?;
    let t = planner::shimtrace::convert(&records).map(|c| c.trace)?;
    if t.ops.is_empty() {
        return Err("no timed operations: record the trace with MARMOSET_TRACE_TIMING=1".into());
    }
    let (prof, _) = simgpu_model::Profile::load(profile).map_err(|e| format!("--profile: {e}"))?;
    let link = planner::timeline::Link::from_profile(&prof);
    let (p, o) = planner::policy::run(policy, &t, budget, link).ok_or_else(|| {
        format!(
            "unknown policy {policy:?}: accepted are {}",
            planner::policy::POLICIES.join(", ")
        )
    })?;
    let n = t.ops.len();
    let op = |i: usize| format!("op {i} ({})", t.ops[i].name);
    let mut table = Vec::new();
    // Each storage's life in operation order: from its producer (or the start) to the step
    // after its last use.
    let mut first = vec![usize::MAX; t.storages.len()];
    let mut last = vec![0usize; t.storages.len()];
    for (i, o) in t.ops.iter().enumerate() {
        for &s in o.inputs.iter().chain(&o.outputs).chain(&o.mutates) {
            first[s] = first[s].min(i);
            last[s] = last[s].max(i + 1);
        }
    }
    let mut per: BTreeMap<usize, Vec<(f64, f64, State)>> = BTreeMap::new();
    for (s, d) in &p {
        let size = t.storages[*s].size;
        let segs = per.entry(*s).or_default();
        match *d {
            Decision::Swap {
                after,
                trigger,
                back,
            } => {
                table.push((
                    *s,
                    size,
                    "swap".into(),
                    format!(
                        "out after {}, in from op {trigger}, back at {}",
                        op(after),
                        op(back)
                    ),
                ));
                let a = after as f64 + 1.0;
                segs.push((a, a + 1.0, State::MovingOut));
                segs.push((a + 1.0, trigger as f64, State::OnHost));
                segs.push((trigger as f64, back as f64, State::MovingIn));
            }
            Decision::Recompute { after, back } if back == usize::MAX => {
                table.push((
                    *s,
                    size,
                    "drop".into(),
                    format!("after {}, its last use", op(after)),
                ));
                segs.push((after as f64 + 1.0, last[*s] as f64, State::Dropped));
            }
            Decision::Recompute { after, back } => {
                table.push((
                    *s,
                    size,
                    "recompute".into(),
                    format!(
                        "drop after {}, recompute with {} before {}",
                        op(after),
                        t.storages[*s]
                            .producer
                            .map(|q| t.ops[q].name.clone())
                            .unwrap_or_default(),
                        op(back)
                    ),
                ));
                segs.push((after as f64 + 1.0, back as f64, State::Dropped));
            }
            Decision::Extend { until } => {
                table.push((
                    *s,
                    size,
                    "keep".into(),
                    format!("past the program's free until {}", op(until)),
                ));
                last[*s] = last[*s].max(until + 1);
            }
        }
    }
    // Rows: storages the plan moves, largest first; else the largest.
    let mut chosen: Vec<usize> = per.keys().copied().collect();
    if chosen.is_empty() {
        chosen = (0..t.storages.len())
            .filter(|&s| first[s] != usize::MAX)
            .collect();
    }
    chosen.sort_by(|a, b| t.storages[*b].size.cmp(&t.storages[*a].size).then(a.cmp(b)));
    chosen.truncate(MAX_ROWS);
    let rows = chosen
        .into_iter()
        .map(|s| {
            let start = if t.storages[s].constant {
                0.0
            } else {
                first[s].min(n) as f64
            };
            let end = (last[s] as f64).max(start);
            let mut moves: Vec<(f64, f64, State)> = per.get(&s).cloned().unwrap_or_default();
            moves.retain(|m| m.1 > m.0);
            moves.sort_by(|a, b| a.0.total_cmp(&b.0));
            // Resident wherever no move is.
            let mut segs = Vec::new();
            let mut at = start;
            for mv in moves {
                if mv.0 > at {
                    segs.push((at, mv.0, State::Resident));
                }
                segs.push(mv);
                at = at.max(mv.1);
            }
            if end > at {
                segs.push((at, end, State::Resident));
            }
            Row {
                label: format!("storage {s} ({})", bytes(t.storages[s].size as f64)),
                size: t.storages[s].size,
                segments: segs,
            }
        })
        .collect();
    Ok(Planned {
        policy: policy.into(),
        profile: prof.name.clone(),
        outcome: o,
        base_s: t.compute_time(),
        peak: t.peak(),
        table,
        rows,
        ops: n,
    })
}
