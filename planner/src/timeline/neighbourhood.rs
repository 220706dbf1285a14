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
//!
//! Across evictions, a cost is a function of the lists its walk read: it is kept until one of
//! them changes (a storage counted in it is dropped, comes back, is freed or goes for good; the
//! simulator says which storages it touched, and only those whose droppedness changed count).
//! Most of the hundreds of candidates an eviction weighs were weighed, unchanged, at the one
//! before: DTR's choice is the same, only its neighbourhood costs are not walked again. Each
//! list knows the costs that read it, as a chain through one arena (a walk appends to it, not
//! to lists scattered over memory); a change forgets them.

use crate::model::Trace;

pub(super) struct Walk {
    /// `seen[s] == stamp`: seen by the walk in progress.
    seen: Vec<u32>,
    stamp: u32,
    /// The same for making a list (first occurrences).
    listed: Vec<u32>,
    list_stamp: u32,
    /// Per operation: its inputs that are dropped (not for good), first occurrences in order,
    /// valid while `ins_ok[op]`.
    ins: Vec<Vec<usize>>,
    ins_ok: Vec<bool>,
    /// Per operation: its dropped products (outputs, new versions), the same way.
    outs: Vec<Vec<usize>>,
    outs_ok: Vec<bool>,
    /// Per storage: its cost as last walked, and whether that walk ran to its end (else it
    /// stopped once it lost: a lower bound). Kept across evictions while every list the walk
    /// read stays as it was: the walk is a function of those lists.
    cost: Vec<Option<(f64, bool)>>,
    /// Per storage: bumped whenever its cost is forgotten or walked again, so that older
    /// readers in the chains below are recognised as spent.
    version: Vec<u32>,
    /// Per list (`2 op` its `ins`, `2 op + 1` its `outs`): the first of the costs that read
    /// it, chained through `readers_of` (`NONE`: none).
    first: Vec<u32>,
    readers_of: Vec<Reader>,
    /// Per storage: whether the lists count it as dropped, and the storages whose state may
    /// have changed since the last eviction.
    in_lists: Vec<bool>,
    touched: Vec<usize>,
    /// Per storage: the operations that make it (as an output or a new version).
    makers: Vec<Vec<usize>>,
    /// Buffers for a walk: the storages to visit, a step's readers.
    todo: Vec<usize>,
    readers: Vec<usize>,
}

/// A cost that read a list: its storage, the storage's version then, the next reader.
#[derive(Clone, Copy)]
struct Reader {
    s: u32,
    version: u32,
    next: u32,
}

const NONE: u32 = u32::MAX;

