//! A lower bound on the makespan any plan can reach for a trace and a budget: a relaxation of
//! the joint swap and recompute problem, taken one operation at a time.
//!
//! At an operation `p` where the program's load is over the budget by `over`, some `over` bytes
//! must be absent while `p` runs. What `p` reads or writes cannot be; nothing read again (and not
//! a weight) is free to drop; every other tensor alive across `p` may be
//! - swapped: out after its last access before `p` and before `p` starts, in after `p` ends and
//!   before its next access. With a slack of `σ` seconds over the compute time `C`, `p` starts by
//!   `σ + start(p)` and the next access by `σ + start(back)` (everything after still has to
//!   run), so each copy must fit its window, and all the bytes out at `p` must pass the D2H
//!   engine before `σ + start(p)` and the H2D engine after `end(p)`, within `σ + C - end(p)`;
//! - recomputed: at least its producer's time, which adds to the compute stream (`≤ σ`), one
//!   producer re-run bringing back all its outputs; cheapest per byte first (a fractional
//!   knapsack, a relaxation of the integral choice).
//!
//! A tensor is swapped or recomputed, not both: the engines take the tensors dearest to
//! recompute (the best use of their bytes: exchanging a swapped byte for a dearer one never
//! costs more recomputation), the knapsack the rest.
//!
//! The bound at `p` is the least `σ` that covers `over` this way (found by bisection, as more
//! slack never covers less); the bound on the makespan is `C` plus the largest over all `p`.
//! Relaxed: sources a recomputation needs cost nothing, a re-run is charged by the byte, and
//! each operation is taken alone. Weights stay resident after their last use (the optimizer and
//! the next iteration read them), as every policy here keeps them.

use super::Deadline;
use super::analysis::Analysis;
use crate::model::{Step, Trace};
use crate::timeline::{Link, simulate};

/// The bound, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// No plan's makespan is below this (infinite when no plan can keep within the budget).
    pub makespan: f64,
    /// The operation whose relaxation gives the bound (None: the compute time alone).
    pub at: Option<usize>,
}

impl Bound {
    /// Whether some plan might keep within the budget.
    pub fn feasible(&self) -> bool {
        self.makespan.is_finite()
    }
}

/// The storages alive, as a list (walked at every operation over the budget) with each one's
/// place in it.
struct Alive {
    list: Vec<usize>,
    at: Vec<Option<usize>>,
}

impl Alive {
    fn new(t: &Trace) -> Alive {
        let mut a = Alive {
            list: Vec::new(),
            at: vec![None; t.storages.len()],
        };
        for (s, st) in t.storages.iter().enumerate() {
            if st.constant {
                a.set(s, true);
            }
        }
        a
    }

    fn set(&mut self, s: usize, alive: bool) {
        match (self.at[s], alive) {
            (None, true) => {
                self.at[s] = Some(self.list.len());
                self.list.push(s);
            }
            (Some(k), false) => {
                self.list.swap_remove(k);
                if let Some(&moved) = self.list.get(k) {
                    self.at[moved] = Some(k);
                }
                self.at[s] = None;
            }
            _ => {}
        }
    }
}

/// One tensor that could be absent at `p`: its bytes, the slack it needs to swap, and its
/// producer (`None`: a weight, which only swapping can move).
struct Absent {
    size: u64,
    swap_slack: f64,
    producer: Option<usize>,
}

/// The lower bound for `t` under `budget` on `link` (see the module's text).
pub fn lower_bound(t: &Trace, a: &Analysis, budget: u64, link: Link) -> Bound {
    lower_bound_until(t, a, budget, link, &|| true).expect("no deadline")
}

