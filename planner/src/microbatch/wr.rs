//! WR: the fastest configuration of one convolution under a workspace limit (the paper's dynamic
//! program over micro-batch sizes), and its desirable set (the same recursion keeping the
//! Pareto front of time and workspace).

use super::{Configuration, MAX_BATCH, Micro, Sizes};

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
pub(super) fn usable(micro: &[Micro], n: u64, limit: u64, sizes: Sizes) -> Vec<Micro> {
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
