use super::*;
use planner::trace::{Access, Touch};

struct Stream {
    t: Tracker,
    seq: u64,
    next_alloc: u64,
    /// Kinds planned before (their calls), recognised from an iteration's first calls.
    kinds: Vec<Arc<[u64]>>,
}

impl Stream {
    fn new() -> Stream {
        Stream {
            t: Tracker::new(),
            seq: 1,
            next_alloc: 1,
            kinds: Vec::new(),
        }
    }
    fn push(&mut self, event: Event) -> After {
        self.seq += 1;
        let kinds = self.kinds.clone();
        self.t.observe(
            &Record {
                seq: self.seq,
                t_ns: 0,
                tid: 1,
                event,
            },
            &mut |hash: u64| {
                kinds
                    .iter()
                    .any(|k| crate::virt::sequence::kind_hash(k) == hash)
                    .then_some((None, false))
            },
        )
    }
    /// Kinds planned before, recognised wherever they begin.
    fn keep(&mut self, kinds: Vec<Arc<[u64]>>) {
        self.t.set_kinds(
            kinds
                .iter()
                .map(|k| (crate::virt::sequence::kind_hash(k), k.clone()))
                .collect(),
        );
        self.kinds = kinds;
    }
    fn alloc(&mut self, size: u64) -> (u64, After) {
        let id = self.next_alloc;
        self.next_alloc += 1;
        let a = self.push(Event::Alloc {
            api: "cudaMalloc".into(),
            alloc: id,
            ptr: id << 32,
            size,
            stream: None,
            result: 0,
        });
        (id, a)
    }
    fn free(&mut self, id: u64) -> After {
        self.free_as(id, false)
    }
    /// A free, of an allocation from the shim's pool where `pooled`.
    fn free_as(&mut self, id: u64, pooled: bool) -> After {
        self.push(Event::Free {
            api: "cudaFree".into(),
            ptr: id << 32,
            alloc: Some(id),
            size: None,
            stream: None,
            result: 0,
            pooled,
        })
    }
    fn memset(&mut self, id: u64, size: u64) -> After {
        self.push(Event::Memset {
            api: "cudaMemsetAsync".into(),
            ptr: id << 32,
            size,
            stream: None,
            touches: vec![Touch {
                alloc: id,
                offset: 0,
                bytes: size,
                access: Access::W,
            }],
            result: 0,
        })
    }
    fn launch(&mut self, func: u64, allocs: &[u64]) -> After {
        self.push(Event::Launch {
            api: "cudaLaunchKernel".into(),
            func,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            stream: None,
            touches: allocs
                .iter()
                .map(|&a| Touch {
                    alloc: a,
                    offset: 0,
                    bytes: 0,
                    access: Access::Rw,
                })
                .collect(),
            result: 0,
        })
    }
    /// One training-like iteration of 7 calls (kernel `f` in the middle); what each said.
    fn iteration(&mut self, w: u64, f: u64) -> Vec<After> {
        self.iteration_from(w, f, 4096)
    }
    /// The same, its first allocation of `first` bytes.
    fn iteration_from(&mut self, w: u64, f: u64, first: u64) -> Vec<After> {
        let mut out = Vec::new();
        let (a, r) = self.alloc(first);
        out.push(r);
        let (b, r) = self.alloc(8192);
        out.push(r);
        out.push(self.launch(1, &[w, a]));
        out.push(self.launch(f, &[a, b]));
        out.push(self.launch(3, &[b, w]));
        out.push(self.free(a));
        out.push(self.free(b));
        out
    }
}

fn plans(v: &[After]) -> Vec<&Found> {
    v.iter()
        .filter_map(|a| match a {
            After::Plan { found, .. } => Some(found),
            _ => None,
        })
        .collect()
}

