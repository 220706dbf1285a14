//! SINGA's AutoSwap (Wang et al.): swap candidates across the load peak, ranked by four scores.

use super::analysis::Analysis;
use crate::model::Trace;
use crate::timeline::{Decision, Link, Outcome, Plan, simulate};

/// AutoSwap's view of a candidate: (storage, evicted-access, back-access, size, duration of absence).
type Absence = (usize, usize, usize, f64, f64);

/// SINGA's AutoSwap: candidates of at least 1 MiB whose absence spans the load peak, ranked by
/// DOA (duration of absence), AOA (area: size x duration), WDOA (AOA per second of transfer) and
/// SWDOA (duration x square root of size); each ranking is taken until the peak is covered, and
/// the best by simulation wins.
pub(super) fn autoswap(t: &Trace, a: &Analysis, budget: u64, link: Link) -> (Plan, Outcome) {
    let base = simulate(t, u64::MAX, link, &Vec::new());
    let need = base.peak.saturating_sub(budget);
    // The peak operation: where the unconstrained replay is over the budget most.
    let probe = simulate(t, budget, link, &Vec::new());
    let Some((p, _)) = probe.worst else {
        return (Vec::new(), probe);
    };
    let mut cands: Vec<Absence> = Vec::new();
    for (s, st) in t.storages.iter().enumerate() {
        if st.size < 1 << 20 || a.freed_before[s] <= p {
            continue;
        }
        let acc = &a.accesses[s];
        let next = acc.partition_point(|&x| x <= p);
        if next == 0 || next >= acc.len() || acc[next - 1] == p {
            continue;
        }
        let (after, back) = (acc[next - 1], acc[next]);
        cands.push((s, after, back, st.size as f64, a.start[back] - a.end[after]));
    }
    let scores: [&dyn Fn(&Absence) -> f64; 4] = [
        &|c| c.4,
        &|c| c.3 * c.4,
        &|c| c.3 * c.4 / (c.3 / link.d2h + c.3 / link.h2d),
        &|c| c.4 * c.3.sqrt(),
    ];
    let mut best: Option<(Plan, Outcome)> = None;
    for score in scores {
        let mut ranked = cands.clone();
        ranked.sort_by(|x, y| score(y).total_cmp(&score(x)).then(x.0.cmp(&y.0)));
        let mut plan = Vec::new();
        let mut got = 0u64;
        for (s, after, back, size, _) in ranked {
            if got >= need {
                break;
            }
            plan.push((
                s,
                Decision::Swap {
                    after,
                    trigger: a.trigger(after, back, t.copy_bytes(s) as f64 / link.h2d),
                    back,
                },
            ));
            got += size as u64;
        }
        let out = simulate(t, budget, link, &plan);
        let better = match &best {
            None => true,
            Some((_, b)) => (out.feasible, -out.makespan) > (b.feasible, -b.makespan),
        };
        if better {
            best = Some((plan, out));
        }
    }
    best.unwrap()
}
