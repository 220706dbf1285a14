//! WD: one workspace shared by every kernel, each taking one configuration of its desirable set,
//! as an exact multiple-choice knapsack (dominance pruning, then branch and bound on the LP
//! relaxation, with a node budget and a feasible fallback).

/// WD's answer: one option index per kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct WdSolution {
    pub choice: Vec<usize>,
    pub time_ms: f64,
    pub workspace: u64,
    /// Proven optimal (the search finished within its node budget).
    pub exact: bool,
    /// A lower bound on the optimal time (the LP relaxation at the root).
    pub lower_bound_ms: f64,
    pub nodes: u64,
}

/// One kernel's options after dominance pruning: (time, workspace, original index), sorted by
/// workspace with strictly decreasing time.
fn prune(options: &[(f64, u64)], total: u64) -> Vec<(f64, u64, usize)> {
    let mut v: Vec<(f64, u64, usize)> = options
        .iter()
        .enumerate()
        .filter(|(_, o)| o.1 <= total && o.0.is_finite())
        .map(|(i, o)| (o.0, o.1, i))
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)).then(a.2.cmp(&b.2)));
    let mut out: Vec<(f64, u64, usize)> = Vec::new();
    for o in v {
        if out.last().is_none_or(|l| o.0 < l.0) {
            out.push(o);
        }
    }
    out
}

