//! SmartPool (seed 000): offline dynamic storage allocation of one iteration's tensors. Each
//! storage lives from the step that creates it to the step that frees it; storages are placed
//! largest first, each in the best-fitting hole (the smallest gap between storages alive at the
//! same time that is big enough), else on top. The pool's size against the peak load (the most
//! memory live at once) is the competitive ratio.

use crate::model::{Step, Trace};

#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Offset of every storage in the pool.
    pub offsets: Vec<u64>,
    pub size: u64,
    pub peak_load: u64,
}

impl Pool {
    pub fn ratio(&self) -> f64 {
        if self.peak_load == 0 {
            1.0
        } else {
            self.size as f64 / self.peak_load as f64
        }
    }
}

/// The first version of each storage (in-place writes make versions in the same memory).
pub fn roots(t: &Trace) -> Vec<usize> {
    let mut root: Vec<usize> = (0..t.storages.len()).collect();
    for step in &t.steps {
        if let Step::Op(i) = *step {
            for &(old, new) in &t.ops[i].inplace {
                root[new] = root[old];
            }
        }
    }
    root
}

/// [first step, last step] each piece of memory is live in, by its first version (other
/// versions: empty).
pub fn lifetimes(t: &Trace) -> Vec<(usize, usize)> {
    let end = t.steps.len();
    let root = roots(t);
    let mut life: Vec<(usize, usize)> = t
        .storages
        .iter()
        .map(|s| {
            if s.constant {
                (0, end)
            } else {
                (usize::MAX, end)
            }
        })
        .collect();
    for (k, step) in t.steps.iter().enumerate() {
        match *step {
            Step::Op(i) => {
                for &s in &t.ops[i].outputs {
                    life[s].0 = k;
                }
            }
            Step::Free(s) => life[root[s]].1 = k,
        }
    }
    life
}

pub fn smartpool(t: &Trace) -> Pool {
    let life = lifetimes(t);
    let mut order: Vec<usize> = (0..t.storages.len())
        .filter(|&s| life[s].0 != usize::MAX && t.storages[s].size > 0)
        .collect();
    order.sort_by(|&a, &b| t.storages[b].size.cmp(&t.storages[a].size).then(a.cmp(&b)));
    let mut offsets = vec![0u64; t.storages.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut size = 0u64;
    for s in order {
        let (from, to) = life[s];
        let need = t.storages[s].size;
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&o| life[o].0 < to && from < life[o].1)
            .map(|&o| (offsets[o], offsets[o] + t.storages[o].size))
            .collect();
        busy.sort_unstable();
        // Best fit among the holes; on top when none fits.
        let mut best: Option<(u64, u64)> = None; // (hole size, offset)
        let mut cursor = 0u64;
        for (lo, hi) in busy.iter().copied() {
            if lo > cursor {
                let hole = lo - cursor;
                if hole >= need && best.is_none_or(|b| hole < b.0) {
                    best = Some((hole, cursor));
                }
            }
            cursor = cursor.max(hi);
        }
        let at = best.map(|b| b.1).unwrap_or(cursor);
        offsets[s] = at;
        size = size.max(at + need);
        placed.push(s);
    }
    Pool {
        offsets,
        size,
        peak_load: t.peak(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Storage};

    #[test]
    fn live_storages_never_overlap_and_the_pool_covers_the_peak() {
        // a(4) b(2) live together, then a freed, c(3) fits a's hole.
        let st = |size| Storage {
            size,
            constant: false,
            producer: None,
        };
        let op = |outputs: Vec<usize>| Op::new("op", 1.0, vec![], outputs);
        let t = Trace {
            storages: vec![st(4), st(2), st(3)],
            ops: vec![op(vec![0]), op(vec![1]), op(vec![2])],
            steps: vec![
                Step::Op(0),
                Step::Op(1),
                Step::Free(0),
                Step::Op(2),
                Step::Free(1),
                Step::Free(2),
            ],
            ..Trace::default()
        };
        let p = smartpool(&t);
        assert_eq!(p.peak_load, 6);
        assert_eq!(p.size, 6, "c reuses a's place");
        assert_eq!(p.ratio(), 1.0);
        let life = lifetimes(&t);
        for x in 0..3 {
            for y in x + 1..3 {
                let live_together = life[x].0 < life[y].1 && life[y].0 < life[x].1;
                let apart = p.offsets[x] + t.storages[x].size <= p.offsets[y]
                    || p.offsets[y] + t.storages[y].size <= p.offsets[x];
                assert!(!live_together || apart, "{x} and {y}");
            }
        }
    }
}
