//! The run's steps: the training iterations of the call stream, each passive, guided by a plan,
//! or guided until the program left the plan; each one's device time against its plan's
//! prediction.
//!
//! - **Where steps start.** The shim's own cuts when it planned (each `plan` record's `start`,
//!   the `seq` of its iteration's first call, and `period`, in calls, of the longest period
//!   planned: the shim may first find and plan a network's repeated blocks), else its tracker's
//!   (`iteration`), else the planner's detection on the trace (`planner::iteration::detect`,
//!   cut where the repetition starts, when it covers half the calls or more). Boundaries are each cut plus whole periods up to the next
//!   cut (the first cut also minus whole periods), within the stretch of calls that repeats; a
//!   step is a whole period from a boundary. A call is a record of kind `alloc`, `free`,
//!   `copy`, `memset`, `launch`, `cudnn`, `cublas` or `sync` (what the tracker counts).
//! - **Guided.** A plan for the steps' period applies from the first boundary after its record
//!   (the executor takes it there) until a `divergence`: the step holding the divergence left the plan (the rest of
//!   it ran passively), and the next plan record starts guidance again.
//! - **Measured** on the rebuilt device clock ([`super::clock`]): from where the compute engine
//!   stood before the step's first call to where it stood before the next step's.

use super::clock::{Cause, Clock, is_call};
use super::u;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Passive,
    Guided,
    /// Guided until a divergence, passive after it.
    Left,
}

impl Mode {
    pub fn key(self) -> &'static str {
        match self {
            Mode::Passive => "passive",
            Mode::Guided => "guided",
            Mode::Left => "left",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Passive => "passive",
            Mode::Guided => "guided",
            Mode::Left => "left the plan",
        }
    }

    pub fn color(self) -> &'static str {
        match self {
            Mode::Passive => "#bab0ac",
            Mode::Guided => "#4c78a8",
            Mode::Left => "#f58518",
        }
    }
}

/// A `plan` record: what the in-process planner decided for an iteration.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seq: u64,
    /// The iteration it is for, in calls.
    pub period: usize,
    pub policy: String,
    pub budget: Option<u64>,
    pub predicted_ms: Option<f64>,
    pub swaps: u64,
    pub recomputes: u64,
    pub feasible: bool,
    /// A plan kept for its iteration kind and used again (no planning).
    pub reused: bool,
    /// Host time its planning took.
    pub planning_ms: f64,
}

#[derive(Debug, Clone)]
pub struct Step {
    /// The `seq` of its first call, and of the next step's first call (`None`: the trace's end).
    pub first: u64,
    pub next: Option<u64>,
    pub mode: Mode,
    /// The plan guiding it (index into [`Steps::plans`]).
    pub plan: Option<usize>,
    /// Where a divergence left the plan.
    pub divergence: Option<u64>,
    pub measured_ms: f64,
    /// Its calls' device times, summed: the step with nothing moved, recomputed or waited for.
    pub compute_ms: f64,
    pub recompute_ms: f64,
    pub to_host: u64,
    pub to_device: u64,
    pub evictions: usize,
    pub restores: usize,
    pub drops: usize,
    pub recomputations: usize,
    pub stalls: BTreeMap<Cause, f64>,
}

impl Step {
    pub fn contains(&self, seq: u64) -> bool {
        seq >= self.first && self.next.is_none_or(|n| seq < n)
    }

    pub fn predicted_ms(&self, plans: &[Plan]) -> Option<f64> {
        self.plan.and_then(|p| plans[p].predicted_ms)
    }
}

#[derive(Debug, Default)]
pub struct Steps {
    pub steps: Vec<Step>,
    pub plans: Vec<Plan>,
    /// Which records gave the iteration: "the shim's plan", "the shim's tracker", "the
    /// planner's detection".
    pub source: &'static str,
    pub period: usize,
}

