//! The copy engines as Capuchin's FreeTime must see them: "a swap cannot start until its
//! preceding swap finishes" (Capuchin §4.4). A tensor's FreeTime alone (its access gap less its
//! own copies) says a swap hides whenever the gap is long; with the swaps already chosen, the
//! engines may have no room left in that gap. Each engine's time is split at the baseline's
//! operation starts; a chosen swap-out fills the device-to-host engine from its evicted-access
//! on, a swap-in the host-to-device engine backwards from its back-access, and a candidate's
//! FreeTime counts only the room left in its own gap.

use super::analysis::Analysis;
use crate::timeline::Link;

/// Free seconds per operation's slot of one engine, with prefix sums (a Fenwick tree) so that a
/// gap's room is a query, not a walk, and for each slot the nearest one with room left in the
/// direction the engine fills (path-compressed), so that a copy skips the full ones at once.
struct Engine {
    free: Vec<f64>,
    tree: Vec<f64>,
    /// `skip[i]`: a slot at or past `i` (in the filling direction) no nearer than the nearest
    /// one with room; `n` past the end.
    skip: Vec<usize>,
    forward: bool,
}

impl Engine {
    fn new(slots: &[f64], forward: bool) -> Engine {
        let n = slots.len();
        let mut e = Engine {
            free: vec![0.0; n],
            tree: vec![0.0; n + 1],
            skip: (0..n).collect(),
            forward,
        };
        for (i, &s) in slots.iter().enumerate() {
            e.add(i, s);
        }
        e
    }

    /// The nearest slot with room from `i` on, in the filling direction (None: none).
    fn with_room(&mut self, i: usize) -> Option<usize> {
        let n = self.free.len();
        let step = |j: usize, fwd: bool| if fwd { j + 1 } else { j.wrapping_sub(1) };
        let mut j = i;
        // Find, then compress the path behind.
        while j < n && self.free[j] <= 0.0 {
            let next = self.skip[j];
            j = if next == j {
                step(j, self.forward)
            } else {
                next
            };
        }
        let mut k = i;
        while k < n && k != j && self.free[k] <= 0.0 {
            let next = if self.skip[k] == k {
                step(k, self.forward)
            } else {
                self.skip[k]
            };
            self.skip[k] = if j < n { j } else { n };
            k = next;
        }
        (j < n).then_some(j)
    }

    fn add(&mut self, i: usize, v: f64) {
        self.free[i] += v;
        let mut k = i + 1;
        while k < self.tree.len() {
            self.tree[k] += v;
            k += k & k.wrapping_neg();
        }
    }

    /// Free seconds in slots `0..i`.
    fn before(&self, i: usize) -> f64 {
        let mut k = i.min(self.free.len());
        let mut s = 0.0;
        while k > 0 {
            s += self.tree[k];
            k -= k & k.wrapping_neg();
        }
        s
    }

    /// Free seconds in slots `lo..hi`.
    fn room(&self, lo: usize, hi: usize) -> f64 {
        if hi <= lo {
            return 0.0;
        }
        (self.before(hi) - self.before(lo)).max(0.0)
    }

    /// Takes `secs` of the engine from slot `from` on, in its filling direction (the earliest
    /// free first for a swap-out, the latest first for a swap-in); what does not fit is
    /// simply late.
    fn take(&mut self, from: usize, mut secs: f64) {
        let mut at = from;
        while secs > 0.0 {
            let Some(i) = self.with_room(at) else {
                return;
            };
            let got = self.free[i].min(secs);
            self.add(i, -got);
            if self.free[i] <= 1e-15 {
                self.free[i] = 0.0;
            }
            secs -= got;
            at = i;
        }
    }
}

/// Both copy engines under the swaps chosen so far.
pub(super) struct Engines {
    out: Engine,
    back: Engine,
    link: Link,
}

impl Engines {
    /// Idle engines over the baseline: one slot per operation, from its start to the next one's.
    pub(super) fn new(a: &Analysis, link: Link) -> Engines {
        let n = a.start.len();
        let slots: Vec<f64> = (0..n)
            .map(|i| {
                let next = if i + 1 < n { a.start[i + 1] } else { a.end[i] };
                (next - a.start[i]).max(0.0)
            })
            .collect();
        Engines {
            out: Engine::new(&slots, true),
            back: Engine::new(&slots, false),
            link,
        }
    }

