//! μ-cuDNN's optimisers (seed 002), pure and deterministic.
//!
//! A **micro-configuration** is one algorithm run on a micro-batch of `batch` images, with its
//! measured time and workspace. A **configuration** of a convolution over a mini-batch of N is a
//! list of micro-configurations whose batches sum to N, run one after the other with one
//! workspace: its time is the sum, its workspace the largest part.
//!
//! * **WR** ([`fastest`]): the dynamic program of the paper, per layer, under a workspace limit:
//!   `T(b) = min( min_k t_k(b), min_{b' <= b/2} [ min_k t_k(b') + T(b - b') ] )`.
//! * **Desirable set** ([`desirable`]): the same recursion keeping, per b, the Pareto front of
//!   (time, workspace) instead of one argmin.
//! * **WD** ([`wd`]): one workspace shared by all kernels, each kernel taking one configuration
//!   of its desirable set: an exact multiple-choice knapsack minimising total time under the
//!   total workspace (dominance pruning, then branch and bound on the LP relaxation, with a node
//!   budget and a feasible fallback).

/// One measured micro-configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Micro {
    pub batch: u64,
    pub algo: i32,
    pub time_ms: f64,
    pub workspace: u64,
}

/// A configuration: micro-batches in order, with total time and the workspace they need.
#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    /// (micro-batch size, algorithm), in execution order (largest first).
    pub parts: Vec<(u64, i32)>,
    pub time_ms: f64,
    pub workspace: u64,
}

impl Configuration {
    pub fn batch(&self) -> u64 {
        self.parts.iter().map(|p| p.0).sum()
    }
}

/// Which micro-batch sizes are benchmarked (μ-cuDNN's batch-size policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// 1, 2, ..., N.
    All,
    /// 1, 2, 4, ... and N (the default).
    Pow2,
    /// N only.
    Undivided,
}

impl Sizes {
    pub const ACCEPTED: &'static str = "all, pow2, undivided";

    pub fn parse(s: &str) -> Option<Sizes> {
        match s {
            "all" => Some(Sizes::All),
            "pow2" | "powerOfTwo" => Some(Sizes::Pow2),
            "undivided" => Some(Sizes::Undivided),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sizes::All => "all",
            Sizes::Pow2 => "pow2",
            Sizes::Undivided => "undivided",
        }
    }

    /// Whether `b` is one of the sizes benchmarked for a mini-batch of `n`.
    pub fn allows(self, n: u64, b: u64) -> bool {
        b >= 1
            && b <= n
            && match self {
                Sizes::All => true,
                Sizes::Pow2 => b == n || b.is_power_of_two(),
                Sizes::Undivided => b == n,
            }
    }

    /// The micro-batch sizes to benchmark for a mini-batch of `n`, largest first.
    pub fn sizes(self, n: u64) -> Vec<u64> {
        let mut v: Vec<u64> = match self {
            Sizes::All => (1..=n).collect(),
            Sizes::Pow2 => {
                let mut v: Vec<u64> = std::iter::successors(Some(1u64), |&b| b.checked_mul(2))
                    .take_while(|&b| b < n)
                    .collect();
                v.push(n);
                v
            }
            Sizes::Undivided => vec![n],
        };
        v.retain(|&b| b >= 1);
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v
    }
}

/// The largest mini-batch the optimisers take: the DP keeps one configuration per batch size
/// up to N, so N bounds their memory (a few hundred bytes each) and time.
pub const MAX_BATCH: u64 = 1 << 16;

/// A configuration in the making: time, workspace, parts as runs (size, algorithm, count) in
/// execution order (largest size first, then algorithm), and the number of parts.
#[derive(Debug, Clone)]
struct Cand {
    time: f64,
    workspace: u64,
    runs: Vec<(u64, i32, u64)>,
    parts: u64,
}

/// The parts one after the other, lexicographically, without spelling them out.
fn cmp_runs(a: &[(u64, i32, u64)], b: &[(u64, i32, u64)]) -> std::cmp::Ordering {
    let (mut i, mut j) = (0, 0);
    let (mut left_a, mut left_b) = (a.first().map_or(0, |r| r.2), b.first().map_or(0, |r| r.2));
    while i < a.len() && j < b.len() {
        let o = (a[i].0, a[i].1).cmp(&(b[j].0, b[j].1));
        if o.is_ne() {
            return o;
        }
        let k = left_a.min(left_b);
        left_a -= k;
        left_b -= k;
        if left_a == 0 {
            i += 1;
            left_a = a.get(i).map_or(0, |r| r.2);
        }
        if left_b == 0 {
            j += 1;
            left_b = b.get(j).map_or(0, |r| r.2);
        }
    }
    (i < a.len()).cmp(&(j < b.len()))
}

