//! What the policies share: the analysis of a trace (baseline times, accesses, lifetimes,
//! horizons) and how a recomputation keeps its sources.

use crate::model::{Step, Trace};
use crate::timeline::{Decision, Plan};

/// Facts about the trace the policies share: baseline times, accesses, lifetimes.
#[derive(Clone)]
pub struct Analysis {
    /// Baseline start and end time of each operation.
    pub start: Vec<f64>,
    pub end: Vec<f64>,
    /// Operations that read, write or create each storage, in order.
    pub accesses: Vec<Vec<usize>>,
    /// Operations that write each storage in place.
    pub mutations: Vec<Vec<usize>>,
    /// The first operation after the storage is freed (usize::MAX when never freed).
    pub freed_before: Vec<usize>,
    /// The first operation after the storage exists (0 for constants).
    pub born: Vec<usize>,
    /// Replaced by a later version (an in-place write).
    pub overwritten: Vec<bool>,
    /// The last operation that reads the storage or anything made from it, transitively: until
    /// then a recomputation may need it.
    pub horizon: Vec<usize>,
    /// Start times never decrease (operations run in index order).
    in_order: bool,
}

impl Analysis {
    pub fn new(t: &Trace) -> Analysis {
        let n = t.storages.len();
        let mut a = Analysis {
            start: vec![0.0; t.ops.len()],
            end: vec![0.0; t.ops.len()],
            accesses: vec![Vec::new(); n],
            mutations: vec![Vec::new(); n],
            freed_before: vec![usize::MAX; n],
            born: vec![0; n],
            overwritten: vec![false; n],
            horizon: vec![0; n],
            in_order: false,
        };
        let mut now = 0.0;
        let mut next_op = 0;
        for step in &t.steps {
            match *step {
                Step::Op(i) => {
                    a.start[i] = now;
                    // A concurrent operation (a collective) takes no compute time.
                    a.end[i] = now + t.ops[i].time_s;
                    if !t.ops[i].concurrent {
                        now = a.end[i];
                    }
                    let op = &t.ops[i];
                    for &s in op.inputs.iter().chain(&op.mutates).chain(&op.outputs) {
                        if a.accesses[s].last() != Some(&i) {
                            a.accesses[s].push(i);
                        }
                    }
                    for &s in &op.outputs {
                        a.born[s] = i;
                    }
                    for &(old, new) in &op.inplace {
                        a.born[new] = i;
                        a.overwritten[old] = true;
                        // Its memory passes to the new version here.
                        a.freed_before[old] = i + 1;
                        if a.accesses[new].last() != Some(&i) {
                            a.accesses[new].push(i);
                        }
                    }
                    for &s in &op.mutates {
                        a.mutations[s].push(i);
                    }
                    next_op = i + 1;
                }
                Step::Free(s) => a.freed_before[s] = next_op,
            }
        }
        a.in_order = a.start.is_sorted();
        for (h, acc) in a.horizon.iter_mut().zip(&a.accesses) {
            *h = acc.last().copied().unwrap_or(0);
        }
        // Outputs come after inputs: in reverse program order every output is final first.
        for step in t.steps.iter().rev() {
            if let Step::Op(o) = *step {
                let op = &t.ops[o];
                let made = op.outputs.iter().chain(op.inplace.iter().map(|v| &v.1));
                let h = made.map(|&y| a.horizon[y]).max().unwrap_or(0);
                let read = op.inputs.iter().chain(&op.mutates);
                for &i in read.chain(op.inplace.iter().map(|v| &v.0)) {
                    a.horizon[i] = a.horizon[i].max(h);
                }
            }
        }
        a
    }

    /// Lifetimes as a plan's extensions leave them.
    pub fn extended(mut self, plan: &Plan) -> Analysis {
        for &(s, d) in plan {
            if let Decision::Extend { until } = d {
                self.extend(s, until);
            }
        }
        self
    }

    pub(super) fn extend(&mut self, s: usize, until: usize) {
        if self.freed_before[s] != usize::MAX {
            self.freed_before[s] = self.freed_before[s].max(until + 1);
        }
    }

