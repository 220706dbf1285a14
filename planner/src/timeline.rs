//! The timeline simulator: one compute stream and two copy engines (H2D, D2H) at a device
//! profile's PCIe bandwidth, a memory budget, and a plan saying, per storage, whether it is kept,
//! swapped (out after its evicted-access, in from its in-trigger, needed by its back-access) or
//! recomputed (dropped after its evicted-access, its producer re-run before its back-access).
//!
//! Feedback rules (the papers'): a swap cannot start before the previous one in its direction
//! ends; an access waits for its tensor; an allocation waits for memory (swap-outs in flight
//! release theirs when they end). Every stall is explained by an event.

use crate::model::{Step, Trace};
use std::collections::HashMap;

/// What happens to one storage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Swap out after operation `after`, start the swap-in at the start of `trigger`, needed
    /// again by `back`.
    Swap {
        after: usize,
        trigger: usize,
        back: usize,
    },
    /// Drop after `after`, re-run its producer before `back`.
    Recompute { after: usize, back: usize },
    /// Keep the storage past the program's free of it until operation `until` has run, as a
    /// source of a later recomputation (DTR keeps such tensors too). Dropped, it costs nothing
    /// meanwhile, and can itself be recomputed.
    Extend { until: usize },
}

/// Decisions per storage; a storage may be moved several times over disjoint intervals.
pub type Plan = Vec<(usize, Decision)>;

/// PCIe bandwidths in bytes per second.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub h2d: f64,
    pub d2h: f64,
}

impl Link {
    pub fn from_profile(p: &simgpu_model::Profile) -> Link {
        Link {
            h2d: p.pcie_h2d_gbs * 1e9,
            d2h: p.pcie_d2h_gbs * 1e9,
        }
    }
}

/// Why time was lost.
#[derive(Debug, Clone, PartialEq)]
pub enum Stall {
    /// Operation `op` waited `secs` for storage `storage` to come back.
    SwapIn {
        op: usize,
        storage: usize,
        secs: f64,
    },
    /// Operation `op` waited `secs` for swap-outs to release memory.
    Memory { op: usize, secs: f64 },
    /// Operation `op` re-ran producer `producer` of `storage` (`secs` of compute).
    Recompute {
        op: usize,
        storage: usize,
        producer: usize,
        secs: f64,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub makespan: f64,
    pub peak: u64,
    pub stall_s: f64,
    pub swapped_out: u64,
    pub swapped_in: u64,
    pub recomputed_ops: u64,
    /// Never above the budget, and every recomputation possible.
    pub feasible: bool,
    /// The operation at which memory exceeded the budget most, and by how much.
    pub worst: Option<(usize, u64)>,
    /// A recomputation needed a storage the program had already freed (an invalid plan).
    pub invalid: bool,
    pub stalls: Vec<Stall>,
    /// Every operation at which memory exceeded the budget, with the excess (largest first).
    pub overs: Vec<(usize, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Resident,
    /// Copy out in flight until `.0`; memory still held.
    Leaving(f64),
    Out,
    /// Copy in until `.0`; memory held.
    Arriving(f64),
    Dropped,
    Freed,
}

struct Sim<'a> {
    t: &'a Trace,
    budget: u64,
    link: Link,
    now: f64,
    d2h_free: f64,
    h2d_free: f64,
    mem: u64,
    state: Vec<State>,
    /// Swap-outs in flight: (end, storage).
    leaving: Vec<(f64, usize)>,
    out: Outcome,
}

impl Sim<'_> {
    /// Releases the memory of swap-outs that have ended by `at`.
    fn release(&mut self, at: f64) {
        let mut i = 0;
        while i < self.leaving.len() {
            let (end, s) = self.leaving[i];
            if end <= at {
                self.leaving.swap_remove(i);
                if self.state[s] == State::Leaving(end) {
                    self.state[s] = State::Out;
                    self.mem -= self.t.storages[s].size;
                }
            } else {
                i += 1;
            }
        }
    }

    /// The program (or an ended extension) frees `s`.
    fn free(&mut self, s: usize) {
        let size = self.t.storages[s].size;
        match self.state[s] {
            State::Resident | State::Arriving(_) => self.mem -= size,
            State::Leaving(_) => {
                self.mem -= size;
                self.leaving.retain(|l| l.1 != s);
            }
            _ => {}
        }
        self.state[s] = State::Freed;
    }