#[test]
fn a_repeating_iteration_is_found_verified_and_followed_until_it_diverges() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let mut seen = Vec::new();
    // Not before the calls hold one iteration and the next's first NEXT calls (here, with
    // 7-call iterations, two whole ones and more).
    for _ in 0..3 {
        seen.extend(s.iteration(w, 2));
    }
    assert!(plans(&seen).is_empty());
    seen.clear();
    for _ in 0..2 {
        seen.extend(s.iteration(w, 2));
    }
    let found = plans(&seen);
    assert_eq!(found.len(), 1, "found once, as soon as it could be");
    assert_eq!(found[0].period, 7);
    // Boundaries are the iterations' first calls (an alloc of 4096 B after the weight).
    assert_eq!((found[0].boundary - 1) % 7, 0);
    // The tensors of the current iteration are named as the plan names them.
    assert_eq!(
        resolve_in(
            &s.t,
            TensorId::Persistent {
                alloc: w,
                size: 1 << 20
            }
        ),
        Some(w)
    );
    // The same iteration again: followed, nothing said.
    let again = s.iteration(w, 2);
    assert!(again.iter().all(|a| matches!(a, After::Nothing)));
    let k0 = resolve_in(
        &s.t,
        TensorId::Rel {
            back: 0,
            k: 0,
            size: 4096,
        },
    );
    assert_eq!(
        k0,
        Some(s.next_alloc - 2),
        "the 0th allocation of this iteration"
    );
    // Another kernel at call 3: a divergence there, once.
    let changed = s.iteration(w, 9);
    let div: Vec<(usize, usize)> = changed
        .iter()
        .filter_map(|a| match a {
            After::Diverged { call, period, .. } => Some((*call, *period)),
            _ => None,
        })
        .collect();
    assert_eq!(div, vec![(3, 7)]);
    assert!(s.t.found.is_none());
    // The new sequence repeats: found again, from the divergence on.
    let mut seen = Vec::new();
    for _ in 0..60 {
        seen.extend(s.iteration(w, 9));
    }
    let found = plans(&seen);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].period, 7);
}

/// Steps of 3 launches that each make a small result, freed from "another thread" at a place
/// among the next step's calls that changes from step to step (a fixed pseudo-random order);
/// the small results come from the pool where `pooled`. What the tracker said.
fn steps_with_floating_frees(s: &mut Stream, pooled: bool) -> Vec<After> {
    let (w, _) = s.alloc(1 << 20);
    let mut pending: Option<u64> = None;
    let mut seen = Vec::new();
    let mut x: u64 = 12345;
    for _ in 0..40 {
        x = (x * 1_103_515_245 + 12_345) % (1 << 31);
        let lag = ((x >> 16) % 4) as usize;
        let (a, r) = s.alloc(4096);
        seen.push(r);
        let (b, r) = s.alloc(8192);
        seen.push(r);
        let (small, r) = s.alloc(512);
        seen.push(r);
        for (i, f) in [1u64, 2, 3].into_iter().enumerate() {
            if i == lag
                && let Some(p) = pending.take()
            {
                seen.push(s.free_as(p, pooled));
            }
            seen.push(s.launch(f, &[w, a, b, small]));
        }
        if let Some(p) = pending.replace(small) {
            seen.push(s.free_as(p, pooled));
        }
        seen.push(s.free(a));
        seen.push(s.free(b));
    }
    seen
}

#[test]
fn a_pooled_free_may_come_anywhere_without_the_iteration_diverging() {
    let mut s = Stream::new();
    let seen = steps_with_floating_frees(&mut s, true);
    let found = plans(&seen);
    assert!(!found.is_empty(), "the iteration is found");
    assert_eq!(found[0].period, 8, "the pooled frees are no calls");
    assert!(
        !seen.iter().any(|a| matches!(a, After::Diverged { .. })),
        "followed whatever the frees' places"
    );
    assert!(s.t.found.is_some());
    // The same program with the small results as tensors of their own: their frees are
    // calls, and where one comes changes the calls.
    let mut s = Stream::new();
    let seen = steps_with_floating_frees(&mut s, false);
    let diverged = seen.iter().any(|a| matches!(a, After::Diverged { .. }));
    assert!(diverged || plans(&seen).is_empty());
}

#[test]
fn the_models_cut_becomes_the_iteration_boundary() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let mut seen = Vec::new();
    for _ in 0..CHECK / 7 + 2 {
        seen.extend(s.iteration(w, 2));
    }
    let f = plans(&seen)[0].clone();
    // Cut two calls later (after the iteration's two allocations): those two now belong to
    // the iteration before, and the next iteration starts at its first launch.
    assert!(realign_in(&mut s.t, f.generation, f.boundary + 2));
    let g = s.t.found.clone().unwrap();
    assert_eq!((g.boundary - f.boundary) % 7, 2);
    let before = s.t.made.len();
    let (a, _) = s.alloc(4096);
    assert_eq!(
        s.t.made.len(),
        before,
        "an allocation ends the iteration now"
    );
    assert_eq!(s.t.made.last().unwrap().last(), Some(&a));
    s.alloc(8192);
    s.launch(1, &[w, a]);
    assert_eq!(s.t.made.len(), before + 1, "the first launch starts one");
    // A stale generation changes nothing.
    assert!(!realign_in(&mut s.t, f.generation + 1, f.boundary));
}

