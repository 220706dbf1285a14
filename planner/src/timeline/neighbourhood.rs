//! DTR's evicted neighbourhood, costed for many candidates of one eviction at once.
//!
//! The cost of dropping a storage walks the dropped storages that would come back with it (its
//! producer's dropped sources) and, downstream, those made from it, transitively, depth first,
//! and stops after 64 storages. Costed one candidate at a time, each step rescans its producer's
//! inputs and its readers' outputs: an operation with thousands of inputs (a recurrent loss over
//! every step) made each eviction quadratic. Within one eviction nothing changes state, so each
//! operation's dropped inputs and each storage's dropped products are listed once and shared,
//! `seen` is a stamped mark array, and once 64 storages are seen the walk ends where the scan
//! would (after the last storage it would have pushed): the same cost, to the bit.

use crate::model::Trace;

pub(super) struct Walk {
    /// `seen[s] == stamp`: seen by the walk in progress.
    seen: Vec<u32>,
    stamp: u32,
    /// The same for making a list (first occurrences).
    listed: Vec<u32>,
    list_stamp: u32,
    /// Per operation: its inputs that are dropped (not for good), first occurrences in order,
    /// listed in this eviction when `ins_at[op] == epoch`.
    ins: Vec<Vec<usize>>,
    ins_at: Vec<u32>,
    /// Per operation: its dropped products (outputs, new versions), the same way.
    outs: Vec<Vec<usize>>,
    outs_at: Vec<u32>,
    epoch: u32,
}

/// The next stamp of a mark array (cleared when the stamps wrap).
fn next(marks: &mut [u32], stamp: &mut u32) -> u32 {
    *stamp = stamp.wrapping_add(1);
    if *stamp == 0 {
        marks.iter_mut().for_each(|m| *m = 0);
        *stamp = 1;
    }
    *stamp
}

impl Walk {
    /// For `n` storages and `ops` operations.
    pub(super) fn new(n: usize, ops: usize) -> Walk {
        Walk {
            seen: vec![0; n],
            stamp: 0,
            listed: vec![0; n],
            list_stamp: 0,
            ins: vec![Vec::new(); ops],
            ins_at: vec![0; ops],
            outs: vec![Vec::new(); ops],
            outs_at: vec![0; ops],
            epoch: 0,
        }
    }

    /// A new eviction: states may have changed since the lists were made.
    pub(super) fn clear(&mut self) {
        next(&mut self.ins_at, &mut self.epoch);
        if self.epoch == 1 {
            self.outs_at.iter_mut().for_each(|m| *m = 0);
        }
    }

    /// First occurrences of `it`'s items that `dropped` accepts, in order.
    fn list(
        listed: &mut [u32],
        list_stamp: &mut u32,
        it: impl Iterator<Item = usize>,
        dropped: &dyn Fn(usize) -> bool,
    ) -> Vec<usize> {
        let stamp = next(listed, list_stamp);
        let mut v = Vec::new();
        for i in it {
            if listed[i] != stamp && dropped(i) {
                listed[i] = stamp;
                v.push(i);
            }
        }
        v
    }

    /// The cost of dropping `s` (see the module's comment); `dropped(i)`: `i` is dropped, not
    /// for good; `consumers[x]`: the operations that read `x`. Exact for traces in execution
    /// order (an operation's inputs are made by earlier operations). Once `loses(cost so far)`
    /// the walk stops with that part (the caller only needs to know it lost).
    pub(super) fn cost(
        &mut self,
        t: &Trace,
        consumers: &[Vec<usize>],
        dropped: &dyn Fn(usize) -> bool,
        s: usize,
        downstream: bool,
        loses: &dyn Fn(f64) -> bool,
    ) -> f64 {
        let producer_time = |x: usize| {
            t.storages[x]
                .producer
                .map_or(f64::INFINITY, |p| t.ops[p].time_s)
        };
        let stamp = next(&mut self.seen, &mut self.stamp);
        self.seen[s] = stamp;
        let mut cost = 0.0;
        let mut todo = vec![s];
        let mut seen = 1usize;
        while let Some(x) = todo.pop() {
            let Some(p) = t.storages[x].producer else {
                return f64::INFINITY;
            };
            cost += t.ops[p].time_s;
            if seen > 64 || loses(cost) {
                break;
            }
            if self.ins_at[p] != self.epoch {
                self.ins_at[p] = self.epoch;
                self.ins[p] = Self::list(
                    &mut self.listed,
                    &mut self.list_stamp,
                    t.ops[p].inputs.iter().copied(),
                    dropped,
                );
            }
            // The readers of `x` (an operation reading it twice is listed twice, in a row:
            // its second listing adds nothing).
            let readers = if downstream { &consumers[x][..] } else { &[] };
            let readers = || {
                readers
                    .iter()
                    .enumerate()
                    .filter(|&(k, o)| k == 0 || readers[k - 1] != *o)
                    .map(|(_, &o)| o)
            };
            for o in readers() {
                if self.outs_at[o] != self.epoch {
                    self.outs_at[o] = self.epoch;
                    let o_ = &t.ops[o];
                    let made = o_
                        .outputs
                        .iter()
                        .chain(o_.inplace.iter().map(|v| &v.1))
                        .copied();
                    self.outs[o] =
                        Self::list(&mut self.listed, &mut self.list_stamp, made, dropped);
                }
            }
            // This step's storages in the scan's order: the producer's inputs, then what each
            // reader makes. Distinct in a trace in execution order (each storage has one
            // producer; a product of a reader of `x` is made after `p`), except a product that
            // is also an input of `p`: checked below.
            let ins: &[usize] = &self.ins[p];
            let segs: Vec<&[usize]> = std::iter::once(ins)
                .chain(readers().map(|o| self.outs[o].as_slice()))
                .collect();
            let n_ins = ins.len();
            let total: usize = segs.iter().map(|v| v.len()).sum();
            let at = |mut k: usize| {
                for v in &segs {
                    if k < v.len() {
                        return v[k];
                    }
                    k -= v.len();
                }
                unreachable!()
            };
            let downs_len = total - n_ins;
            for k in 0..n_ins + downs_len {
                let i = at(k);
                if self.seen[i] == stamp {
                    continue;
                }
                self.seen[i] = stamp;
                seen += 1;
                todo.push(i);
                if seen > 64 {
                    // The scan would push the rest of this step's storages not yet seen, then
                    // pop the last of them, add its producer and stop. A product listed after
                    // the inputs is pushed unless it is also among them, which it is not when
                    // made after `p` (execution order); else look.
                    let last = (k + 1..n_ins + downs_len).rev().find_map(|j| {
                        let y = at(j);
                        let pushed = self.seen[y] != stamp
                            && (j < n_ins
                                || k + 1 >= n_ins
                                || t.storages[y].producer.is_some_and(|py| py > p)
                                || !ins[k + 1..].contains(&y));
                        pushed.then_some(y)
                    });
                    return cost + producer_time(last.unwrap_or(i));
                }
            }
        }
        cost
    }
}