/// [`lower_bound`], or `None` once `more` says time is up (asked at each operation over the
/// budget: on a 10,000-operation trace the bound takes a good part of a second).
pub(super) fn lower_bound_until(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> Option<Bound> {
    let compute = t.compute_time();
    let probe = simulate(t, budget, link, &Vec::new());
    let mut over_at = vec![0u64; t.ops.len()];
    for &(p, over) in &probe.overs {
        over_at[p] = over;
    }
    let mut bound = Bound {
        makespan: compute,
        at: None,
    };
    // The storages the program holds during each operation, in program order.
    let mut alive = Alive::new(t);
    for step in &t.steps {
        let p = match *step {
            Step::Free(s) => {
                alive.set(s, false);
                continue;
            }
            Step::Op(p) => p,
        };
        let op = &t.ops[p];
        for &s in &op.outputs {
            alive.set(s, true);
        }
        for &(old, new) in &op.inplace {
            alive.set(old, false);
            alive.set(new, true);
        }
        if over_at[p] > 0 {
            if !more() {
                return None;
            }
            let floor = bound.makespan - compute;
            let slack = slack_at(t, a, &alive.list, p, over_at[p], link, compute, floor);
            if compute + slack > bound.makespan {
                bound = Bound {
                    makespan: compute + slack,
                    at: Some(p),
                };
            }
        }
    }
    Some(bound)
}

/// The least slack over the compute time with which `over` bytes can be absent at `p`
/// (infinite when they cannot be at all), or 0 when `floor` (the bound so far) is enough.
#[allow(clippy::too_many_arguments)]
fn slack_at(
    t: &Trace,
    a: &Analysis,
    alive: &[usize],
    p: usize,
    over: u64,
    link: Link,
    compute: f64,
    floor: f64,
) -> f64 {
    let mut need = over;
    let mut absent: Vec<Absent> = Vec::new();
    for &s in alive {
        let st = &t.storages[s];
        let acc = &a.accesses[s];
        let next = acc.partition_point(|&x| x < p);
        if acc.get(next) == Some(&p) {
            continue;
        }
        let Some(&back) = acc.get(next) else {
            if !st.constant {
                need = need.saturating_sub(st.size);
            }
            continue;
        };
        let out_from = next.checked_sub(1).map_or(0.0, |k| a.end[acc[k]]);
        let size = st.size as f64;
        let swap_slack = (size / link.d2h - (a.start[p] - out_from))
            .max(size / link.h2d - (a.start[back] - a.end[p]))
            .max(0.0);
        absent.push(Absent {
            size: st.size,
            swap_slack,
            producer: if st.constant { None } else { st.producer },
        });
    }
    if need == 0 {
        return 0.0;
    }
    let engines = |slack: f64| {
        (link.d2h * (slack + a.start[p]))
            .min(link.h2d * (slack + compute - a.end[p]))
            .max(0.0)
    };
    // Most operations cannot raise the bound: swapping alone covers them at the bound so far.
    let swappable: u64 = absent
        .iter()
        .filter(|x| x.swap_slack <= floor)
        .map(|x| x.size)
        .sum();
    if (swappable as f64).min(engines(floor)) >= need as f64 {
        return 0.0;
    }
    // Each tensor's price per byte recomputed: its producer's time over the bytes one re-run
    // of it brings back here (a weight, or a tensor without a producer: infinite).
    let mut by_producer: Vec<(usize, u64)> = absent
        .iter()
        .filter_map(|x| x.producer.map(|pr| (pr, x.size)))
        .collect();
    by_producer.sort_unstable();
    by_producer.dedup_by(|y, x| {
        let same = x.0 == y.0;
        if same {
            x.1 += y.1;
        }
        same
    });
    let price = |x: &Absent| {
        x.producer.map_or(f64::INFINITY, |pr| {
            let k = by_producer.partition_point(|g| g.0 < pr);
            t.ops[pr].time_s / by_producer[k].1.max(1) as f64
        })
    };
    // Dearest first: the copy engines take those (a tensor is swapped or recomputed, not
    // both), the rest is recomputed cheapest first.
    let mut priced: Vec<(f64, &Absent)> = absent.iter().map(|x| (price(x), x)).collect();
    priced.sort_by(|x, y| y.0.total_cmp(&x.0));
    let covers = |slack: f64| -> bool {
        let swappable = |x: &Absent| x.swap_slack <= slack;
        // The engines take whole tensors, dearest first, until they are full: those before
        // `full` (if swappable), and `part` bytes of the one at `full`.
        let mut room = engines(slack);
        let mut rest = need as f64;
        let (mut full, mut part) = (priced.len(), 0.0);
        for (k, &(_, x)) in priced.iter().enumerate() {
            if !swappable(x) {
                continue;
            }
            let size = x.size as f64;
            if size >= room {
                (full, part) = (k, room);
                rest -= room;
                break;
            }
            room -= size;
            rest -= size;
        }
        let mut spent = 0.0;
        for (k, &(pr, x)) in priced.iter().enumerate().rev() {
            if rest <= 0.0 || !pr.is_finite() {
                break;
            }
            let size = x.size as f64;
            let left = if k > full || !swappable(x) {
                size
            } else if k == full {
                size - part
            } else {
                0.0
            };
            let take = rest.min(left);
            spent += pr * take;
            rest -= take;
        }
        rest <= 0.0 && spent <= slack
    };
    if covers(floor) {
        return 0.0;
    }
    // Enough slack for every window, both engines and every re-run.
    let total: u64 = absent.iter().map(|x| x.size).sum();
    let mut hi = absent.iter().map(|x| x.swap_slack).fold(0.0, f64::max)
        + total as f64 / link.d2h.min(link.h2d)
        + by_producer.iter().map(|x| t.ops[x.0].time_s).sum::<f64>();
    if !covers(hi) {
        return f64::INFINITY;
    }
    let mut lo = floor;
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if covers(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // `lo` never covers: the least slack that does lies above it.
    lo
}