fn realign_in(t: &mut Tracker, generation: u64, start: usize) -> bool {
    t.realign(generation, start, None)
}

fn next_offset_in(t: &Tracker) -> Option<usize> {
    let f = t.found.as_ref()?;
    Some((t.tokens.len() - f.boundary) % f.period)
}

fn resolve_in(t: &Tracker, name: TensorId) -> Option<u64> {
    t.resolve(name)
}

/// The calls of the last `period` calls seen (the kind of the iteration just run, from its
/// first call), with the tracker's iterations cut there, as the bridge cuts them where the
/// planner's model did.
fn last_kind(t: &mut Tracker, period: usize) -> Arc<[u64]> {
    let start = t.tokens.len() - period;
    let generation = t.generation;
    assert!(t.realign(generation, start + t.dropped, None));
    t.tokens[start..].into()
}

#[test]
fn a_kind_planned_before_is_followed_from_its_first_call() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    // Kind A (first allocation 4096 B) found; its calls kept as a planned kind would be.
    let mut seen = Vec::new();
    for _ in 0..CHECK / 7 + 2 {
        seen.extend(s.iteration_from(w, 2, 4096));
    }
    assert_eq!(plans(&seen).len(), 1);
    let a = last_kind(&mut s.t, 7);
    // Kind B (first allocation 2048 B) found too.
    seen.clear();
    for _ in 0..CHECK / 7 + 2 {
        seen.extend(s.iteration_from(w, 2, 2048));
    }
    assert!(!plans(&seen).is_empty(), "kind B found");
    let b = last_kind(&mut s.t, 7);
    assert_ne!(a, b);
    s.keep(vec![a.clone(), b.clone()]);
    // A again: a divergence from B at its first call; the calls from there begin A and
    // only A, recognised at the next call (A's call 1) and followed.
    let back = s.iteration_from(w, 2, 4096);
    let said: Vec<&After> = back
        .iter()
        .filter(|x| !matches!(x, After::Nothing))
        .collect();
    assert_eq!(said.len(), 2, "{}", said.len());
    assert!(matches!(said[0], After::Diverged { call: 0, .. }));
    assert!(matches!(
        said[1],
        After::Adopted {
            call: 1,
            kind: 7,
            ..
        }
    ));
    // Followed from there: a whole iteration more says nothing.
    let again = s.iteration_from(w, 2, 4096);
    assert!(again.iter().all(|x| matches!(x, After::Nothing)));
    let f = s.t.found.clone().expect("followed");
    assert_eq!(f.expected.as_deref(), Some(&a[..]));
    // Offsets are the kind's: the next call is its call 0.
    assert_eq!(next_offset_in(&s.t), Some(0));
    // The adopted iteration's allocations are named exactly.
    assert_eq!(
        resolve_in(
            &s.t,
            TensorId::Rel {
                back: 1,
                k: 0,
                size: 4096
            }
        ),
        Some(s.next_alloc - 4)
    );
    // B again is recognised the same way; an unknown kind (kernel 5 at call 3) diverges,
    // and detection starts again.
    let to_b = s.iteration_from(w, 2, 2048);
    assert!(to_b.iter().any(|x| matches!(x, After::Adopted { .. })));
    let other = s.iteration_from(w, 5, 2048);
    assert!(
        other
            .iter()
            .any(|x| matches!(x, After::Diverged { call: 3, .. }))
    );
    assert!(s.t.found.is_none());
}