impl Steps {
    /// Whether the eviction recorded at `seq`, of a tensor last used by the call `used`, was
    /// the plan's: a plan guided its step there (guided, or not yet left), and the tensor was
    /// used in that step (the passive mechanism's victims are the least recently used).
    pub fn planned_eviction(&self, seq: u64, used: u64) -> bool {
        self.steps.iter().any(|s| {
            s.contains(seq)
                && used >= s.first
                && match s.mode {
                    Mode::Guided => true,
                    Mode::Left => s.divergence.is_some_and(|d| seq < d),
                    Mode::Passive => false,
                }
        })
    }
}

/// The steps of a trace (`recs` sorted by `seq`; `text` for the planner's detection), without
/// their times ([`measure`] adds them). Empty when no iteration repeats.
pub fn find(text: &str, recs: &[Value]) -> Steps {
    let calls: Vec<u64> = recs
        .iter()
        // The iteration's calls, as the shim counts them (`planner::iteration::is_call`: a
        // pooled free is none).
        .filter(|r| is_call(r["kind"].as_str().unwrap_or_default()) && r["pooled"] != true)
        .filter_map(|r| u(r, "seq"))
        .collect();
    let index: HashMap<u64, usize> = calls.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    fn of_kind<'a>(recs: &'a [Value], k: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        recs.iter().filter(move |r| r["kind"] == k)
    }
    let plans: Vec<Plan> = of_kind(recs, "plan")
        .map(|r| Plan {
            seq: u(r, "seq").unwrap_or(0),
            period: u(r, "period").unwrap_or(0) as usize,
            policy: r["policy"].as_str().unwrap_or("?").to_string(),
            budget: u(r, "budget"),
            predicted_ms: r["predicted_ms"].as_f64(),
            swaps: u(r, "swaps").unwrap_or(0),
            recomputes: u(r, "recomputes").unwrap_or(0),
            feasible: r["feasible"].as_bool().unwrap_or(false),
            reused: r["reused"].as_bool().unwrap_or(false),
            planning_ms: r["planning_ms"].as_f64().unwrap_or(0.0),
        })
        .collect();
    // The repeating stretch, by the planner's detection (typed records; a trace this version
    // cannot type gets none).
    let region = planner::trace::read(text).ok().and_then(|typed| {
        let calls = planner::iteration::calls(&typed);
        let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
        planner::iteration::detect(&tokens, &planner::iteration::Work::of(&calls))
    });
    // Each cut the shim made (it cuts again after a divergence), in order, of the longest
    // period it found: the training step (the repetitions it found first in a long step are
    // a network's blocks).
    let anchors = |kind: &str| -> Vec<(usize, usize)> {
        let mut v: Vec<(usize, usize)> = of_kind(recs, kind)
            .filter_map(|r| {
                let start = *index.get(&u(r, "start")?)?;
                let period = u(r, "period")? as usize;
                (period > 0).then_some((start, period))
            })
            .collect();
        let longest = v.iter().map(|a| a.1).max().unwrap_or(0);
        v.retain(|a| a.1 == longest);
        v.sort_unstable();
        v.dedup();
        v
    };
    let (source, anchors) = match (anchors("plan"), anchors("iteration"), region) {
        (a, _, _) if !a.is_empty() => ("the shim's plan", a),
        (_, a, _) if !a.is_empty() => ("the shim's tracker", a),
        // The detection's repetition must cover half the calls: one iteration of a network
        // whose blocks repeat is not a run of steps.
        (_, _, Some(r)) if r.end <= calls.len() && 2 * (r.end - r.start) >= calls.len() => {
            ("the planner's detection", vec![(r.start, r.period)])
        }
        _ => return Steps::default(),
    };
    // Boundaries: each cut plus whole periods up to the next cut (the first cut also minus
    // whole periods, back as far as the detection saw the calls repeat), within the repeating
    // stretch; a step is a whole period from a boundary.
    let mut bounds: Vec<(usize, usize)> = Vec::new();
    for (i, &(start, period)) in anchors.iter().enumerate() {
        let lowest = if i == 0 {
            region.map_or(start, |r| r.start.min(start))
        } else {
            start
        };
        let highest = match anchors.get(i + 1) {
            Some(next) => next.0,
            None => region.map_or(calls.len(), |r| r.end.max(start + period)),
        }
        .min(calls.len());
        let first = start - (start - lowest) / period * period;
        bounds.extend(
            (0..)
                .map(|k| first + k * period)
                .take_while(|b| b + period <= highest)
                .map(|b| (b, period)),
        );
    }
    let period = anchors[0].1;
    let divergences: Vec<u64> = of_kind(recs, "divergence")
        .filter_map(|r| u(r, "seq"))
        .collect();
    let mut steps: Vec<Step> = Vec::new();
    for (b, p) in bounds {
        steps.push(Step {
            first: calls[b],
            next: calls.get(b + p).copied(),
            mode: Mode::Passive,
            plan: None,
            divergence: None,
            measured_ms: 0.0,
            compute_ms: 0.0,
            recompute_ms: 0.0,
            to_host: 0,
            to_device: 0,
            evictions: 0,
            restores: 0,
            drops: 0,
            recomputations: 0,
            stalls: BTreeMap::new(),
        });
    }
    // Guidance: the newest plan recorded before a step starts guides it, from the first step
    // after its record until a divergence; a plan dropped there is not taken again.
    let (mut in_force, mut taken): (Option<usize>, Option<usize>) = (None, None);
    for s in &mut steps {
        if let Some(p) = plans
            .iter()
            .rposition(|p| p.seq < s.first && p.period == period)
            && taken.is_none_or(|q| q < p)
        {
            in_force = Some(p);
            taken = Some(p);
        }
        let Some(p) = in_force else { continue };
        s.plan = Some(p);
        s.divergence = divergences.iter().copied().find(|d| s.contains(*d));
        s.mode = if s.divergence.is_some() {
            in_force = None;
            Mode::Left
        } else {
            Mode::Guided
        };
    }
    Steps {
        steps,
        plans,
        source,
        period,
    }
}