/// The chains are cleared (and every kept cost forgotten) once they hold this many readers:
/// kept costs are a cache, and spent readers are only dropped by a change to their list. (Small
/// in tests, so that the index's comparison with the scan crosses many clearings.)
const READERS_CAP: usize = if cfg!(test) { 64 } else { 1 << 21 };

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
    /// For the storages and operations of `t`.
    pub(super) fn new(t: &Trace) -> Walk {
        let (n, ops) = (t.storages.len(), t.ops.len());
        let mut makers = vec![Vec::new(); n];
        for (o, op) in t.ops.iter().enumerate() {
            for &y in op.outputs.iter().chain(op.inplace.iter().map(|v| &v.1)) {
                makers[y].push(o);
            }
        }
        Walk {
            seen: vec![0; n],
            stamp: 0,
            listed: vec![0; n],
            list_stamp: 0,
            ins: vec![Vec::new(); ops],
            ins_ok: vec![false; ops],
            outs: vec![Vec::new(); ops],
            outs_ok: vec![false; ops],
            cost: vec![None; n],
            version: vec![0; n],
            first: vec![NONE; 2 * ops],
            readers_of: Vec::new(),
            in_lists: vec![false; n],
            touched: Vec::new(),
            makers,
            todo: Vec::new(),
            readers: Vec::new(),
        }
    }

    /// Storage `s` may have changed state (been dropped, come back, freed, gone for good).
    pub(super) fn touch(&mut self, s: usize) {
        self.touched.push(s);
    }

    /// A new eviction: the lists that count a touched storage whose droppedness changed are
    /// made again when next read, and the costs that read them are forgotten. Lists, costs and
    /// `dropped` then agree as if every list were made afresh for this eviction.
    pub(super) fn sync(&mut self, consumers: &[Vec<usize>], dropped: &dyn Fn(usize) -> bool) {
        for s in std::mem::take(&mut self.touched) {
            let d = dropped(s);
            if d == self.in_lists[s] {
                continue;
            }
            self.in_lists[s] = d;
            for &c in &consumers[s] {
                self.ins_ok[c] = false;
                self.forget(2 * c);
            }
            for i in 0..self.makers[s].len() {
                let o = self.makers[s][i];
                self.outs_ok[o] = false;
                self.forget(2 * o + 1);
            }
        }
    }

    /// Forgets the costs that read list `l` (its readers, where still current).
    fn forget(&mut self, l: usize) {
        let mut r = std::mem::replace(&mut self.first[l], NONE);
        while r != NONE {
            let Reader { s, version, next } = self.readers_of[r as usize];
            let s = s as usize;
            if self.version[s] == version {
                self.cost[s] = None;
                self.version[s] = version.wrapping_add(1);
            }
            r = next;
        }
    }

    /// The cost of storage `s` read list `l`.
    fn reads(&mut self, s: usize, l: usize) {
        self.readers_of.push(Reader {
            s: s as u32,
            version: self.version[s],
            next: self.first[l],
        });
        self.first[l] = (self.readers_of.len() - 1) as u32;
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
    /// the walk stops with that part (the caller only needs to know it lost). A cost kept from
    /// an earlier eviction is given again where still exact, or where, being a part, it loses
    /// already.
    pub(super) fn cost(
        &mut self,
        t: &Trace,
        consumers: &[Vec<usize>],
        dropped: &dyn Fn(usize) -> bool,
        s: usize,
        downstream: bool,
        loses: &dyn Fn(f64) -> bool,
    ) -> f64 {
        let part = match self.cost[s] {
            Some((c, whole)) if whole || loses(c) => return c,
            part => part.is_some(),
        };
        if self.readers_of.len() >= READERS_CAP {
            self.readers_of.clear();
            self.first.iter_mut().for_each(|r| *r = NONE);
            self.cost.iter_mut().for_each(|c| *c = None);
        }
        self.version[s] = self.version[s].wrapping_add(1);
        // Asked again for a part that no longer loses: the whole, so as not to walk it a third
        // time.
        let never = |_: f64| false;
        let loses = if part { &never } else { loses };
        let (c, whole) = self.walk(t, consumers, dropped, s, downstream, loses);
        self.cost[s] = Some((c, whole));
        c
    }

    /// The walk behind [`Walk::cost`]: the cost, and whether the walk ran to its end. Each
    /// list it reads learns that `s`'s cost depends on it.
    fn walk(
        &mut self,
        t: &Trace,
        consumers: &[Vec<usize>],
        dropped: &dyn Fn(usize) -> bool,
        s: usize,
        downstream: bool,
        loses: &dyn Fn(f64) -> bool,
    ) -> (f64, bool) {
        let producer_time = |x: usize| {
            t.storages[x]
                .producer
                .map_or(f64::INFINITY, |p| t.ops[p].time_s)
        };
        let stamp = next(&mut self.seen, &mut self.stamp);
        self.seen[s] = stamp;
        let mut cost = 0.0;
        // Buffers kept between walks (a walk pushes up to 65 storages).
        let mut todo = std::mem::take(&mut self.todo);
        let mut readers = std::mem::take(&mut self.readers);
        todo.clear();
        todo.push(s);
        let mut seen = 1usize;
        let got = 'walk: {
            while let Some(x) = todo.pop() {
                let Some(p) = t.storages[x].producer else {
                    break 'walk (f64::INFINITY, true);
                };
                cost += t.ops[p].time_s;
                if seen > 64 {
                    break;
                }
                if loses(cost) {
                    break 'walk (cost, false);
                }
                if !self.ins_ok[p] {
                    self.ins_ok[p] = true;
                    self.ins[p] = Self::list(
                        &mut self.listed,
                        &mut self.list_stamp,
                        t.ops[p].inputs.iter().copied(),
                        dropped,
                    );
                }
                self.reads(s, 2 * p);
                // The readers of `x` (an operation reading it twice is listed twice, in a
                // row: its second listing adds nothing).
                readers.clear();
                if downstream {
                    let c = &consumers[x];
                    readers.extend(
                        c.iter()
                            .enumerate()
                            .filter(|&(k, o)| k == 0 || c[k - 1] != *o)
                            .map(|(_, &o)| o),
                    );
                }
                for &o in &readers {
                    if !self.outs_ok[o] {
                        self.outs_ok[o] = true;
                        let o_ = &t.ops[o];
                        let made = o_
                            .outputs
                            .iter()
                            .chain(o_.inplace.iter().map(|v| &v.1))
                            .copied();
                        self.outs[o] =
                            Self::list(&mut self.listed, &mut self.list_stamp, made, dropped);
                    }
                    self.reads(s, 2 * o + 1);
                }
                // A list of 65 storages or more (each listed once) ends the walk by its own
                // end, whatever was seen before: the scan's last push is then the last
                // storage of the lists after it not yet seen, unless that one is also in
                // that list or before it (then look, below). Saves pushing up to the cap: a
                // recurrent loss's backward makes thousands of products, dropped by turns,
                // and nearly every walk of its evictions meets them.
                let mut lens = std::iter::once(self.ins[p].len())
                    .chain(readers.iter().map(|&o| self.outs[o].len()));
                if let Some(b) = lens.position(|n| n > 64) {
                    'fast: for &o in readers[b..].iter().rev() {
                        for &y in self.outs[o].iter().rev() {
                            // `y` is dropped (listed): in the inputs' list if `p` reads it,
                            // in a reader's list if that reader makes it.
                            if consumers[y].contains(&p)
                                || self.makers[y].iter().any(|m| readers[..b].contains(m))
                            {
                                break 'fast;
                            }
                            if self.seen[y] != stamp {
                                break 'walk (cost + producer_time(y), true);
                            }
                        }
                    }
                }
                // This step's storages in the scan's order: the producer's inputs, then what
                // each reader makes. Distinct in a trace in execution order (each storage has
                // one producer; a product of a reader of `x` is made after `p`), except a
                // product that is also an input of `p`: checked below.
                let (ins, outs, marks) = (&self.ins[p], &self.outs, &mut self.seen);
                let segs = || std::iter::once(ins).chain(readers.iter().map(|&o| &outs[o]));
                let n_ins = ins.len();
                // `k`: the place in the step of the storage at hand.
                let mut k = 0;
                for seg in segs() {
                    for &i in seg {
                        k += 1;
                        if marks[i] == stamp {
                            continue;
                        }
                        marks[i] = stamp;
                        seen += 1;
                        todo.push(i);
                        if seen <= 64 {
                            continue;
                        }
                        // The scan would push the rest of this step's storages not yet seen,
                        // then pop the last of them, add its producer and stop. A product
                        // listed after the inputs is pushed unless it is also among them, which
                        // it is not when made after `p` (execution order); else look. `k`
                        // (now one past `i`) is where the rest begins.
                        let rest_of_ins = &ins[k.min(n_ins)..];
                        let total: usize = segs().map(|v| v.len()).sum();
                        let mut j = total;
                        let mut last = None;
                        'last: for v in segs().collect::<Vec<_>>().into_iter().rev() {
                            for &y in v.iter().rev() {
                                j -= 1;
                                if j < k {
                                    break 'last;
                                }
                                let pushed = marks[y] != stamp
                                    && (j < n_ins
                                        || k >= n_ins
                                        || t.storages[y].producer.is_some_and(|py| py > p)
                                        || !rest_of_ins.contains(&y));
                                if pushed {
                                    last = Some(y);
                                    break 'last;
                                }
                            }
                        }
                        break 'walk (cost + producer_time(last.unwrap_or(i)), true);
                    }
                }
            }
            (cost, true)
        };
        self.todo = todo;
        self.readers = readers;
        got
    }
}
