//! `auto`: the portfolio. Every other policy's search, and a few variants of Capuchin's
//! selection, each replayed; the best replay wins. It is an anytime search: the steps run
//! cheapest and likeliest first, the caller's [`Deadline`] is asked between (and inside) them,
//! and when time is up the best plan so far is returned. It also stops once a plan takes no
//! more than the compute time, as nothing can beat it. (The lower bound, [`super::bound`], is
//! tighter, but costs as much as a few replays, up to a second and a half on a
//! 10,000-operation trace, and a plan meeting it above the compute time, to the bit, is not
//! to be expected of a relaxation found by bisection: the caller computes it for the gap.)

use super::analysis::Analysis;
use super::capuchin::{
    Rank, Selection, both_selection, by_pages, capuchin_from, iterative, iterative_from, peak_seed,
    recompute_after, recompute_first, refine_swaps, swap_only_from, swaps_after_recomputation,
};
use super::hybrid::hybrid_from;
use super::passive::{online_below, online_from};
use super::{Deadline, Mechanism, Named, autoswap, rank_outcomes, vdnn, with_passive};
use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Plan, simulate};

/// The closing descents' starts (see [`portfolio`]'s last step). From four, FCN-ResNet-50's
/// plan at three tenths of its trace's peak was 1.249x of the compute time instead of 1.389x
/// from two (simulated H100, offline); no zoo trace gained from more.
const STARTS: usize = 4;

/// The best plan so far, when to stop looking, and (for [`super::run_all`]) what each other
/// policy gave on the way.
struct Anytime<'a> {
    /// What a plan is judged on: where the shim carries it out, the plan as it does (a plan
    /// may hold decisions it would leave out, and be slower or not fit without them).
    judged: (&'a Trace, u64, Link),
    best: (Plan, Outcome),
    /// The [`STARTS`] fastest distinct feasible plans so far, fastest first: where the closing
    /// descents start.
    starts: Vec<(Plan, Outcome)>,
    /// The compute time: a feasible plan that takes no more is optimal.
    bound: f64,
    more: Deadline<'a>,
    /// Run every step, even past an optimal plan (to give every policy's result).
    all: bool,
    named: Named,
}

impl Anytime<'_> {
    fn offer(&mut self, x: (Plan, Outcome)) {
        let (t, budget, link) = self.judged;
        let x = super::carried(t, budget, link, x);
        if x.1.feasible && !self.starts.iter().any(|s| s.0 == x.0) {
            let at = self
                .starts
                .partition_point(|s| s.1.makespan <= x.1.makespan);
            if at < STARTS {
                self.starts.insert(at, x.clone());
                self.starts.truncate(STARTS);
            }
        }
        if rank_outcomes(&x.1, &self.best.1).is_lt() {
            self.best = x;
        }
    }

    /// A policy's own result: offered, and kept under its name.
    fn policy(&mut self, name: &'static str, x: (Plan, Outcome)) {
        self.offer(x.clone());
        if self.all {
            self.named.push((name, x));
        }
    }

    /// The makespan a passive run must end below to matter: the best feasible one so far
    /// (none when every policy's own result is wanted).
    fn cutoff(&self) -> f64 {
        if self.all || !self.best.1.feasible {
            f64::INFINITY
        } else {
            self.best.1.makespan
        }
    }

    /// Whether to run another step: time is left and the best is not yet optimal.
    fn go_on(&self) -> bool {
        let optimal = self.best.1.feasible && self.best.1.makespan <= self.bound * (1.0 + 1e-12);
        (self.all || !optimal) && (self.more)()
    }
}