    /// The sources of `s`'s producer that a recomputation before `back` would find freed, kept
    /// alive until then instead: dropped too (to be recomputed in turn, from their own sources,
    /// a few levels deep) where that keeps fewer bytes, else resident. `None` when some source
    /// can be neither found nor kept (overwritten, or dropped for good before `back`), or when
    /// the sources kept come to `limit` bytes or more (the caller has no use for it then: the
    /// kept bytes only grow from one source to the next, so the rest is not worked out).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn to_extend(
        &self,
        t: &Trace,
        s: usize,
        back: usize,
        planned: &[Vec<(usize, usize)>],
        dead_after: &[usize],
        members: &mut Members,
        limit: u64,
    ) -> Option<Extension> {
        let p = t.storages[s].producer?;
        let mut ext = Extension::default();
        members.clear();
        let mut kept = 0u64;
        for &i in &t.ops[p].inputs {
            let from = ext.kept.len();
            if i == s || !self.resolve(t, i, back, planned, dead_after, 0, &mut ext, members) {
                return None;
            }
            kept += ext.kept[from..]
                .iter()
                .map(|&k| t.storages[k].size)
                .sum::<u64>();
            if kept >= limit {
                return None;
            }
        }
        Some(ext)
    }

    /// Makes source `i` available at `back` in `ext`; false when it cannot be.
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        t: &Trace,
        i: usize,
        back: usize,
        planned: &[Vec<(usize, usize)>],
        dead_after: &[usize],
        depth: usize,
        ext: &mut Extension,
        members: &mut Members,
    ) -> bool {
        if self.overwritten[i] {
            // Still there at `back` where it is overwritten only after it (a weight the
            // optimizer updates at the end of the step); else rebuilt from its own sources.
            return dead_after[i] >= back
                && (self.freed_before[i] > back || self.sources_at(t, i, back, 1));
        }
        if members.has(i) {
            return true;
        }
        if t.replay_in_place && self.freed_before[i] <= back {
            return false;
        }
        // Dropped for good after its last use, before `back`: only a recomputation brings it
        // back (its memory is already gone).
        let dead = dead_after[i] < back;
        if !dead && self.freed_before[i] > back {
            return true;
        }
        let last = self.accesses[i].last().copied().unwrap_or(0);
        if depth < 4
            && let Some(pi) = t.storages[i].producer
            && t.ops[pi].inplace.is_empty()
            && (dead || !planned[i].iter().any(|&(x, y)| x < back && last < y))
        {
            // A trial on `ext` itself (it only grows), undone if it fails.
            let mark = (ext.kept.len(), ext.dropped.len(), ext.revived.len());
            if dead {
                ext.revived.push(i);
            } else {
                ext.dropped.push((i, last));
            }
            members.set(i);
            // Kept bytes only grow from one source to the next: once they reach `i`'s own the
            // trial has failed.
            let size = t.storages[i].size;
            let mut added = 0u64;
            let ok = t.ops[pi].inputs.iter().all(|&j| {
                let from = ext.kept.len();
                let found = j != i
                    && self.resolve(t, j, back, planned, dead_after, depth + 1, ext, members);
                added += ext.kept[from..]
                    .iter()
                    .map(|&k| t.storages[k].size)
                    .sum::<u64>();
                found && added < size
            });
            if ok {
                return true;
            }
            let undone = ext.kept[mark.0..]
                .iter()
                .chain(ext.dropped[mark.1..].iter().map(|d| &d.0))
                .chain(&ext.revived[mark.2..]);
            for k in undone {
                members.unset(*k);
            }
            ext.kept.truncate(mark.0);
            ext.dropped.truncate(mark.1);
            ext.revived.truncate(mark.2);
        }
        if dead {
            return false;
        }
        ext.kept.push(i);
        members.set(i);
        true
    }

    /// Whether dropping `s` after `after` and re-running its producer before `back` gives the
    /// same bytes: the producer's inputs are alive until `back` (constants too: the program may
    /// free those as well), or old versions that can themselves be recomputed then (versions
    /// never change once made), `depth` levels down.
    pub fn recomputable(&self, t: &Trace, s: usize, back: usize) -> bool {
        self.sources_at(t, s, back, 0)
    }

    fn sources_at(&self, t: &Trace, s: usize, back: usize, depth: usize) -> bool {
        let Some(p) = t.storages[s].producer else {
            return false;
        };
        depth <= 8
            && t.ops[p].inputs.iter().all(|&i| {
                i != s
                    && (self.freed_before[i] > back
                        || self.overwritten[i] && self.sources_at(t, i, back, depth + 1))
            })
    }

    /// The in-trigger: the latest operation whose start leaves `secs` before `back` starts,
    /// after `after`.
    pub fn trigger(&self, after: usize, back: usize, secs: f64) -> usize {
        let want = self.start[back] - secs;
        if back <= after + 1 {
            return back;
        }
        if self.in_order {
            // Operations run in index order (as every importer makes them): the last start at
            // or before `want`, by bisection.
            let at_or_before = self.start[..=back].partition_point(|&x| x <= want);
            return at_or_before.saturating_sub(1).max(after + 1);
        }
        let mut j = back;
        while j > after + 1 && self.start[j] > want {
            j -= 1;
        }
        j
    }
}

