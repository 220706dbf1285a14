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
//! A source an in-place write overwrote is no source any longer: a re-run of the operation that
//! overwrote it needs it recomputed first (its memory became the new version, so only a
//! recomputation brings it back). Where that operation is its only reader, no other
//! recomputation needs it, so the re-run is charged its producer's time too (and that
//! producer's own such sources, in turn): `relu_` after a batch norm costs the batch norm as
//! well. The producer's time is split between the version and its other outputs by their
//! bytes, so one re-run of it is never charged twice. Each operation is taken both ways, with
//! and without these charges (the split may price the producer's other outputs below the
//! plain charge), and needs the larger slack.
//!
//! The bound at `p` is the least `σ` that covers `over` this way (found by bisection, as more
//! slack never covers less); the bound on the makespan is `C` plus the largest over all `p`.
//! Relaxed: sources a recomputation needs cost nothing (but for the overwritten ones above), a
//! re-run is charged by the byte, and each operation is taken alone (a joint linear relaxation
//! over every operation over the budget, with the same windows and engines, solved offline by
//! an LP solver on DenseNet-121 at half its peak on the p100's link, gave no more: the
//! operation at the peak decides). Weights stay resident after their last use (the optimizer
//! and the next iteration read them), as every policy here keeps them.

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
    /// The bytes its swap copies (at most `size`: a held model's pages).
    copy: u64,
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
    lower_bound_by(t, a, budget, link, more, true)
}

/// [`lower_bound_until`], or (`chained` false) without the overwritten sources' charges: the
/// bound before them, which the tests hold it to be at or above.
pub(super) fn lower_bound_by(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    chained: bool,
) -> Option<Bound> {
    let compute = t.compute_time();
    let probe = simulate(t, budget, link, &Vec::new());
    let mut over_at = vec![0u64; t.ops.len()];
    for &(p, over) in &probe.overs {
        over_at[p] = over;
    }
    let mut chains = Chains::new(t, a);
    chains.any &= chained;
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
            let slack = slack_at(
                t,
                a,
                &chains,
                &alive.list,
                p,
                over_at[p],
                link,
                compute,
                floor,
            );
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

/// What a re-run of each operation needs recomputed first: the old versions it reads that an
/// in-place write overwrote and that only it reads (see the module's text).
struct Chains {
    /// Per operation: the seconds of those recomputations, each producer's time (and its own
    /// such seconds) by the share of its output bytes the version is.
    extra: Vec<f64>,
    /// Per operation: it made such a version, so its re-runs are charged by the byte share.
    split: Vec<bool>,
    /// Per operation: the bytes it makes (outputs and in-place versions).
    made: Vec<u64>,
    /// Whether any operation has such a source (else both ways are one).
    any: bool,
}

impl Chains {
    fn new(t: &Trace, a: &Analysis) -> Chains {
        let n = t.ops.len();
        let mut c = Chains {
            extra: vec![0.0; n],
            split: vec![false; n],
            made: vec![0; n],
            any: false,
        };
        for (q, op) in t.ops.iter().enumerate() {
            let made = op.outputs.iter().chain(op.inplace.iter().map(|v| &v.1));
            c.made[q] = made.map(|&x| t.storages[x].size).sum();
        }
        // Program order: a source's producer comes before its reader.
        for step in &t.steps {
            let Step::Op(q) = *step else { continue };
            let mut extra = 0.0;
            for (k, &o) in t.ops[q].inputs.iter().enumerate() {
                let st = &t.storages[o];
                let Some(qo) = st.producer else { continue };
                // Overwritten by `q` itself, made by `qo` and read by nothing else.
                let only = a.accesses[o].as_slice() == [qo, q];
                if !a.overwritten[o] || st.constant || !only || t.ops[q].inputs[..k].contains(&o) {
                    continue;
                }
                let share = st.size as f64 / c.made[qo].max(1) as f64;
                extra += (t.ops[qo].time_s + c.extra[qo]) * share.min(1.0);
                c.split[qo] = true;
                c.any = true;
            }
            c.extra[q] = extra;
        }
        c
    }
}

/// The least slack over the compute time with which `over` bytes can be absent at `p`
/// (infinite when they cannot be at all), or 0 when `floor` (the bound so far) is enough.
#[allow(clippy::too_many_arguments)]
fn slack_at(
    t: &Trace,
    a: &Analysis,
    chains: &Chains,
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
        let copy = t.copy_bytes(s).min(st.size);
        let swap_slack = (copy as f64 / link.d2h - (a.start[p] - out_from))
            .max(copy as f64 / link.h2d - (a.start[back] - a.end[p]))
            .max(0.0);
        absent.push(Absent {
            size: st.size,
            copy,
            swap_slack,
            producer: if st.constant { None } else { st.producer },
        });
    }
    if need == 0 {
        return 0.0;
    }
    // What the engines can free, in bytes of memory: a swap that copies fewer bytes than it
    // frees (a tensor held in whole pages) frees up to this many times its copy, and a bound
    // must not count the engines short.
    let freed_per_copied = absent
        .iter()
        .map(|x| x.size as f64 / x.copy.max(1) as f64)
        .fold(1.0, f64::max);
    let engines = |slack: f64| {
        (link.d2h * (slack + a.start[p]))
            .min(link.h2d * (slack + compute - a.end[p]))
            .max(0.0)
            * freed_per_copied
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
    // With the overwritten sources' recomputations (`chained`) or without.
    let price = |x: &Absent, chained: bool| {
        x.producer.map_or(f64::INFINITY, |pr| {
            let k = by_producer.partition_point(|g| g.0 < pr);
            let group = by_producer[k].1.max(1) as f64;
            if !chained {
                t.ops[pr].time_s / group
            } else if chains.split[pr] {
                (t.ops[pr].time_s + chains.extra[pr]) / chains.made[pr].max(1) as f64
            } else {
                (t.ops[pr].time_s + chains.extra[pr]) / group
            }
        })
    };
    // Dearest first: the copy engines take those (a tensor is swapped or recomputed, not
    // both), the rest is recomputed cheapest first.
    let priced_by = |chained: bool| {
        let mut v: Vec<(f64, &Absent)> = absent.iter().map(|x| (price(x, chained), x)).collect();
        v.sort_by(|x, y| y.0.total_cmp(&x.0));
        v
    };
    let plain = priced_by(false);
    let chained = chains.any.then(|| priced_by(true));
    let covers_by = |priced: &[(f64, &Absent)], slack: f64| -> bool {
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
    let covers = |slack: f64| {
        covers_by(&plain, slack) && chained.as_ref().is_none_or(|v| covers_by(v, slack))
    };
    if covers(floor) {
        return 0.0;
    }
    // Enough slack for every window, both engines and every re-run.
    let total: u64 = absent.iter().map(|x| x.size).sum();
    let mut hi = absent.iter().map(|x| x.swap_slack).fold(0.0, f64::max)
        + total as f64 / link.d2h.min(link.h2d)
        + by_producer
            .iter()
            .map(|x| t.ops[x.0].time_s + if chains.any { chains.extra[x.0] } else { 0.0 })
            .sum::<f64>();
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