/// The portfolio: its best plan, and (with `all`) every other policy's result by name, exactly
/// as [`super::run`] gives it (the steps are those policies' own).
pub(super) fn portfolio(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    all: bool,
) -> ((Plan, Outcome), Named) {
    let empty = simulate(t, budget, link, &Vec::new());
    let mut s = Anytime {
        judged: (t, budget, link),
        best: (Vec::new(), empty),
        starts: Vec::new(),
        bound: t.compute_time(),
        more,
        all,
        named: Vec::new(),
    };
    // Cheapest and likeliest first. The recomputation selection's first run: a few replays,
    // and where recomputing is cheap (a recurrent network) already the best plan. DTR's
    // runtime: one passive run, feasible wherever anything recomputable fits, cheap on most
    // traces (a recurrent network's takes longest: thousands of evictions). Capuchin's
    // selection restricted to swapping: cheap, and best wherever the copy engines can hide the
    // traffic.
    let rec_first = s.go_on().then(|| recompute_first(t, a, budget, link, more));
    if let Some(r) = &rec_first {
        s.offer(r.clone());
    }
    let Some(dtr) = s
        .go_on()
        .then(|| online_below(t, a, budget, link, Evict::Dtr, more, s.cutoff()))
    else {
        return (s.best, s.named);
    };
    s.policy("dtr", dtr.clone());
    // The shim's own online policy, which runs wherever no plan guides (DTR's score, each
    // tensor dropped or swapped by which costs less): a plan must beat what the program would
    // run without one.
    if s.go_on() {
        let mixed = online_below(t, a, budget, link, Evict::DtrOrSwap, more, s.cutoff());
        s.offer(mixed);
    }
    // Its selection is also a variant's below: made once.
    let swap_sel = s
        .go_on()
        .then(|| iterative(t, a, budget, link, Mechanism::Swap, more));
    let swp = swap_sel
        .clone()
        .map(|sel| swap_only_from(t, a, budget, link, sel, more));
    if let Some(w) = &swp {
        s.policy("swap", w.clone());
    }
    // Recomputation only: the rest of its selection, with DTR's passive modes behind.
    let rec = s.go_on().then(|| {
        let up = online_below(t, a, budget, link, Evict::DtrUpstream, more, s.cutoff());
        s.offer(up.clone());
        recompute_after(t, a, budget, link, more, [dtr.clone(), up], rec_first)
    });
    if let Some(r) = &rec {
        s.policy("recompute", r.clone());
    }
    // Recomputation where it fits, swaps for what it cannot move (Capuchin's policy runs it
    // too).
    let seeded = match &rec {
        Some(r) if s.go_on() => swaps_after_recomputation(t, a, budget, link, r, more),
        _ => Vec::new(),
    };
    for x in &seeded {
        s.offer(x.clone());
    }
    // Capuchin's policy: its passive first iteration, its selection, its passive mode behind.
    let lru = s
        .go_on()
        .then(|| online_below(t, a, budget, link, Evict::Lru, more, s.cutoff()));
    if let Some(l) = &lru {
        s.policy("lru", l.clone());
    }
    let sel_both = s.go_on().then(|| both_selection(t, a, budget, link, more));
    // Capuchin's result before its descent (run alone, `auto` runs that descent last, below).
    let mut cap_start = None;
    if let (Some(l), Some(sel)) = (&lru, &sel_both) {
        s.offer(sel.clone());
        let cap = capuchin_from(
            t,
            a,
            budget,
            link,
            [l.clone(), dtr.clone()],
            sel.clone(),
            seeded,
            more,
            s.all,
        );
        if !s.all {
            cap_start = Some(super::carried(t, budget, link, cap.clone()));
        }
        s.policy("capuchin", cap);
    }
    // Behind any plan, the runtime's passive mechanism swaps the least recently used tensors
    // out (the shim's allocator): a one-mechanism plan that does not fit alone may, with that
    // behind it, beat every plan that does (recompute's drops leave LRU nothing to swap back).
    for x in [&rec, &swp].into_iter().flatten() {
        if !x.1.feasible && s.go_on() {
            s.offer(online_from(
                t,
                a,
                budget,
                link,
                Evict::Lru,
                x.0.clone(),
                more,
            ));
        }
    }
    if let (Some(r), Some(w), Some(sel)) = (rec, swp, sel_both)
        && s.go_on()
    {
        s.policy("hybrid", hybrid_from(t, a, budget, link, more, [r, w, sel]));
    }
    // Variants of the selection (the ranking by memory-time, swaps refined, seeded by the whole
    // peak), each with the passive mode behind it.
    let by_area = |mech| Selection {
        rank: Rank::Area,
        ..Selection::of(mech)
    };
    let large = Selection {
        min_size: 1 << 20,
        ..Selection::of(Mechanism::Both)
    };
    let variants: [(Selection, Option<bool>); 4] = [
        (by_area(Mechanism::Both), None),
        (Selection::of(Mechanism::Swap), None),
        (large, Some(false)),
        (large, Some(true)),
    ];
    for (sel, seed) in variants {
        if !s.go_on() {
            break;
        }
        let (mut plan, mut out) = match (&swap_sel, seed) {
            (Some(x), None) if sel == Selection::of(Mechanism::Swap) => x.clone(),
            _ => {
                let seed =
                    seed.map_or(Vec::new(), |by_area| peak_seed(t, a, budget, link, by_area));
                iterative_from(t, a, budget, link, sel, seed, more)
            }
        };
        if out.feasible {
            refine_swaps(t, a, budget, link, &mut plan, &mut out, more);
        }
        for x in with_passive(t, a, budget, link, sel.mech, (plan, out), more) {
            s.offer(x);
        }
    }
    // Capuchin's and the swap selection run as if copies moved whole pages in those policies'
    // own steps (`capuchin::by_pages`); the ranking by memory-time does here.
    if s.go_on() {
        for x in by_pages(t, a, budget, link, by_area(Mechanism::Both), more) {
            s.offer(x);
        }
    }
    // The static policies: vDNN, AutoSwap (cheap; rarely best).
    type Step = fn(&Trace, &Analysis, u64, Link) -> (Plan, Outcome);
    let rest: [(&str, Step); 3] = [
        ("vdnn-all", |t, a, b, l| vdnn::vdnn(t, a, b, l, false)),
        ("vdnn-conv", |t, a, b, l| vdnn::vdnn(t, a, b, l, true)),
        ("autoswap", autoswap::autoswap),
    ];
    for (name, step) in rest {
        if !s.go_on() {
            break;
        }
        s.policy(name, step(t, a, budget, link));
    }
    // Last, one tensor's decision at a time, from each of the few fastest plans so far (in
    // that order), then from Capuchin's where it is not among them: a descent ends at a local
    // optimum, and one from a slower start may end below the best one's (ResNet-50 at half its
    // peak, simulated H100, offline: 23.00 ms from `auto`'s best against 22.89 from
    // Capuchin's).
    let mut starts = std::mem::take(&mut s.starts);
    if let Some(c) = cap_start.filter(|c| c.1.feasible && starts.iter().all(|x| x.0 != c.0)) {
        starts.push(c);
    }
    for start in starts {
        if !s.go_on() {
            break;
        }
        let x = super::descent::descend(t, a, budget, link, more, start);
        s.offer(x);
    }
    (s.best, s.named)
}