#[test]
fn an_iteration_between_two_kinds_planned_before_is_planned_from_its_one_occurrence() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    for _ in 0..CHECK / 7 + 2 {
        s.iteration_from(w, 2, 4096);
    }
    let a = last_kind(&mut s.t, 7);
    for _ in 0..CHECK / 7 + 2 {
        s.iteration_from(w, 2, 2048);
    }
    let b = last_kind(&mut s.t, 7);
    s.keep(vec![a.clone(), b.clone()]);
    // B followed; then an iteration of no kind kept (kernel 5 in the middle: B's first three
    // calls, then it leaves B), then A.
    assert!(
        s.iteration_from(w, 2, 2048)
            .iter()
            .all(|x| matches!(x, After::Nothing))
    );
    let first = s.seq + 1;
    let other = s.iteration_from(w, 5, 2048);
    assert!(
        other
            .iter()
            .any(|x| matches!(x, After::Diverged { call: 3, .. }))
    );
    let c: Vec<u64> = s.t.tokens[s.t.tokens.len() - 7..].to_vec();
    let back = s.iteration_from(w, 2, 4096);
    let (found, records) = back
        .into_iter()
        .find_map(|x| match x {
            After::Adopted {
                call: 6,
                kind: 7,
                once,
                ..
            } => once,
            _ => None,
        })
        .expect("A adopted (whole: a kind this short), and the iteration before it to plan");
    // The iteration seen once: from the first call of the iteration the program left (B's
    // calls before kernel 5 are its too) up to A's first call.
    let once = found.once.expect("seen once");
    assert_eq!(found.period, 7);
    assert_eq!(&once.tokens[..], &c[..]);
    assert_eq!(found.start_seq, first);
    assert_eq!(once.end_seq, first + 7);
    assert!(records.iter().any(|r| r.seq == first));
    // What the planner models it by: its seven calls, what it allocates named by place.
    let calls = iteration::calls(&records);
    let start = calls.iter().position(|c| c.seq == first).unwrap();
    let st = iteration::once(&calls, start, 7).unwrap();
    assert_eq!(st.touched.len(), 7);
    assert!(st.names.values().any(|n| matches!(
        n,
        TensorId::Rel {
            back: 0,
            k: 1,
            size: 8192
        }
    )));
    assert!(st.names.values().any(|n| *n
        == TensorId::Persistent {
            alloc: w,
            size: 1 << 20
        }));
    // A is followed; the next call is its first.
    assert_eq!(next_offset_in(&s.t), Some(0));
    assert_eq!(
        s.t.found
            .as_ref()
            .and_then(|f| f.expected.clone())
            .as_deref(),
        Some(&a[..])
    );
}

#[test]
fn a_followed_iteration_keeps_only_its_last_two_iterations() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    for _ in 0..CHECK / 7 + 2 {
        s.iteration(w, 2);
    }
    let found = s.t.found.clone().expect("found");
    let generation = found.generation;
    // As if the records had reached the bound: the calls before the previous iteration go.
    let n = s.t.tokens.len();
    let kept_before = s.t.records.len();
    while s.t.tokens.len() < MAX_RECORDS / 4 + 3 * 7 {
        s.iteration(w, 2);
    }
    assert!(s.t.compact());
    // The previous iteration and the one just ended: 14 calls, their 14 records and the
    // weight's allocation.
    assert_eq!(s.t.tokens.len(), 14);
    assert!(s.t.dropped >= MAX_RECORDS / 4);
    assert_eq!(s.t.records.len(), 15, "{kept_before}");
    // Followed on: the next iteration says nothing, and offsets and names still hold.
    let next = s.iteration(w, 2);
    assert!(next.iter().all(|x| matches!(x, After::Nothing)));
    assert_eq!(next_offset_in(&s.t), Some(0));
    assert_eq!(
        resolve_in(
            &s.t,
            TensorId::Rel {
                back: 0,
                k: 1,
                size: 8192
            }
        ),
        Some(s.next_alloc - 1)
    );
    // An index from before the drop realigns to the same phase.
    assert!(s.t.realign(generation, found.boundary, None));
    assert_eq!(next_offset_in(&s.t), Some(0));
    let _ = n;
}

/// Calls of [`Stream::step`].
const STEP: usize = 25;