    /// Takes `bytes` at time `at`; returns when it got them (after waiting for swap-outs).
    fn take(&mut self, bytes: u64, mut at: f64, op: usize) -> f64 {
        self.release(at);
        while self.mem + bytes > self.budget {
            let next = self
                .leaving
                .iter()
                .map(|l| l.0)
                .fold(f64::INFINITY, f64::min);
            if !next.is_finite() {
                break;
            }
            if next > at {
                self.out.stalls.push(Stall::Memory {
                    op,
                    secs: next - at,
                });
                self.out.stall_s += next - at;
                at = next;
            }
            self.release(next);
        }
        self.mem += bytes;
        if self.mem > self.budget {
            self.out.feasible = false;
            let over = self.mem - self.budget;
            if self.out.worst.is_none_or(|w| over > w.1) {
                self.out.worst = Some((op, over));
            }
            match self.out.overs.last_mut() {
                Some(last) if last.0 == op => last.1 = last.1.max(over),
                _ => self.out.overs.push((op, over)),
            }
        }
        self.out.peak = self.out.peak.max(self.mem);
        at
    }

    fn swap_in(&mut self, s: usize, at: f64, op: usize) -> f64 {
        let size = self.t.storages[s].size;
        let start = self.take(size, at.max(self.h2d_free), op);
        let end = start + size as f64 / self.link.h2d;
        self.h2d_free = end;
        self.out.swapped_in += size;
        self.state[s] = State::Arriving(end);
        end
    }

    /// Operation `op` waits for `s` to arrive at `end`.
    fn arrive(&mut self, s: usize, end: f64, op: usize) {
        if end > self.now {
            self.out.stalls.push(Stall::SwapIn {
                op,
                storage: s,
                secs: end - self.now,
            });
            self.out.stall_s += end - self.now;
            self.now = end;
        }
        self.state[s] = State::Resident;
    }

    /// Makes `s` available to operation `op` at `self.now`, recomputing recursively.
    fn need(&mut self, s: usize, op: usize, depth: usize) {
        match self.state[s] {
            // Still on the device while its swap-out runs: usable.
            State::Resident | State::Leaving(_) => {}
            State::Out => {
                // Not triggered: fetched on demand.
                let e = self.swap_in(s, self.now, op);
                self.arrive(s, e, op);
            }
            State::Arriving(e) => self.arrive(s, e, op),
            State::Freed => self.out.invalid = true,
            State::Dropped => {
                let Some(p) = self.t.storages[s].producer else {
                    self.out.invalid = true;
                    return;
                };
                if depth < 64 {
                    for &i in &self.t.ops[p].inputs {
                        self.need(i, op, depth + 1);
                    }
                }
                // An in-place version is recomputed in its old version's (recomputed) memory.
                match self.t.ops[p].inplace.iter().find(|v| v.1 == s) {
                    Some(&(old, _)) if self.state[old] == State::Resident => {
                        self.state[old] = State::Dropped
                    }
                    _ => self.now = self.take(self.t.storages[s].size, self.now, op),
                }
                let secs = self.t.ops[p].time_s;
                self.out.stalls.push(Stall::Recompute {
                    op,
                    storage: s,
                    producer: p,
                    secs,
                });
                self.out.stall_s += secs;
                self.out.recomputed_ops += 1;
                self.now += secs;
                self.state[s] = State::Resident;
            }
        }
    }
}