/// The lower convex hull of a pruned class (the LP-useful options), as indices into it.
fn hull(c: &[(f64, u64, usize)]) -> Vec<usize> {
    let mut h: Vec<usize> = Vec::new();
    for i in 0..c.len() {
        while h.len() >= 2 {
            let (a, b) = (c[h[h.len() - 2]], c[h[h.len() - 1]]);
            let cur = c[i];
            // Drop b if it lies on or above the segment a -> cur.
            let cross = (b.1 - a.1) as f64 * (cur.0 - a.0) - (b.0 - a.0) * (cur.1 - a.1) as f64;
            if cross <= 0.0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(i);
    }
    h
}

/// The LP relaxation's optimum for classes `from..` with `cap` bytes left, each class starting
/// at its smallest option: spend capacity on the steepest time savings per byte first.
fn lp_bound(
    classes: &[Vec<(f64, u64, usize)>],
    hulls: &[Vec<usize>],
    from: usize,
    cap: u64,
) -> Option<f64> {
    let mut base = 0.0;
    let mut used = 0u64;
    let mut steps: Vec<(f64, f64, u64)> = Vec::new(); // (saving per byte, saving, bytes)
    for k in from..classes.len() {
        let c = &classes[k];
        base += c[0].0;
        used += c[0].1;
        let h = &hulls[k];
        for w in h.windows(2) {
            let (a, b) = (c[w[0]], c[w[1]]);
            let bytes = b.1 - a.1;
            let saving = a.0 - b.0;
            steps.push((saving / bytes.max(1) as f64, saving, bytes));
        }
    }
    if used > cap {
        return None;
    }
    let mut left = cap - used;
    steps.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut t = base;
    for (_, saving, bytes) in steps {
        if left == 0 {
            break;
        }
        if bytes <= left {
            t -= saving;
            left -= bytes;
        } else {
            t -= saving * left as f64 / bytes as f64;
            left = 0;
        }
    }
    Some(t)
}

/// WD: for each kernel one option of `kernels[k]` = (time, workspace), minimising total time
/// with total workspace at most `total`. None when even the smallest options do not fit.
/// Explores at most `node_budget` branch-and-bound nodes; past that, the best solution found
/// (never worse than the greedy one) comes back with `exact = false` and the root LP bound.
pub fn wd(kernels: &[Vec<(f64, u64)>], total: u64, node_budget: u64) -> Option<WdSolution> {
    let classes: Vec<Vec<(f64, u64, usize)>> = kernels.iter().map(|k| prune(k, total)).collect();
    if classes.iter().any(Vec::is_empty) {
        return None;
    }
    let hulls: Vec<Vec<usize>> = classes.iter().map(|c| hull(c)).collect();
    let root = lp_bound(&classes, &hulls, 0, total)?;
    // Greedy incumbent: smallest options, then upgrade the kernel with the best saving per byte
    // while it fits.
    let mut pick: Vec<usize> = vec![0; classes.len()];
    let mut used: u64 = classes.iter().map(|c| c[0].1).sum();
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for (k, c) in classes.iter().enumerate() {
            for j in pick[k] + 1..c.len() {
                let extra = c[j].1 - c[pick[k]].1;
                if used + extra > total {
                    break;
                }
                let rate = (c[pick[k]].0 - c[j].0) / extra.max(1) as f64;
                if best.is_none_or(|b| rate > b.0) {
                    best = Some((rate, k, j));
                }
            }
        }
        let Some((_, k, j)) = best else { break };
        used += classes[k][j].1 - classes[k][pick[k]].1;
        pick[k] = j;
    }
    let cost = |p: &[usize]| -> f64 { p.iter().enumerate().map(|(k, &j)| classes[k][j].0).sum() };
    let mut best_pick = pick.clone();
    let mut best_time = cost(&pick);

    // Branch and bound, depth first, widest classes first.
    let mut order: Vec<usize> = (0..classes.len()).collect();
    order.sort_by(|&a, &b| classes[b].len().cmp(&classes[a].len()).then(a.cmp(&b)));
    let oc: Vec<Vec<(f64, u64, usize)>> = order.iter().map(|&k| classes[k].clone()).collect();
    let oh: Vec<Vec<usize>> = order.iter().map(|&k| hulls[k].clone()).collect();
    let min_rest: Vec<u64> = (0..=oc.len())
        .map(|d| oc[d..].iter().map(|c| c[0].1).sum())
        .collect();
    let mut nodes = 0u64;
    let mut exact = true;
    let mut cur: Vec<usize> = Vec::with_capacity(oc.len());
    #[allow(clippy::too_many_arguments)]
    fn dfs(
        d: usize,
        time: f64,
        used: u64,
        total: u64,
        oc: &[Vec<(f64, u64, usize)>],
        oh: &[Vec<usize>],
        min_rest: &[u64],
        cur: &mut Vec<usize>,
        best: &mut (f64, Vec<usize>),
        nodes: &mut u64,
        budget: u64,
        exact: &mut bool,
    ) {
        if *nodes >= budget {
            *exact = false;
            return;
        }
        *nodes += 1;
        if d == oc.len() {
            if time < best.0 {
                *best = (time, cur.clone());
            }
            return;
        }
        let Some(bound) = lp_bound(oc, oh, d, total - used) else {
            return;
        };
        if time + bound >= best.0 - 1e-12 {
            return;
        }
        // Fastest options first: good solutions early tighten the bound.
        for j in (0..oc[d].len()).rev() {
            let (t, w, _) = oc[d][j];
            if used + w + min_rest[d + 1] > total {
                continue;
            }
            cur.push(j);
            dfs(
                d + 1,
                time + t,
                used + w,
                total,
                oc,
                oh,
                min_rest,
                cur,
                best,
                nodes,
                budget,
                exact,
            );
            cur.pop();
        }
    }
    let mut best = (
        best_time,
        order.iter().map(|&k| pick[k]).collect::<Vec<usize>>(),
    );
    dfs(
        0,
        0.0,
        0,
        total,
        &oc,
        &oh,
        &min_rest,
        &mut cur,
        &mut best,
        &mut nodes,
        node_budget,
        &mut exact,
    );
    if best.0 < best_time {
        best_time = best.0;
        for (d, &k) in order.iter().enumerate() {
            best_pick[k] = best.1[d];
        }
    }
    Some(WdSolution {
        choice: best_pick
            .iter()
            .enumerate()
            .map(|(k, &j)| classes[k][j].2)
            .collect(),
        time_ms: best_time,
        workspace: best_pick
            .iter()
            .enumerate()
            .map(|(k, &j)| classes[k][j].1)
            .sum(),
        exact,
        lower_bound_ms: root,
        nodes,
    })
}
