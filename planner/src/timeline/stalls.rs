//! Where a replay's time goes beyond compute: its stalls by cause and by pass, and the
//! operations that waited longest. `marmoset plan --explain` prints it, so that a user (or the
//! next person tuning a policy) sees at once whether a plan loses its time to copies out that
//! cannot keep up, to prefetches that arrive late, or to recomputation, and where.

use super::{Outcome, Stall};
use crate::model::Trace;

/// Seconds lost, per cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Lost {
    /// Waiting for a swap-in (a prefetch that had not arrived).
    pub swap_in_s: f64,
    /// Waiting for copies out to release memory.
    pub memory_s: f64,
    /// Re-running producers.
    pub recompute_s: f64,
    /// The program's own copies waiting for a copy engine busy with swaps.
    pub engine_s: f64,
}

impl Lost {
    pub fn total(&self) -> f64 {
        self.swap_in_s + self.memory_s + self.recompute_s + self.engine_s
    }

    fn add(&mut self, s: &Stall) {
        match *s {
            Stall::SwapIn { secs, .. } => self.swap_in_s += secs,
            Stall::Memory { secs, .. } => self.memory_s += secs,
            Stall::Recompute { secs, .. } => self.recompute_s += secs,
            Stall::Engine { secs, .. } => self.engine_s += secs,
        }
    }
}

/// A replay's stalls: in all, in the forward and the backward pass (the trace's own marks),
/// and the operations that lost the most, most first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Breakdown {
    pub all: Lost,
    pub forward: Lost,
    pub backward: Lost,
    pub worst: Vec<(usize, Lost)>,
}

/// The breakdown of `o`, a replay of `t`, with the `top` operations that lost the most.
pub fn breakdown(t: &Trace, o: &Outcome, top: usize) -> Breakdown {
    let mut b = Breakdown::default();
    let mut per_op: Vec<Lost> = vec![Lost::default(); t.ops.len()];
    for s in &o.stalls {
        let op = match *s {
            Stall::SwapIn { op, .. }
            | Stall::Memory { op, .. }
            | Stall::Recompute { op, .. }
            | Stall::Engine { op, .. } => op,
        };
        b.all.add(s);
        let Some(l) = per_op.get_mut(op) else {
            continue;
        };
        l.add(s);
        if t.ops[op].backward {
            b.backward.add(s);
        } else {
            b.forward.add(s);
        }
    }
    let mut ops: Vec<(usize, Lost)> = per_op
        .into_iter()
        .enumerate()
        .filter(|(_, l)| l.total() > 0.0)
        .collect();
    // Most lost first; ties by position, so the list is the same on every run.
    ops.sort_by(|x, y| y.1.total().total_cmp(&x.1.total()).then(x.0.cmp(&y.0)));
    ops.truncate(top);
    b.worst = ops;
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Storage};
    use crate::timeline::{Decision, Link, simulate};

    /// One tensor of 100 B made by op 0, read by op 3 in the backward pass; ops of 1 s each,
    /// links of 100 B/s: swapped out after op 0 and brought back from op 2, the copy in takes
    /// 1 s and starts at op 2's start, so op 3 waits nothing; brought back from op 3 itself,
    /// op 3 waits the whole second, a swap-in stall in the backward pass.
    fn trace() -> Trace {
        let mut t = Trace::default();
        t.storages.push(Storage {
            size: 100,
            constant: false,
            producer: Some(0),
        });
        t.ops.push(Op::new("make", 1.0, vec![], vec![0]));
        t.ops.push(Op::new("a", 1.0, vec![], vec![]));
        t.ops.push(Op::new("b", 1.0, vec![], vec![]));
        t.ops.push(Op {
            backward: true,
            ..Op::new("use", 1.0, vec![0], vec![])
        });
        t.steps = (0..4).map(crate::model::Step::Op).collect();
        t.validate().expect("a valid trace");
        t
    }

    #[test]
    fn a_late_prefetch_is_a_swap_in_stall_of_the_operation_that_waits() {
        let t = trace();
        let link = Link {
            h2d: 100.0,
            d2h: 100.0,
        };
        let swap = |trigger| {
            vec![(
                0,
                Decision::Swap {
                    after: 0,
                    trigger,
                    back: 3,
                },
            )]
        };
        let early = simulate(&t, 1000, link, &swap(2));
        assert_eq!(breakdown(&t, &early, 5), Breakdown::default());
        let late = simulate(&t, 1000, link, &swap(3));
        let b = breakdown(&t, &late, 5);
        assert!((b.all.swap_in_s - 1.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.all.memory_s + b.all.recompute_s, 0.0, "{b:?}");
        assert_eq!(b.backward, b.all, "{b:?}");
        assert_eq!(b.forward, Lost::default(), "{b:?}");
        assert_eq!(b.worst.len(), 1, "{b:?}");
        assert_eq!(b.worst[0].0, 3, "{b:?}");
        assert!(
            (b.all.total() - late.stall_s).abs() < 1e-9,
            "{b:?} {late:?}"
        );
    }

    #[test]
    fn the_worst_operations_come_most_first_and_only_as_many_as_asked() {
        let t = trace();
        let o = Outcome {
            stalls: vec![
                Stall::Memory { op: 1, secs: 0.5 },
                Stall::Recompute {
                    op: 3,
                    storage: 0,
                    producer: 0,
                    secs: 2.0,
                },
                Stall::Memory { op: 2, secs: 0.25 },
                Stall::Memory { op: 1, secs: 0.5 },
            ],
            ..simulate(&t, 1000, Link { h2d: 1.0, d2h: 1.0 }, &Vec::new())
        };
        let b = breakdown(&t, &o, 2);
        assert_eq!(
            b.worst.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![3, 1],
            "{b:?}"
        );
        assert_eq!(b.worst[1].1.memory_s, 1.0);
        assert_eq!(b.forward.memory_s, 1.25);
        assert_eq!(b.backward.recompute_s, 2.0);
        assert_eq!(b.all.total(), 3.25);
    }
}