/// The sources a recomputation keeps past the program's frees: resident, or dropped after
/// their last access (storage, that access) and recomputed with it; and sources already
/// dropped for good, recomputed with it (kept as metadata past their frees).
#[derive(Debug, Clone, Default)]
pub(super) struct Extension {
    pub(super) kept: Vec<usize>,
    pub(super) dropped: Vec<(usize, usize)>,
    pub(super) revived: Vec<usize>,
}

/// Everything in an [`Extension`] being made, for the membership test (an operation may have
/// thousands of sources): a stamped mark per storage, made once per selection round and cleared
/// in constant time per extension.
pub(super) struct Members {
    mark: Vec<u32>,
    stamp: u32,
}

impl Members {
    pub(super) fn new(n: usize) -> Members {
        Members {
            mark: vec![0; n],
            stamp: 1,
        }
    }

    fn clear(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.stamp = 1;
        }
    }

    fn has(&self, i: usize) -> bool {
        self.mark[i] == self.stamp
    }

    fn set(&mut self, i: usize) {
        self.mark[i] = self.stamp;
    }

    fn unset(&mut self, i: usize) {
        self.mark[i] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Storage, Trace};

    /// A weight w (a constant) is read by the op that makes a; a is read back at op 2; the
    /// optimizer writes w in place at `update` (op 1 before the back-access, op 3 after).
    fn st(constant: bool, producer: Option<usize>) -> Storage {
        Storage {
            size: 8,
            constant,
            producer,
        }
    }

    fn weight_updated_at(update: usize) -> Trace {
        let mut t = Trace {
            storages: vec![
                st(true, None),
                st(false, Some(0)),
                st(false, None),
                st(false, None),
            ],
            ..Trace::default()
        };
        // 0: a = f(w); 1, 2, 3: the back-access of a (2) and the in-place update of w.
        t.ops.push(Op::new("f", 1.0, vec![0], vec![1]));
        for i in 1..4 {
            let mut op = Op::new("g", 1.0, vec![], vec![]);
            if i == 2 {
                op.inputs.push(1);
            }
            if i == update {
                op.inputs.push(0);
                op.outputs.push(2 + (i == 3) as usize);
                op.inplace.push((0, 2 + (i == 3) as usize));
            }
            t.ops.push(op);
        }
        t.steps = (0..4).map(Step::Op).collect();
        t
    }

    #[test]
    fn a_source_overwritten_after_the_back_access_is_still_there() {
        // Updated after the back-access (the optimizer step after the backward pass): the
        // weight a recomputation reads still holds its version.
        let t = weight_updated_at(3);
        assert!(Analysis::new(&t).recomputable(&t, 1, 2));
        // Updated before it: the version is gone and has no producer to rebuild it.
        let t = weight_updated_at(1);
        assert!(!Analysis::new(&t).recomputable(&t, 1, 2));
    }

    /// A constant c (storage 0); op 0: x = f(c) (storage 1); op 1: a = g(x) (storage 2); then
    /// `later` storages made by the operations that follow, in order (from op 2 on).
    fn x_then_a(later: usize) -> Trace {
        let mut t = Trace {
            storages: vec![st(true, None)],
            ..Trace::default()
        };
        t.storages
            .extend((0..2 + later).map(|op| st(false, Some(op))));
        t.ops.push(Op::new("f", 1.0, vec![0], vec![1]));
        t.ops.push(Op::new("g", 1.0, vec![1], vec![2]));
        t
    }

    #[test]
    fn an_old_version_an_update_replaced_is_rebuilt_on_the_way() {
        // c is a constant; op 0: x = f(c); op 1: a = g(x); op 2: x updated in place (x -> y);
        // op 3 reads a back. Recomputing a then needs x's old version, which f can rebuild.
        let mut t = x_then_a(1);
        let mut update = Op::new("relu_", 1.0, vec![1], vec![3]);
        update.inplace.push((1, 3));
        t.ops.push(update);
        t.ops.push(Op::new("h", 1.0, vec![2, 3], vec![]));
        t.steps = (0..4).map(Step::Op).collect();
        assert!(Analysis::new(&t).recomputable(&t, 2, 3));
        // The shim too: x's old version is rebuilt in the replay's scratch, f then g.
        t.replay_in_place = true;
        assert!(Analysis::new(&t).recomputable(&t, 2, 3));
        let until = super::super::carried_out::valid_until(&t);
        assert_eq!(
            super::super::carried_out::slice(&t, &until, 2, 3),
            Some(vec![0, 1])
        );
        // Read back after the program frees c, f's source: nothing rebuilds it.
        t.steps.insert(3, Step::Free(0));
        let until = super::super::carried_out::valid_until(&t);
        assert_eq!(super::super::carried_out::slice(&t, &until, 2, 3), None);
    }

    #[test]
    fn a_slice_makes_every_version_it_reads_of_an_allocation_it_writes() {
        // c is a constant; op 0: x = f(c); op 1: a = g(x); op 2: x updated in place (x -> x2);
        // op 3: a updated in place from x2 (a -> a2); op 4 reads a2 and x2 back. Rebuilding
        // a2 rebuilds x in the replay's scratch, so the x2 op 3 reads there is the slice's
        // too: op 2 joins, though x2 itself is still in place at op 4.
        let mut t = x_then_a(2);
        t.replay_in_place = true;
        let mut scale = Op::new("mul_", 1.0, vec![1], vec![]);
        scale.mutates.push(1);
        scale.inplace.push((1, 3));
        t.ops.push(scale);
        let mut add = Op::new("add_", 1.0, vec![2, 3], vec![]);
        add.mutates.push(2);
        add.inplace.push((2, 4));
        t.ops.push(add);
        t.ops.push(Op::new("h", 1.0, vec![4, 3], vec![]));
        t.steps = (0..5).map(Step::Op).collect();
        let until = super::super::carried_out::valid_until(&t);
        assert_eq!(
            super::super::carried_out::slice(&t, &until, 4, 4),
            Some(vec![0, 1, 2, 3])
        );
        // x2 alone (op 2 from x, rebuilt by f) needs no g.
        assert_eq!(
            super::super::carried_out::slice(&t, &until, 3, 4),
            Some(vec![0, 2])
        );
        // Longer than a recomputation replays: not carried out.
        let mut long = t.clone();
        for _ in 0..super::super::carried_out::SLICE_LIMIT {
            let last = long.storages.len() - 1;
            let next = long.storages.len();
            long.storages.push(st(false, Some(long.ops.len())));
            let mut u = Op::new("u_", 1.0, vec![last], vec![]);
            u.mutates.push(last);
            u.inplace.push((last, next));
            long.ops.push(u);
        }
        let back = long.ops.len();
        let last = long.storages.len() - 1;
        long.ops.push(Op::new("h", 1.0, vec![last], vec![]));
        long.steps = (0..long.ops.len()).map(Step::Op).collect();
        let until = super::super::carried_out::valid_until(&long);
        assert_eq!(
            super::super::carried_out::slice(&long, &until, last, back),
            None
        );
    }
}