    /// A swap of `size` bytes out after `after` and back before `back`, chosen.
    pub(super) fn take(&mut self, size: u64, after: usize, back: usize) {
        let n = self.out.free.len();
        let (lo, hi) = ((after + 1).min(n), back.min(n));
        self.out.take(lo, size as f64 / self.link.d2h);
        if hi > 0 {
            self.back.take(hi - 1, size as f64 / self.link.h2d);
        }
    }

    /// The FreeTime of a swap of `size` bytes between `after` and `back` that is to make room
    /// at operation `p` (between them), given the swaps chosen: the least of its gap less both
    /// its copies (the copy in follows the copy out), the swap-out engine's room before `p` less
    /// its copy out (its bytes go only once copied) and the swap-in engine's room after `p` less
    /// its copy in. Negative: the swap's overhead.
    pub(super) fn free_time(
        &self,
        a: &Analysis,
        size: u64,
        (after, p, back): (usize, usize, usize),
    ) -> f64 {
        let size = size as f64;
        let (out, back_in) = (size / self.link.d2h, size / self.link.h2d);
        let gap = a.start[back] - a.end[after];
        let n = self.out.free.len();
        let (lo, hi) = ((after + 1).min(n), back.min(n));
        let p = p.clamp(lo, hi);
        (gap - out - back_in)
            .min(self.out.room(lo, p) - out)
            .min(self.back.room((p + 1).min(hi), hi) - back_in)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Step, Storage, Trace};

    /// Ten operations of 1 ms each; one storage.
    fn chain() -> (Trace, Analysis) {
        let mut t = Trace::default();
        t.storages.push(Storage {
            size: 1,
            constant: true,
            producer: None,
        });
        for i in 0..10 {
            t.ops
                .push(Op::new(&format!("op{i}"), 1e-3, vec![0], vec![]));
            t.steps.push(Step::Op(i));
        }
        let a = Analysis::new(&t);
        (t, a)
    }

    const LINK: Link = Link { h2d: 1e9, d2h: 1e9 };

    fn close(x: f64, y: f64) -> bool {
        (x - y).abs() < 1e-9
    }

    #[test]
    fn a_lone_swap_must_leave_before_and_come_back_after_its_peak() {
        let (_, a) = chain();
        let e = Engines::new(&a, LINK);
        // From the end of op 1 to the start of op 8 (6 ms), to make room at op 4: out within
        // ops 2 and 3 (2 ms), in within ops 5 to 7 (3 ms). At 1 GB/s, 1 MB takes 1 ms.
        assert!(close(e.free_time(&a, 1_000_000, (1, 4, 8)), 1e-3));
        assert!(close(e.free_time(&a, 2_000_000, (1, 4, 8)), 0.0));
        assert!(close(e.free_time(&a, 3_000_000, (1, 4, 8)), -1e-3));
        // The same swap for op 6: more time out, less to come back.
        assert!(close(e.free_time(&a, 3_000_000, (1, 6, 8)), -2e-3));
    }

    #[test]
    fn chosen_swaps_take_the_room_of_later_ones() {
        let (_, a) = chain();
        let mut e = Engines::new(&a, LINK);
        assert!(close(e.free_time(&a, 1_000_000, (0, 2, 4)), 0.0));
        // 5 ms out from op 2 on, 5 ms in back from op 7: the swap-in engine is busy at op 3.
        e.take(5_000_000, 1, 8);
        assert!(close(e.free_time(&a, 1_000_000, (0, 2, 4)), -1e-3));
        assert!(close(e.free_time(&a, 1_000_000, (1, 4, 8)), -1e-3));
    }

    #[test]
    fn room_is_the_sum_of_free_slots() {
        let mut e = Engine::new(&[1.0, 2.0, 3.0, 4.0], true);
        assert_eq!(e.room(1, 3), 5.0);
        e.take(0, 2.5);
        assert_eq!(e.room(0, 4), 7.5);
        assert_eq!(e.room(0, 2), 0.5);
        // The full first slot is skipped; past the last, the rest is late.
        e.take(0, 4.0);
        assert_eq!(e.room(0, 4), 3.5);
        assert_eq!(e.room(3, 4), 3.5);
        e.take(0, 10.0);
        assert_eq!(e.room(0, 4), 0.0);
        let mut b = Engine::new(&[1.0, 2.0, 3.0, 4.0], false);
        b.take(3, 4.0);
        b.take(3, 4.0);
        assert_eq!(b.room(0, 4), 2.0);
        assert_eq!(b.room(1, 2), 1.0);
    }
}