/// Adds each step's times, bytes moved and stalls from the clock and the records.
pub fn measure(steps: &mut Steps, recs: &[Value], clock: &Clock) {
    let mut timing: HashMap<u64, f64> = HashMap::new();
    for r in recs {
        if r["kind"] == "timing"
            && let (Some(of), Some(d)) = (u(r, "of"), r["device_ms"].as_f64())
        {
            timing.insert(of, d);
        }
    }
    for s in &mut steps.steps {
        let start = clock.before.get(&s.first).copied().unwrap_or(0.0);
        let end = s
            .next
            .and_then(|n| clock.before.get(&n).copied())
            .unwrap_or(clock.compute_end);
        s.measured_ms = end - start;
    }
    let mut i = 0;
    for r in recs {
        let Some(seq) = u(r, "seq") else { continue };
        while i < steps.steps.len() && steps.steps[i].next.is_some_and(|n| seq >= n) {
            i += 1;
        }
        let Some(s) = steps.steps.get_mut(i).filter(|s| s.contains(seq)) else {
            continue;
        };
        let kind = r["kind"].as_str().unwrap_or_default();
        let nbytes = u(r, "bytes").unwrap_or(0);
        match kind {
            "evict" => {
                s.evictions += 1;
                s.to_host += nbytes;
            }
            "restore" => {
                s.restores += 1;
                s.to_device += nbytes;
            }
            "drop" => s.drops += 1,
            "recompute" => {
                s.recomputations += 1;
                if let Some((a, b)) = clock.span.get(&seq) {
                    s.recompute_ms += b - a;
                }
            }
            k if is_call(k) => s.compute_ms += timing.get(&seq).copied().unwrap_or(0.0),
            _ => {}
        }
    }
    for &(seq, ms, cause) in &clock.stalls {
        if let Some(s) = steps.steps.iter_mut().find(|s| s.contains(seq)) {
            *s.stalls.entry(cause).or_default() += ms;
        }
    }
}