impl Stream {
    /// A training-like step of [`STEP`] calls: it frees `kept` (what the step before kept), makes
    /// `a` and `c` (4096 B each) and `b` (kept for the next step), clears `a` (or `c`, where
    /// `other`: the same call on another allocation), runs 18 kernels and frees `a` and `c`.
    /// The first (no `kept`) starts with a kernel instead, and its last kernel is another (it
    /// makes a state the others use): the repetition starts at its end. What each call said,
    /// and `b`.
    fn step(&mut self, w: u64, kept: Option<u64>, other: bool) -> (u64, Vec<After>) {
        let mut out = Vec::new();
        out.push(match kept {
            Some(k) => self.free(k),
            None => self.launch(97, &[w]),
        });
        let (a, r) = self.alloc(4096);
        out.push(r);
        let (c, r) = self.alloc(4096);
        out.push(r);
        let (b, r) = self.alloc(8192);
        out.push(r);
        out.push(self.memset(if other { c } else { a }, 4096));
        for f in 10..27 {
            out.push(self.launch(f, &[w, a, b, c]));
        }
        out.push(self.launch(if kept.is_some() { 27 } else { 96 }, &[w, b]));
        out.push(self.free(a));
        out.push(self.free(c));
        assert_eq!(out.len(), STEP);
        (b, out)
    }
}

/// The plan's names for the iteration `found` (as the bridge has the model name them, cut
/// where the tracker cut it), given to the tracker as the bridge gives them.
fn names_of(t: &mut Tracker, found: &Found, records: &[Record]) {
    let calls = iteration::calls(records);
    let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
    let region = iteration::detect_period(&tokens, &iteration::Work::of(&calls), found.period)
        .expect("the region");
    let st = iteration::steady_from(&calls, region, |r| r.cuts().start).expect("steady");
    assert!(t.realign(found.generation, st.start, Some(st.touched.clone())));
}

#[test]
fn one_iteration_and_the_next_first_calls_past_its_boundary_are_enough() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let (mut kept, first) = s.step(w, None, false);
    assert!(plans(&first).is_empty());
    let (b, second) = s.step(w, Some(kept), false);
    // The second step may be planned already, on a cut as quiet as the quietest call (the
    // second step's first, see iteration::quiet_cut), verified over NEXT calls only: it then
    // leaves that plan at its call 22, where the first step ran its own last kernel.
    assert!(
        plans(&second).is_empty()
            || second
                .iter()
                .any(|a| matches!(a, After::Diverged { call: 21, .. })),
        "{:?}",
        plans(&second)
    );
    kept = b;
    // The repetition starts at the first step's last call but one (its calls 0 and 22
    // differ); the fewest bytes are in use before the second step's second call (the first
    // step's `b` freed, the next `a` made). One period later, and NEXT calls on: found in the
    // third step, whose first calls verify the second.
    let (b, third) = s.step(w, Some(kept), false);
    let at: Vec<usize> = third
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, After::Plan { .. }))
        .map(|(i, _)| i)
        .collect();
    assert!(
        matches!(at[..], [k] if k >= 16),
        "found once in the third step: {at:?}"
    );
    let After::Plan { found, records, .. } = &third[at[0]] else {
        unreachable!()
    };
    assert!(found.one_period, "{found:?}");
    assert_eq!(found.period, STEP);
    let found = found.clone();
    let records = records.clone();
    kept = b;
    // Followed call by call, by the plan's names too: the rest of the step and the next.
    names_of(&mut s.t, &found, &records);
    let (b, next) = s.step(w, Some(kept), false);
    assert!(next.iter().all(|a| matches!(a, After::Nothing)));
    kept = b;
    // The same calls, but the clear goes to `c` where the plan's name stands for `a`: a
    // divergence at that call, though every call's token is the one a period before.
    let (_, other) = s.step(w, Some(kept), true);
    assert!(matches!(other[4], After::Diverged { .. }));
    assert!(other[..4].iter().all(|a| matches!(a, After::Nothing)));
}

#[test]
fn a_loop_that_keeps_what_it_allocates_is_no_iteration() {
    // Building a model: each layer's weights made and initialised, kept. The calls repeat,
    // but memory grows with each: not a steady iteration.
    let mut s = Stream::new();
    let mut seen = Vec::new();
    for _ in 0..40 {
        let (l, r) = s.alloc(1 << 16);
        seen.push(r);
        seen.push(s.launch(5, &[l]));
        seen.push(s.launch(6, &[l]));
    }
    assert!(plans(&seen).is_empty());
    // The same loop freeing a scratch of the same size each time is one (once it repeats
    // over a longer stretch than the first loop, which ended).
    let mut seen = Vec::new();
    for _ in 0..60 {
        let (l, r) = s.alloc(1 << 16);
        seen.push(r);
        seen.push(s.launch(5, &[l]));
        seen.push(s.free(l));
    }
    assert_eq!(plans(&seen).len(), 1);
}