/// Replays the trace under `budget` with `plan`.
pub fn simulate(t: &Trace, budget: u64, link: Link, plan: &Plan) -> Outcome {
    let mut triggers: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut after: HashMap<usize, Vec<(usize, bool)>> = HashMap::new();
    let mut extended: HashMap<usize, usize> = HashMap::new();
    for &(s, d) in plan {
        match d {
            Decision::Swap {
                after: a, trigger, ..
            } => {
                after.entry(a).or_default().push((s, true));
                triggers.entry(trigger).or_default().push(s);
            }
            Decision::Recompute { after: a, .. } => after.entry(a).or_default().push((s, false)),
            Decision::Extend { until } => {
                let u = extended.entry(s).or_insert(until);
                *u = (*u).max(until);
            }
        }
    }
    for v in triggers.values_mut() {
        v.sort_unstable();
    }
    for v in after.values_mut() {
        v.sort_unstable();
    }
    let mut sim = Sim {
        t,
        budget,
        link,
        now: 0.0,
        d2h_free: 0.0,
        h2d_free: 0.0,
        mem: 0,
        state: t
            .storages
            .iter()
            .map(|s| {
                if s.constant {
                    State::Resident
                } else {
                    State::Freed
                }
            })
            .collect(),
        leaving: Vec::new(),
        out: Outcome {
            feasible: true,
            ..Outcome::default()
        },
    };
    sim.take(t.constant_bytes(), 0.0, 0);
    // Frees postponed by extensions, by the operation after which they happen.
    let mut deferred: HashMap<usize, Vec<usize>> = HashMap::new();
    // The next operation to run.
    let mut next = 0;
    for step in &t.steps {
        match *step {
            Step::Free(s) => match extended.get(&s) {
                Some(&u) if u >= next => deferred.entry(u).or_default().push(s),
                _ => sim.free(s),
            },
            Step::Op(i) => {
                next = i + 1;
                let op = &t.ops[i];
                if let Some(ss) = triggers.get(&i) {
                    for &s in ss {
                        let at = match sim.state[s] {
                            // A swap-in cannot start before its swap-out ended.
                            State::Leaving(e) => e.max(sim.now),
                            State::Out => sim.now,
                            _ => continue,
                        };
                        sim.release(at);
                        if sim.state[s] == State::Out {
                            sim.swap_in(s, at, i);
                        }
                    }
                }
                for &s in op.inputs.iter().chain(&op.mutates) {
                    sim.need(s, i, 0);
                }
                let bytes: u64 = op.outputs.iter().map(|&s| t.storages[s].size).sum();
                sim.now = sim.take(bytes, sim.now, i);
                for &s in &op.outputs {
                    sim.state[s] = State::Resident;
                }
                // In-place writes: the new version takes over the old one's memory; the old
                // version is gone and can only come back by recomputation.
                for &(old, new) in &op.inplace {
                    sim.state[new] = State::Resident;
                    sim.state[old] = State::Dropped;
                }
                sim.now += op.time_s;
                if let Some(ss) = after.get(&i) {
                    for &(s, swap) in ss {
                        if sim.state[s] != State::Resident {
                            continue;
                        }
                        let size = t.storages[s].size;
                        if swap {
                            let start = sim.now.max(sim.d2h_free);
                            let end = start + size as f64 / link.d2h;
                            sim.d2h_free = end;
                            sim.out.swapped_out += size;
                            sim.state[s] = State::Leaving(end);
                            sim.leaving.push((end, s));
                        } else {
                            sim.mem -= size;
                            sim.state[s] = State::Dropped;
                        }
                    }
                }
                for s in deferred.remove(&i).unwrap_or_default() {
                    sim.free(s);
                }
            }
        }
    }
    sim.out.makespan = sim.now;
    sim.out
        .overs
        .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if sim.out.invalid {
        sim.out.feasible = false;
    }
    sim.out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{Op, Storage};

    /// a -> b -> c -> d(a): a is produced by op 0 and read by op 3.
    fn chain() -> Trace {
        let s = |size, producer| Storage {
            size,
            constant: false,
            producer,
        };
        let op = Op::new;
        Trace {
            storages: vec![
                s(100, Some(0)),
                s(100, Some(1)),
                s(100, Some(2)),
                s(10, Some(3)),
            ],
            ops: vec![
                op("a", 1.0, vec![], vec![0]),
                op("b", 1.0, vec![0], vec![1]),
                op("c", 1.0, vec![1], vec![2]),
                op("d", 1.0, vec![0, 2], vec![3]),
            ],
            steps: vec![
                Step::Op(0),
                Step::Op(1),
                Step::Op(2),
                Step::Free(1),
                Step::Op(3),
                Step::Free(0),
                Step::Free(2),
                Step::Free(3),
            ],
        }
    }

    /// Swap a (storage 0) out after op 0, in from op `trigger`, back at op 3.
    fn swap_a(trigger: usize) -> Plan {
        vec![(
            0,
            Decision::Swap {
                after: 0,
                trigger,
                back: 3,
            },
        )]
    }

    const LINK: Link = Link {
        h2d: 100.0,
        d2h: 100.0,
    };

    #[test]
    fn the_baseline_is_the_sum_of_operations_and_the_peak_is_counted() {
        let t = chain();
        let o = simulate(&t, u64::MAX, LINK, &Plan::new());
        assert_eq!(o.makespan, 4.0);
        assert_eq!(o.peak, 300);
        assert_eq!(
            o.peak,
            t.peak(),
            "the simulator and the independent count agree"
        );
        assert!(o.feasible && o.stall_s == 0.0);
        let tight = simulate(&t, 250, LINK, &Plan::new());
        assert!(!tight.feasible);
        assert_eq!(tight.worst, Some((2, 50)));
    }

    /// Hand-computed: swap a out after op 0 (1 s at 100 B/s, ends at 2), in from op 2's start
    /// (t = 2, ends at 3), needed by op 3 at t = 3: no stall. At op 2, b, c and the arriving a
    /// are all held: 300 bytes.
    #[test]
    fn a_hidden_swap() {
        let t = chain();
        let plan = swap_a(2);
        assert!(!simulate(&t, 299, LINK, &plan).feasible);
        let o = simulate(&t, 300, LINK, &plan);
        assert!(o.feasible, "{o:?}");
        assert_eq!(o.makespan, 4.0);
        assert_eq!(o.stall_s, 0.0);
        assert_eq!((o.swapped_out, o.swapped_in), (100, 100));
    }

    /// Hand-computed: with the swap-in triggered only at op 3 (t = 3), op 3 waits 1 s.
    #[test]
    fn a_late_trigger_stalls() {
        let t = chain();
        let plan = swap_a(3);
        let o = simulate(&t, 300, LINK, &plan);
        assert_eq!(o.makespan, 5.0);
        assert_eq!(o.stall_s, 1.0);
        assert!(matches!(
            o.stalls[0],
            Stall::SwapIn {
                op: 3,
                storage: 0,
                ..
            }
        ));
    }

    /// Hand-computed: recomputing a re-runs op 0 (1 s) before op 3.
    #[test]
    fn a_recompute() {
        let t = chain();
        let plan = vec![(0, Decision::Recompute { after: 1, back: 3 })];
        let o = simulate(&t, 210, LINK, &plan);
        assert!(o.feasible, "{o:?}");
        assert_eq!(o.makespan, 5.0);
        assert_eq!(o.recomputed_ops, 1);
        assert_eq!(o.peak, 210);
    }

    /// a (10 B) -> b (100 B); x (100 B) -> y (100 B); out(b, y). a is freed after op 1.
    pub(crate) fn kept_source() -> Trace {
        let s = |size, producer| Storage {
            size,
            constant: false,
            producer: Some(producer),
        };
        let op = |name, inputs, outputs| Op::new(name, 1.0, inputs, outputs);
        Trace {
            storages: vec![s(10, 0), s(100, 1), s(100, 2), s(100, 3), s(10, 4)],
            ops: vec![
                op("a", vec![], vec![0]),
                op("b", vec![0], vec![1]),
                op("x", vec![], vec![2]),
                op("y", vec![2], vec![3]),
                op("out", vec![1, 3], vec![4]),
            ],
            steps: vec![
                Step::Op(0),
                Step::Op(1),
                Step::Free(0),
                Step::Op(2),
                Step::Op(3),
                Step::Free(2),
                Step::Op(4),
                Step::Free(1),
                Step::Free(3),
                Step::Free(4),
            ],
        }
    }

    /// Hand-computed: b dropped after op 1 and recomputed before op 4 needs a, which the
    /// program freed after op 1. Without an extension the plan is invalid; with a kept until
    /// op 4, memory is a + x at op 2 (110), a + x + y at op 3 (210), a + y + b + out at op 4
    /// (220), and op 4 waits 1 s for b.
    #[test]
    fn an_extension_keeps_a_freed_source() {
        let t = kept_source();
        assert_eq!(simulate(&t, u64::MAX, LINK, &Plan::new()).peak, 300);
        let drop_b = (1, Decision::Recompute { after: 1, back: 4 });
        let o = simulate(&t, 220, LINK, &vec![drop_b]);
        assert!(o.invalid && !o.feasible, "{o:?}");
        let o = simulate(
            &t,
            220,
            LINK,
            &vec![drop_b, (0, Decision::Extend { until: 4 })],
        );
        assert!(o.feasible, "{o:?}");
        assert_eq!((o.peak, o.makespan, o.recomputed_ops), (220, 6.0, 1));
        assert!(
            !simulate(
                &t,
                219,
                LINK,
                &vec![drop_b, (0, Decision::Extend { until: 4 })]
            )
            .feasible
        );
        // Dropped as well, a costs nothing until op 4 recomputes it first (two re-runs):
        // y + a + b + out = 220 at op 4, x + y = 200 at op 3.
        let plan = vec![
            drop_b,
            (0, Decision::Extend { until: 4 }),
            (0, Decision::Recompute { after: 1, back: 4 }),
        ];
        let o = simulate(&t, 220, LINK, &plan);
        assert!(o.feasible, "{o:?}");
        assert_eq!((o.peak, o.makespan, o.recomputed_ops), (220, 7.0, 2));
        let o = simulate(&t, 210, LINK, &plan);
        assert_eq!(o.worst, Some((4, 10)));
    }

    /// Op 1's output must wait for a's swap-out (ends at t = 2) to get memory.
    #[test]
    fn an_allocation_waits_for_memory() {
        let t = chain();
        let plan = swap_a(2);
        let o = simulate(&t, 100, LINK, &plan);
        assert!(
            o.stalls
                .iter()
                .any(|s| matches!(s, Stall::Memory { op: 1, .. })),
            "{o:?}"
        );
        assert!(o.makespan > 4.0);
    }
}