/// Orders candidates: faster, then smaller workspace, then fewer parts, then the parts
/// themselves (so ties are broken the same way every time).
fn better(a: &Cand, b: &Cand) -> bool {
    a.time
        .total_cmp(&b.time)
        .then(a.workspace.cmp(&b.workspace))
        .then(a.parts.cmp(&b.parts))
        .then_with(|| cmp_runs(&a.runs, &b.runs))
        .is_lt()
}

/// `rest` and one more micro-configuration.
fn join(rest: &Cand, m: &Micro) -> Cand {
    let mut runs = rest.runs.clone();
    let key = |r: &(u64, i32, u64)| (std::cmp::Reverse(r.0), r.1);
    match runs.binary_search_by_key(&key(&(m.batch, m.algo, 0)), key) {
        Ok(k) => runs[k].2 += 1,
        Err(k) => runs.insert(k, (m.batch, m.algo, 1)),
    }
    Cand {
        time: rest.time + m.time_ms,
        workspace: rest.workspace.max(m.workspace),
        runs,
        parts: rest.parts + 1,
    }
}

fn single(m: &Micro) -> Cand {
    Cand {
        time: m.time_ms,
        workspace: m.workspace,
        runs: vec![(m.batch, m.algo, 1)],
        parts: 1,
    }
}

/// Usable micro-configurations: within the limit, of a benchmarked size, finite time.
fn usable(micro: &[Micro], n: u64, limit: u64, sizes: Sizes) -> Vec<Micro> {
    micro
        .iter()
        .copied()
        .filter(|m| {
            m.workspace <= limit
                && sizes.allows(n, m.batch)
                && m.time_ms.is_finite()
                && m.time_ms >= 0.0
        })
        .collect()
}

/// The best micro-configuration of each size (by [`better`]), smallest size first.
fn best_per_size(micro: Vec<Micro>) -> Vec<Micro> {
    let mut best: std::collections::BTreeMap<u64, Micro> = std::collections::BTreeMap::new();
    for m in micro {
        match best.get(&m.batch) {
            Some(b) if !better(&single(&m), &single(b)) => {}
            _ => {
                best.insert(m.batch, m);
            }
        }
    }
    best.into_values().collect()
}

/// WR: the fastest configuration of a mini-batch of `n` whose every micro-configuration fits
/// `limit`; None when no combination of benchmarked sizes covers `n`, or `n` is 0 or above
/// [`MAX_BATCH`].
pub fn fastest(n: u64, micro: &[Micro], limit: u64, sizes: Sizes) -> Option<Configuration> {
    if n == 0 || n > MAX_BATCH {
        return None;
    }
    let micro = best_per_size(usable(micro, n, limit, sizes));
    let n = n as usize;
    let mut best: Vec<Option<Cand>> = vec![None; n + 1];
    for b in 1..=n {
        let mut cur: Option<Cand> = micro.iter().find(|m| m.batch as usize == b).map(single);
        for m in micro.iter().take_while(|m| m.batch as usize <= b / 2) {
            let Some(rest) = &best[b - m.batch as usize] else {
                continue;
            };
            // Time, workspace and count first: the parts only for a possible winner.
            let (t, w, k) = (
                rest.time + m.time_ms,
                rest.workspace.max(m.workspace),
                rest.parts + 1,
            );
            if let Some(c) = &cur {
                let o = t
                    .total_cmp(&c.time)
                    .then(w.cmp(&c.workspace))
                    .then(k.cmp(&c.parts));
                if o.is_gt() {
                    continue;
                }
            }
            let c = join(rest, m);
            if cur.as_ref().is_none_or(|x| better(&c, x)) {
                cur = Some(c);
            }
        }
        best[b] = cur;
    }
    best[n].take().map(configuration)
}

fn configuration(c: Cand) -> Configuration {
    Configuration {
        parts: c
            .runs
            .iter()
            .flat_map(|&(b, a, k)| std::iter::repeat_n((b, a), k as usize))
            .collect(),
        time_ms: c.time,
        workspace: c.workspace,
    }
}