#[test]
fn a_freed_allocation_stands_for_no_name() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let name = TensorId::Persistent {
        alloc: w,
        size: 1 << 20,
    };
    assert_eq!(resolve_in(&s.t, name), Some(w));
    s.free(w);
    assert_eq!(resolve_in(&s.t, name), None);
}

/// The kind of the 7-call iteration with kernel `f` at call 3, found by running it until it is
/// (as a plan's kind, cut at its first call).
fn learn(s: &mut Stream, w: u64, f: u64) -> Arc<[u64]> {
    for _ in 0..CHECK / 7 + 2 {
        s.iteration_from(w, f, 4096);
    }
    last_kind(&mut s.t, 7)
}

/// What a list of answers said, but for `Nothing`: (divergence call, adoption call, planned
/// period) in order, as `D`, `A` and `P` with the number.
fn said(v: &[After]) -> Vec<String> {
    v.iter()
        .filter_map(|a| match a {
            After::Diverged { call, .. } => Some(format!("D{call}")),
            After::Adopted { call, .. } => Some(format!("A{call}")),
            After::Plan { found, .. } => Some(format!("P{}", found.period)),
            _ => None,
        })
        .collect()
}

/// Two kinds that share their first calls (as a first micro-step after `zero_grad` and the
/// others share a forward pass) run in a cycle. Once the cycle has come round, each iteration
/// is taken for the kind expected next from its first call, without leaving a plan where the
/// calls part; once the cycle has run twice in a row, it is planned as one iteration and
/// followed.
#[test]
fn kinds_in_a_cycle_are_expected_and_the_cycle_is_planned_as_one_iteration() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let a = learn(&mut s, w, 2);
    let b = learn(&mut s, w, 5);
    assert_eq!(a[..3], b[..3], "the same first calls");
    assert_ne!(a, b);
    s.keep(vec![a.clone(), b.clone()]);
    // A after the Bs: left where its calls part from B (the kind followed), taken for A at
    // the next call.
    assert_eq!(said(&s.iteration_from(w, 2, 4096)), ["D3", "A4"]);
    // Round after round (B, A): once the history says what follows, each is taken for the
    // kind expected at its first call; once the cycle has run twice in a row, it is tried as
    // one iteration of 14 calls a few calls into the next, found, verified and planned.
    let mut rounds = Vec::new();
    for _ in 0..5 {
        rounds.push(said(&s.iteration_from(w, 5, 4096)));
        rounds.push(said(&s.iteration_from(w, 2, 4096)));
    }
    let cycle = rounds
        .iter()
        .position(|r| r.contains(&"P14".to_string()))
        .unwrap_or_else(|| panic!("the cycle planned: {rounds:?}"));
    assert!(
        rounds[..cycle].iter().any(|r| r == &["A0"]),
        "an iteration taken for the kind expected at its first call: {rounds:?}"
    );
    let f = s.t.found.clone().expect("the cycle followed");
    assert_eq!((f.period, f.expected.is_none()), (14, true));
    // Followed whole: two more rounds (B, A, as before) say nothing.
    let mut more = Vec::new();
    for _ in 0..2 {
        more.extend(s.iteration_from(w, 5, 4096));
        more.extend(s.iteration_from(w, 2, 4096));
    }
    assert!(said(&more).is_empty(), "{:?}", said(&more));
}

/// Kinds in no cycle (shapes drawn at random) are never planned as one: a few repeat by chance,
/// not twice in a row over the same kinds.
#[test]
fn kinds_at_random_are_not_taken_for_a_cycle() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let kinds = [2, 5, 6].map(|f| learn(&mut s, w, f));
    s.keep(kinds.to_vec());
    // A square-free order of the three (no run of kinds comes twice in a row), where the
    // kind expected is often right: whatever the tracker takes, it is no cycle.
    let order = "abcacbabcbacabcacbacabcb";
    let mut seen = Vec::new();
    for c in order.chars() {
        let f = match c {
            'a' => 2,
            'b' => 5,
            _ => 6,
        };
        seen.extend(s.iteration_from(w, f, 4096));
    }
    // The same kinds in a cycle are one.
    let mut cycled = Vec::new();
    for _ in 0..6 {
        for f in [2, 5, 6] {
            cycled.extend(s.iteration_from(w, f, 4096));
        }
    }
    assert!(
        said(&cycled).contains(&"P21".to_string()),
        "{:?}",
        said(&cycled)
    );
    assert!(
        said(&seen).iter().all(|x| !x.starts_with('P')),
        "{:?}",
        said(&seen)
    );
}

#[test]
fn the_calls_ahead_say_how_soon_each_allocation_is_touched() {
    let mut s = Stream::new();
    let (w, _) = s.alloc(1 << 20);
    let (kept, _) = s.step(w, None, false);
    let (kept, _) = s.step(w, Some(kept), false);
    // Found in the third step (see the test above).
    let (kept, third) = s.step(w, Some(kept), false);
    let (found, records) = third
        .into_iter()
        .find_map(|a| match a {
            After::Plan { found, records, .. } => Some((found, records)),
            _ => None,
        })
        .expect("found in the third step");
    let calls = iteration::calls(&records);
    let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
    let region = iteration::detect_period(&tokens, &iteration::Work::of(&calls), found.period)
        .expect("the region");
    let st = iteration::steady_from(&calls, region, |r| r.cuts().start).expect("steady");
    // Not followed by a plan's names yet: nothing said.
    assert_eq!(s.t.next_uses(&st.touched), None);
    assert!(s.t.realign(found.generation, st.start, Some(st.touched.clone())));
    // The calls' names as the API gives them (each kernel's touches left out): the clear of
    // `a`, the allocations and frees.
    let (b, _) = s.step(w, Some(kept), false);
    s.free(b);
    let (a, _) = s.alloc(4096);
    let (c, _) = s.alloc(4096);
    let (b, _) = s.alloc(8192);
    // Wrong lengths say nothing.
    assert_eq!(s.t.next_uses(&st.touched[1..]), None);
    let ahead =
        s.t.next_uses(&st.touched)
            .expect("a plan's names are followed");
    // The iteration begins at a step's second call (see the test above): the next call, the
    // clear of `a`, is its call 3. `c` is freed at the step's last call (its call 23), `b` by
    // the next step's first (its last, 24).
    assert_eq!(ahead.get(&a), Some(&0));
    assert_eq!(ahead.get(&c), Some(&20));
    assert_eq!(ahead.get(&b), Some(&21));
    assert_eq!(ahead.get(&w), None);
    assert_eq!(ahead.len(), 3, "{ahead:?}");
    // With every kernel's touches too (its calls 4 to 20): the weight and all three by the
    // kernel after the clear.
    let mut uses: Vec<Vec<TensorId>> = st.touched.to_vec();
    let named = |id: u64| s.t.names_now(id);
    for (offset, list) in uses.iter_mut().enumerate().take(21).skip(4) {
        for id in [w, a, b, c] {
            let n = named(id).unwrap_or_else(|| panic!("allocation {id} named at {offset}"));
            if !list.contains(&n) {
                list.push(n);
            }
        }
    }
    let ahead = s.t.next_uses(&uses).expect("followed");
    assert_eq!(ahead.get(&a), Some(&0));
    for id in [w, b, c] {
        assert_eq!(ahead.get(&id), Some(&1), "allocation {id}: {ahead:?}");
    }
    // Calls before the next one are the next iteration's: there the iteration before's third
    // allocation is this one's `b`, and its own first is not made yet.
    let mut next: Vec<Vec<TensorId>> = vec![Vec::new(); found.period];
    next[1].push(TensorId::Rel {
        back: 1,
        k: 2,
        size: 8192,
    });
    next[2].push(TensorId::Rel {
        back: 0,
        k: 0,
        size: 4096,
    });
    let ahead = s.t.next_uses(&next).expect("followed");
    assert_eq!(ahead.get(&b), Some(&(found.period - 3 + 1)), "{ahead:?}");
    assert_eq!(ahead.len(), 1, "{ahead:?}");
}

impl Tracker {
    /// The name allocation `id` has now: of the current iteration's, or persistent.
    fn names_now(&self, id: u64) -> Option<TensorId> {
        let size = *self.sizes.get(&id)?;
        for (back, made) in self.made.iter().rev().enumerate() {
            if let Some(k) = made.iter().position(|&x| x == id) {
                return Some(TensorId::Rel { back, k, size });
            }
        }
        Some(TensorId::Persistent { alloc: id, size })
    }
}