/// The desirable set: every configuration not dominated in (time, workspace), fastest first.
/// Each is WR's answer under one of the workspaces the micro-configurations need (the fastest
/// within w is on the front, and every point of the front is that for its own w), so memory
/// stays one configuration per batch size.
pub fn desirable(n: u64, micro: &[Micro], limit: u64, sizes: Sizes) -> Vec<Configuration> {
    let mut levels: Vec<u64> = micro
        .iter()
        .filter(|m| m.workspace <= limit)
        .map(|m| m.workspace)
        .collect();
    levels.sort_unstable();
    levels.dedup();
    let mut out: Vec<Configuration> = Vec::new();
    for w in levels {
        let Some(c) = fastest(n, micro, w, sizes) else {
            continue;
        };
        if out.last().is_none_or(|l| c.time_ms < l.time_ms) {
            out.push(c);
        }
    }
    out.reverse();
    out
}

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

/// Reads a micro-configuration table: CSV with the header `batch,algo,time_ms,workspace_bytes`,
/// one row per micro-configuration. Errors name the line.
pub fn read_table(text: &str) -> Result<Vec<Micro>, String> {
    let mut out = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or("empty table: expected the header batch,algo,time_ms,workspace_bytes")?;
    let cols: Vec<String> = header
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    let idx = |name: &str| {
        cols.iter()
            .position(|c| c == name)
            .ok_or(format!("line 1: no column {name:?}"))
    };
    let (ib, ia, it, iw) = (
        idx("batch")?,
        idx("algo")?,
        idx("time_ms")?,
        idx("workspace_bytes")?,
    );
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |j: usize| {
            f.get(j)
                .copied()
                .ok_or(format!("line {}: too few columns", i + 1))
        };
        let batch: u64 = get(ib)?
            .parse()
            .map_err(|_| format!("line {}: batch {:?} is not a whole number", i + 1, f[ib]))?;
        let algo: i32 = get(ia)?
            .parse()
            .map_err(|_| format!("line {}: algo {:?} is not an integer", i + 1, f[ia]))?;
        let time_ms: f64 = get(it)?
            .parse()
            .map_err(|_| format!("line {}: time_ms {:?} is not a number", i + 1, f[it]))?;
        let workspace: u64 = get(iw)?.parse().map_err(|_| {
            format!(
                "line {}: workspace_bytes {:?} is not a whole number",
                i + 1,
                f[iw]
            )
        })?;
        if batch == 0 || !time_ms.is_finite() || time_ms < 0.0 {
            return Err(format!(
                "line {}: batch must be at least 1 and time_ms a non-negative number",
                i + 1
            ));
        }
        out.push(Micro {
            batch,
            algo,
            time_ms,
            workspace,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random numbers for the property tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_table(r: &mut Rng, n: u64, sizes: Sizes) -> Vec<Micro> {
        let mut v = Vec::new();
        for b in sizes.sizes(n) {
            for algo in 0..(1 + r.below(3) as i32) {
                if r.below(5) == 0 {
                    continue;
                }
                let time_ms =
                    0.1 + b as f64 * (0.5 + r.below(100) as f64 / 50.0) + r.below(10) as f64 * 0.05;
                let workspace = if algo == 0 {
                    0
                } else {
                    b * (1 + r.below(8)) * 1000
                };
                v.push(Micro {
                    batch: b,
                    algo,
                    time_ms,
                    workspace,
                });
            }
        }
        v
    }

    /// Every multiset of usable micro-configurations summing to n: (time, workspace).
    fn brute(n: u64, micro: &[Micro]) -> Vec<(f64, u64)> {
        let mut out = Vec::new();
        fn go(left: u64, start: usize, micro: &[Micro], t: f64, w: u64, out: &mut Vec<(f64, u64)>) {
            if left == 0 {
                out.push((t, w));
                return;
            }
            for i in start..micro.len() {
                if micro[i].batch <= left {
                    go(
                        left - micro[i].batch,
                        i,
                        micro,
                        t + micro[i].time_ms,
                        w.max(micro[i].workspace),
                        out,
                    );
                }
            }
        }
        go(n, 0, micro, 0.0, 0, &mut out);
        out
    }

    #[test]
    fn sizes_by_policy() {
        assert_eq!(Sizes::Pow2.sizes(12), vec![12, 8, 4, 2, 1]);
        assert_eq!(Sizes::Pow2.sizes(8), vec![8, 4, 2, 1]);
        assert_eq!(Sizes::All.sizes(3), vec![3, 2, 1]);
        assert_eq!(Sizes::Undivided.sizes(7), vec![7]);
        assert_eq!(Sizes::parse("powerOfTwo"), Some(Sizes::Pow2));
        assert_eq!(Sizes::parse("most"), None);
    }

    #[test]
    fn the_papers_example_shape_fft_on_micro_batches() {
        // Undivided only GEMM fits 64; FFT fits at 32 and wins even eight times over.
        let t = vec![
            Micro {
                batch: 256,
                algo: 1,
                time_ms: 15.5,
                workspace: 4400,
            },
            Micro {
                batch: 256,
                algo: 4,
                time_ms: 2.5,
                workspace: 109 << 20,
            },
            Micro {
                batch: 32,
                algo: 4,
                time_ms: 0.37,
                workspace: 55 << 20,
            },
            Micro {
                batch: 32,
                algo: 1,
                time_ms: 2.0,
                workspace: 600,
            },
        ];
        let c = fastest(256, &t, 64 << 20, Sizes::Pow2).unwrap();
        assert_eq!(c.parts, vec![(32, 4); 8]);
        assert!((c.time_ms - 8.0 * 0.37).abs() < 1e-9);
        assert_eq!(c.workspace, 55 << 20);
        let u = fastest(256, &t, 64 << 20, Sizes::Undivided).unwrap();
        assert_eq!(u.parts, vec![(256, 1)]);
        let d = desirable(256, &t, 64 << 20, Sizes::Pow2);
        assert_eq!(d[0], c);
        // The small end of the front: eight GEMM micro-batches, slower but smaller than undivided.
        assert_eq!(d.last().unwrap().parts, vec![(32, 1); 8]);
        assert!(d.iter().any(|c| c.parts == vec![(256, 1)]));
        assert_eq!(fastest(256, &t, 1000, Sizes::Pow2).unwrap().workspace, 600);
        assert!(
            fastest(256, &t, 500, Sizes::Pow2).is_none(),
            "nothing fits 500 bytes"
        );
    }

    #[test]
    fn wr_matches_brute_force() {
        let mut r = Rng(0x9e3779b97f4a7c15);
        for case in 0..300 {
            let n = 1 + r.below(12);
            let sizes = [Sizes::All, Sizes::Pow2, Sizes::Undivided][case % 3];
            let table = random_table(&mut r, n, sizes);
            let limit = [u64::MAX, 20_000, 5_000, 0][case % 4];
            let ok = usable(&table, n, limit, sizes);
            let all = brute(n, &ok);
            let dp = fastest(n, &table, limit, sizes);
            match all
                .iter()
                .map(|c| c.0)
                .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))))
            {
                None => assert!(dp.is_none(), "case {case}"),
                Some(best) => {
                    let dp = dp.unwrap();
                    assert!(
                        (dp.time_ms - best).abs() < 1e-9,
                        "case {case}: {} vs {best}",
                        dp.time_ms
                    );
                    assert_eq!(dp.batch(), n);
                    assert!(dp.workspace <= limit);
                    let recomputed: f64 = dp
                        .parts
                        .iter()
                        .map(|&(b, a)| {
                            ok.iter()
                                .filter(|m| m.batch == b && m.algo == a)
                                .map(|m| m.time_ms)
                                .fold(f64::MAX, f64::min)
                        })
                        .sum();
                    assert!((recomputed - dp.time_ms).abs() < 1e-9);
                }
            }
        }
    }

    #[test]
    fn desirable_sets_match_the_brute_force_pareto_front() {
        let mut r = Rng(42);
        for case in 0..200 {
            let n = 1 + r.below(9);
            let sizes = [Sizes::All, Sizes::Pow2][case % 2];
            let table = random_table(&mut r, n, sizes);
            let ok = usable(&table, n, u64::MAX, sizes);
            let all = brute(n, &ok);
            // The front: for each configuration, nothing is at least as good in both and better in one.
            let mut front: Vec<(f64, u64)> = all
                .iter()
                .copied()
                .filter(|a| {
                    !all.iter().any(|b| {
                        (b.0 < a.0 - 1e-12 && b.1 <= a.1) || (b.0 <= a.0 + 1e-12 && b.1 < a.1)
                    })
                })
                .collect();
            front.sort_by(|a, b| a.0.total_cmp(&b.0));
            front.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-12 && a.1 == b.1);
            let got: Vec<(f64, u64)> = desirable(n, &table, u64::MAX, sizes)
                .iter()
                .map(|c| (c.time_ms, c.workspace))
                .collect();
            assert_eq!(got.len(), front.len(), "case {case}: {got:?} vs {front:?}");
            for (g, f) in got.iter().zip(&front) {
                assert!(
                    (g.0 - f.0).abs() < 1e-9 && g.1 == f.1,
                    "case {case}: {got:?} vs {front:?}"
                );
            }
        }
    }

    fn exhaustive(kernels: &[Vec<(f64, u64)>], total: u64) -> Option<f64> {
        fn go(
            k: usize,
            t: f64,
            w: u64,
            ks: &[Vec<(f64, u64)>],
            total: u64,
            best: &mut Option<f64>,
        ) {
            if w > total {
                return;
            }
            if k == ks.len() {
                if best.is_none_or(|b| t < b) {
                    *best = Some(t);
                }
                return;
            }
            for o in &ks[k] {
                go(k + 1, t + o.0, w + o.1, ks, total, best);
            }
        }
        let mut best = None;
        go(0, 0.0, 0, kernels, total, &mut best);
        best
    }

    fn random_kernels(r: &mut Rng, count: usize, options: u64) -> Vec<Vec<(f64, u64)>> {
        (0..count)
            .map(|_| {
                (0..1 + r.below(options))
                    .map(|_| (1.0 + r.below(1000) as f64 / 10.0, r.below(50) * 1000))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn wd_matches_exhaustive_search() {
        let mut r = Rng(7);
        for case in 0..300 {
            let count = 1 + r.below(6) as usize;
            let kernels = random_kernels(&mut r, count, 5);
            let total = r.below(150) * 1000;
            let got = wd(&kernels, total, 1_000_000);
            match exhaustive(&kernels, total) {
                None => assert!(got.is_none(), "case {case}"),
                Some(best) => {
                    let s = got.unwrap();
                    assert!(s.exact, "case {case}");
                    assert!(
                        (s.time_ms - best).abs() < 1e-9,
                        "case {case}: {} vs {best}",
                        s.time_ms
                    );
                    assert!(s.workspace <= total);
                    assert!(s.lower_bound_ms <= s.time_ms + 1e-9);
                    let t: f64 = s
                        .choice
                        .iter()
                        .enumerate()
                        .map(|(k, &j)| kernels[k][j].0)
                        .sum();
                    let w: u64 = s
                        .choice
                        .iter()
                        .enumerate()
                        .map(|(k, &j)| kernels[k][j].1)
                        .sum();
                    assert!((t - s.time_ms).abs() < 1e-9 && w == s.workspace);
                }
            }
        }
    }

    #[test]
    fn wd_past_its_budget_stays_feasible_and_within_its_bound() {
        let mut r = Rng(99);
        let kernels = random_kernels(&mut r, 60, 12);
        let total = 600_000;
        let tight = wd(&kernels, total, 50).unwrap();
        let full = wd(&kernels, total, 5_000_000).unwrap();
        assert!(!tight.exact);
        assert!(tight.workspace <= total);
        assert!(tight.lower_bound_ms <= full.time_ms + 1e-9);
        assert!(full.time_ms <= tight.time_ms + 1e-9);
        assert!(tight.time_ms >= tight.lower_bound_ms);
    }

    #[test]
    fn tables_parse_and_errors_name_the_line() {
        let t =
            read_table("batch,algo,time_ms,workspace_bytes\n8,1,0.5,4096\n4,4,0.2,1000\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[1],
            Micro {
                batch: 4,
                algo: 4,
                time_ms: 0.2,
                workspace: 1000
            }
        );
        let e = read_table("batch,algo,time_ms,workspace_bytes\n8,1,0.5,4096\n4,x,0.2,1000\n")
            .unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
        assert!(
            read_table("batch,algo,time\n")
                .unwrap_err()
                .contains("time_ms")
        );
    }
}
