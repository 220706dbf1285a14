//! The planner's bridge: a verified iteration (the tracker's records, no trace file needed)
//! becomes the planner's model (`planner::shimtrace::convert`) and is planned by the policy
//! `MARMOSET_POLICY` names (`planner::policy::run`, the code `marmoset plan` runs) on a background
//! thread, off the hooks' path (Capuchin's measured execution: the program goes on passively
//! meanwhile). The plan waits in the executor until the next iteration boundary.

use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::virt::executor::Ready;
use crate::virt::recompute::Recipe;
use crate::virt::sequence::Found;
use planner::iteration::TensorId;
use planner::shimtrace::{Converted, as_held, convert_once, convert_with, first_writes};
use planner::timeline::{Decision, Link, Outcome, Plan};
use planner::trace::{Event, Held, Record, Replay};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The producing calls of the storages `plan` recomputes, from the records it was planned on:
/// each recomputation's slice (`carried_out::slice`: its producer, after the producers of the
/// old versions it rebuilds on the way), in program order, as one recipe.
fn recipes(converted: &Converted, plan: &Plan, records: &[Record]) -> HashMap<usize, Recipe> {
    let mut base: HashMap<u64, u64> = HashMap::new();
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for r in records {
        if let Event::Alloc {
            alloc, ptr, size, ..
        } = r.event
        {
            base.insert(alloc, ptr);
            sizes.insert(alloc, size);
        }
    }
    let names = converted.iteration.as_ref().ok().map(|st| &st.names);
    let name = |a: u64| -> Option<TensorId> {
        names
            .and_then(|n| n.get(&a).copied())
            .or(Some(TensorId::Persistent {
                alloc: a,
                size: *sizes.get(&a)?,
            }))
    };
    let until = planner::memory::carried_out::valid_until(&converted.trace);
    // One operation's calls as a recipe: the call, then its chain; an update in place of what
    // the calls before it in the slice rebuilt, alone.
    let of_op = |op: usize| -> Result<Recipe, String> {
        let gone = || {
            format!(
                "{} cannot be rebuilt from its record",
                converted.trace.ops[op].name
            )
        };
        let (Some(&(call, seq)), Some(Some(replay))) =
            (converted.ops.get(op), converted.replays.get(op))
        else {
            return Err(gone());
        };
        let rec = records.iter().find(|r| r.seq == seq).ok_or_else(gone)?;
        if !planner::shimtrace::replays_in_shim(&rec.event, Some(replay))
            && !converted.first_written.contains_key(&seq)
        {
            return Recipe::member(
                &rec.event,
                replay,
                name,
                |a| base.get(&a).copied(),
                |a| sizes.get(&a).copied(),
            )
            .map(|r| r.at(call))
            .ok_or_else(gone);
        }
        // The launch as the planner saw it: its first writes are writes.
        let first = converted
            .first_written
            .get(&seq)
            .map_or(&[][..], |v| &v[..]);
        let event = first_writes(
            &rec.event,
            |a| first.contains(&a),
            |a| sizes.get(&a).copied(),
        );
        let recipe = Recipe::of(&event, replay, name, |a| base.get(&a).copied())
            .map(|r| r.at(call))
            .ok_or_else(gone)?;
        // A chain: each member too, or no recipe (the storage is then kept or swapped).
        let chain = converted.chains.get(op).map_or(&[][..], |c| &c[..]);
        let members: Option<Vec<Recipe>> = chain
            .iter()
            .map(|m| {
                let rec = records.iter().find(|r| r.seq == m.seq)?;
                let replay = m.replay.as_ref()?;
                // An in-place update, or an elementwise kernel replayed as recorded.
                Recipe::member(
                    &rec.event,
                    replay,
                    name,
                    |a| base.get(&a).copied(),
                    |a| sizes.get(&a).copied(),
                )
                .or_else(|| Recipe::of(&rec.event, replay, name, |a| base.get(&a).copied()))
                .or_else(|| Recipe::copy(&rec.event, name, |a| sizes.get(&a).copied()))
                .map(|r| r.at(m.call))
            })
            .collect();
        let tensor = |s: usize| converted.storages.get(s).map(|o| o.tensor);
        let aliases: Vec<(TensorId, TensorId)> = converted
            .internal
            .get(op)
            .map_or(&[][..], |v| &v[..])
            .iter()
            .filter_map(|&(from, to)| Some((tensor(from)?, tensor(to)?)))
            .collect();
        let members = members.ok_or_else(|| {
            format!(
                "a member of {}'s chain cannot be rebuilt from its record",
                converted.trace.ops[op].name
            )
        })?;
        Ok(recipe.chain(members, &aliases))
    };
    let mut out = HashMap::new();
    for &(st, d) in plan {
        let Decision::Recompute { back, .. } = d else {
            continue;
        };
        if out.contains_key(&st) {
            continue;
        }
        let Some(ops) = planner::memory::carried_out::slice(&converted.trace, &until, st, back)
        else {
            continue;
        };
        let made = ops.iter().map(|&op| of_op(op)).try_fold(
            None::<Recipe>,
            |acc, r| -> Result<Option<Recipe>, String> {
                let r = r?;
                Ok(Some(match acc {
                    None => r,
                    Some(acc) => acc.followed_by(r),
                }))
            },
        );
        match made {
            Ok(Some(recipe)) => {
                out.insert(st, recipe);
            }
            Ok(None) => {}
            Err(why) => log(
                Level::Debug,
                &format!("bridge: no recipe for storage {st}: {why}"),
            ),
        }
    }
    out
}

/// The records without the lineage of convolutions the shim cannot replay now, so that the
/// model gives their outputs no producer and no plan recomputes them: a backend execution
/// whose execution plan was destroyed since (or another made at its address), and a legacy
/// convolution under μ-cuDNN (its recorded workspace is the micro-batches', and its replay
/// runs the recorded algorithm undivided). A backend execution under μ-cuDNN is replayed as
/// it ran, as micro-batches (`recompute::cudnn`).
fn replayable_now(records: Vec<Record>) -> Vec<Record> {
    let microbatching = config().microbatching_legacy();
    let gone = |r: &Record| match &r.event {
        Event::Lineage {
            replay: Replay::Backend { plan, life },
        } => crate::ffi::cudnn_backend::plan_life(*plan as usize) != Some(*life),
        Event::Lineage {
            replay: Replay::Cudnn { conv: Some(_), .. },
        } => microbatching,
        _ => false,
    };
    if !records.iter().any(gone) {
        return records;
    }
    records.into_iter().filter(|r| !gone(r)).collect()
}

/// One planning at a time: a divergence while planning waits for the next detection.
static PLANNING: AtomicBool = AtomicBool::new(false);

/// What this run's evictions among `records` measured: (bytes, device milliseconds).
fn evictions_measured(records: &[Record]) -> (u64, f64) {
    let (mut bytes, mut ms) = (0u64, 0f64);
    for r in records {
        if let Event::Evict {
            bytes: b,
            device_ms,
            ..
        } = r.event
            && device_ms > 0.0
        {
            bytes += b;
            ms += device_ms;
        }
    }
    (bytes, ms)
}

/// PCIe bandwidths the plan assumes: what this run's evictions measured (bytes over the device
/// time of their copies), else the copy that measured the link when none had (see [`plan`]),
/// else a PCIe 4.0 x16 link.
fn link(records: &[Record]) -> Link {
    let (bytes, ms) = evictions_measured(records);
    let bw = if ms > 0.0 && bytes > 0 {
        bytes as f64 / (ms * 1e-3)
    } else {
        crate::virt::memory::link::measured().unwrap_or(25e9)
    };
    let bw = bw * config().test_fast_link.unwrap_or(1) as f64;
    Link { h2d: bw, d2h: bw }
}

/// Memory the plans leave unplanned below the budget: the allocator needed that much more than
/// a plan's model counted (guided execution's feedback, [`replan`]).
static MARGIN: AtomicU64 = AtomicU64::new(0);
/// Replans for memory so far: at most [`MOST_REPLANS`].
static REPLANS: AtomicU64 = AtomicU64::new(0);
const MOST_REPLANS: u64 = 8;

/// The iteration a plan guided needed `short` bytes more at one call than the plan left it:
/// it is planned again with that much more of the budget left unplanned ([`next_margin`]; at
/// most [`MOST_REPLANS`] times), its new plan guiding from the call it is ready at. However
/// small the shortfall, the allocator's answer to it is a whole tensor evicted and restored
/// every iteration. The new plan replaces the guiding plan only if it predicts an iteration
/// shorter than the guiding plan's with the shortfall copied out and back in on top (the host
/// waiting for both); else the guiding plan stays, the margin is as it was, and the feedback
/// stops.
pub fn replan(r: crate::virt::executor::Replan) {
    let Some(budget) = crate::virt::memory::budget() else {
        return;
    };
    if !config().memory_feedback {
        return;
    }
    let before = MARGIN.load(Ordering::Relaxed);
    let margin = next_margin(before, r.short, budget / 4);
    if margin == before || REPLANS.fetch_add(1, Ordering::Relaxed) >= MOST_REPLANS {
        return;
    }
    let Some(records) = crate::virt::sequence::records(r.found.generation) else {
        return;
    };
    let limit_s = to_beat(r.predicted_s, r.short, link(&records));
    MARGIN.store(margin, Ordering::Relaxed);
    log(
        Level::Info,
        &format!(
            "bridge: a call needed {} B more than the plan left it; planning the iteration again with {margin} B of the budget left unplanned (it replaces the plan if it predicts less than {:.3} ms)",
            r.short,
            limit_s * 1e3
        ),
    );
    plan_as(
        r.found,
        records,
        Some(Feedback {
            limit_s,
            margin_before: before,
        }),
    );
}

/// The margin the memory feedback leaves unplanned once a call needed `short` bytes beyond the
/// budget under a plan made within `before` less: that much more, in whole 2 MiB pages, at most
/// `most`; it only grows. What a plan left unused below its budget is no evidence of a
/// shortfall: the margin grows by what was found short, not down from the plan's peak.
fn next_margin(before: u64, short: u64, most: u64) -> u64 {
    before
        .saturating_add(short)
        .next_multiple_of(2 << 20)
        .min(most)
        .max(before)
}

/// The iteration a replan must beat, in seconds: the guiding plan's `predicted_s` with the
/// `moved` bytes it was short of copied out and back in, the host waiting for both.
fn to_beat(predicted_s: f64, moved: u64, link: Link) -> f64 {
    predicted_s + moved as f64 / link.d2h + moved as f64 / link.h2d
}

/// A replan of the memory feedback: the iteration it must beat, and the margin before it.
#[derive(Clone, Copy)]
struct Feedback {
    /// The guiding plan's iteration with the allocator's answer to the shortfall, in seconds.
    limit_s: f64,
    margin_before: u64,
}

impl Feedback {
    /// Whether the replan's `outcome` is declined: it does not fit, or does not beat the
    /// guiding plan with the allocator's answer (see [`replan`]).
    fn declines(&self, outcome: &Outcome) -> bool {
        !outcome.feasible || outcome.makespan >= self.limit_s
    }
}

/// Plans the iteration in the background. One planning at a time: an iteration found while
/// another is planned waits for it (the newest such request only: it supersedes older ones).
pub fn plan(found: Found, records: Vec<Record>) {
    plan_as(found, records, None);
}

/// [`plan`], or the memory feedback's replan (`feedback`: a kind planned before is planned
/// again, not reused).
fn plan_as(found: Found, records: Vec<Record>, feedback: Option<Feedback>) {
    let Some(policy) = config().policy.guided() else {
        return;
    };
    let Some(budget) = crate::virt::memory::budget() else {
        return;
    };
    if feedback.is_none() && found.once.is_none() && reuse(&found) {
        return;
    }
    // A plan is made for the link it will use: measured here, on the program's thread (the
    // planning thread has no context), when neither an eviction nor the allocator has yet.
    if evictions_measured(&records).0 == 0 {
        crate::virt::memory::link::measure_once();
    }
    if let Ok(mut next) = NEXT.lock() {
        *next = Some((found, records, feedback));
    }
    if PLANNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("marmoset-plan".into())
        .spawn(move || {
            loop {
                let job = NEXT.lock().ok().and_then(|mut n| n.take());
                match job {
                    Some((found, records, feedback)) => {
                        plan_one(policy, budget, found, records, feedback)
                    }
                    None => {
                        PLANNING.store(false, Ordering::Release);
                        // A request that came in meanwhile, with nobody left to take it.
                        let more = NEXT.lock().is_ok_and(|n| n.is_some());
                        if !more || PLANNING.swap(true, Ordering::AcqRel) {
                            return;
                        }
                    }
                }
            }
        });
    match spawned {
        // MARMOSET_PLAN_WAIT: the program waits for the plan (simulated measurements).
        Ok(h) if config().plan_wait => {
            let _ = h.join();
        }
        Ok(_) => {}
        Err(_) => {
            PLANNING.store(false, Ordering::Release);
            log(
                Level::Warn,
                "bridge: cannot start the planning thread; execution stays passive",
            );
        }
    }
}

/// The plan of a kind seen before, when the iteration just found is one: the tracker's
/// iterations are cut where that kind's were, and its plan guides from the next boundary,
/// with no planning. False when the kind is new.
fn reuse(found: &Found) -> bool {
    let t0 = Instant::now();
    let Some(from) = found.boundary.checked_sub(found.period) else {
        return false;
    };
    let Some(window) = crate::virt::sequence::tokens(found.generation, from, found.period) else {
        return false;
    };
    let Some((cut, ready, record)) = crate::virt::kinds::find(&window) else {
        return false;
    };
    let names = crate::virt::kinds::names(&ready);
    if !crate::virt::sequence::realign(found.generation, from + cut, names) {
        return false;
    }
    let planning_ms = t0.elapsed().as_secs_f64() * 1e3;
    log(
        Level::Info,
        &format!(
            "bridge: this iteration is a kind planned before ({} calls): its plan guides again, no planning",
            found.period
        ),
    );
    crate::core::bus::emit(crate::virt::kinds::reused(
        record,
        found.start_seq,
        planning_ms,
    ));
    crate::virt::executor::offer(ready);
    true
}

/// Requests waiting for the planning thread.
/// (The iteration, its records, the memory feedback's replan if it asked for it.)
type Job = (Found, Vec<Record>, Option<Feedback>);
static NEXT: Mutex<Option<Job>> = Mutex::new(None);

/// Plans one verified iteration and offers the plan to the executor.
fn plan_one(
    policy: &'static str,
    budget: u64,
    found: Found,
    records: Vec<Record>,
    feedback: Option<Feedback>,
) {
    let t0 = Instant::now();
    // Less what the memory feedback leaves unplanned (the plan record names what was planned).
    let budget = budget
        .saturating_add(config().test_uncounted.unwrap_or(0))
        .saturating_sub(MARGIN.load(Ordering::Relaxed));
    // Durations come in as their events complete: the calls still running when the
    // iteration was found have theirs now (no waiting: the program's clock is not ours).
    crate::sinks::timing::drain(false);
    let records = crate::virt::sequence::records(found.generation).unwrap_or(records);
    let records = replayable_now(records);
    let got = catch_unwind(AssertUnwindSafe(|| {
        plan_now(policy, budget, &records, &found)
    }));
    let planning_ms = t0.elapsed().as_secs_f64() * 1e3;
    match got {
        Ok(Ok(Planned {
            workspace_cap,
            converted,
            plan,
            outcome,
            planned_within,
            held,
            link,
            steps,
            timed_out,
        })) => {
            let (swaps, recomputes) = plan.iter().fold((0, 0), |(s, r), (_, d)| match d {
                Decision::Swap { .. } => (s + 1, r),
                Decision::Recompute { .. } => (s, r + 1),
                Decision::Extend { .. } => (s, r),
            });
            // The kind: the iteration's calls from the model's cut (the tracker's calls of
            // this detection), or those of the iteration seen once.
            let kind_tokens = match &found.once {
                Some(once) => Some(once.tokens.to_vec()),
                None => converted.iteration.as_ref().ok().and_then(|st| {
                    crate::virt::sequence::tokens(found.generation, st.start, found.period)
                }),
            };
            let declined = feedback.is_some_and(|f| f.declines(&outcome));
            let record = Event::Plan {
                iteration_kind: kind_tokens.as_deref().map(crate::virt::sequence::kind_hash),
                reused: false,
                steps: Some(steps),
                timed_out,
                unplanned: Some(MARGIN.load(Ordering::Relaxed)).filter(|&m| m > 0),
                feedback: feedback.is_some(),
                declined,
                policy: policy.into(),
                budget,
                start: found.start_seq,
                period: found.period as u64,
                ops: converted.trace.ops.len() as u64,
                swaps,
                recomputes,
                feasible: outcome.feasible,
                predicted_ms: outcome.makespan * 1e3,
                planning_ms,
                swap_bytes: outcome.swapped_out,
                recompute_ms: plan
                    .iter()
                    .filter(|(_, d)| matches!(d, Decision::Recompute { back, .. } if *back != usize::MAX))
                    .filter_map(|&(st, _)| converted.trace.storages.get(st)?.producer)
                    .map(|op| converted.trace.ops[op].time_s * 1e3)
                    // (from +0: an empty sum of floats is -0)
                    .fold(0.0, |a, b| a + b),
                held,
                pcie_bps: Some((link.h2d, link.d2h)),
                workspace_cap,
            };
            crate::core::bus::emit(record.clone());
            log(
                Level::Info,
                &format!(
                    "bridge: {policy} planned {} operations ({} without a duration) in {planning_ms:.1} ms, {steps} search steps: {swaps} swaps, {recomputes} recomputations, {:.3} ms predicted per iteration{}{}",
                    converted.trace.ops.len(),
                    converted.untimed,
                    outcome.makespan * 1e3,
                    workspace_cap.map_or(String::new(), |c| format!(
                        ", convolutions lent up to {c} B of workspace"
                    )),
                    if outcome.feasible {
                        ""
                    } else {
                        " (not feasible within the budget)"
                    }
                ),
            );
            if let Some(f) = feedback.filter(|_| declined) {
                MARGIN.store(f.margin_before, Ordering::Relaxed);
                REPLANS.store(MOST_REPLANS, Ordering::Relaxed);
                log(
                    Level::Info,
                    &format!(
                        "bridge: the replan predicts {:.3} ms, not less than the {:.3} ms of the guiding plan with the allocator's evictions: the guiding plan stays, and the memory feedback stops",
                        outcome.makespan * 1e3,
                        f.limit_s * 1e3
                    ),
                );
                return;
            }
            if timed_out {
                log(
                    Level::Warn,
                    &format!(
                        "bridge: the search was cut by its time bound ({} ms, MARMOSET_PLAN_DEADLINE_MS) after {steps} of its {} steps: this plan depends on the host's speed",
                        config().plan_deadline_ms,
                        config().plan_steps
                    ),
                );
            }
            // An iteration seen once: its plan is kept for when the kind comes again (the
            // program has moved on to another).
            if found.once.is_some() {
                let period = converted.iteration.as_ref().map_or(0, |st| st.period);
                if period != found.period {
                    no_plan(
                        policy,
                        format!(
                            "the model of the iteration seen once has {period} calls, the tracker's {}",
                            found.period
                        ),
                        planning_ms,
                    );
                    return;
                }
                log(
                    Level::Info,
                    &format!(
                        "bridge: the plan of the kind seen once ({period} calls) is kept for when it comes again"
                    ),
                );
                keep(
                    found,
                    converted,
                    (plan, workspace_cap),
                    (outcome, planned_within),
                    &records,
                    kind_tokens,
                    record,
                );
                return;
            }
            // The model's cut becomes the tracker's iteration boundary, so that the
            // plan's call offsets and tensor names are the tracker's; from now on each call
            // touches what the plan's names stand for, or the program has diverged.
            let aligned = converted.iteration.as_ref().is_ok_and(|st| {
                st.period == found.period
                    && crate::virt::sequence::realign(
                        found.generation,
                        st.start,
                        Some(st.touched.clone()),
                    )
            });
            if !aligned {
                no_plan(
                    policy,
                    "the program diverged while it was planned".into(),
                    planning_ms,
                );
                return;
            }
            let ready = keep(
                found,
                converted,
                (plan, workspace_cap),
                (outcome, planned_within),
                &records,
                kind_tokens,
                record,
            );
            // The plan guides from the next call: what it says of the calls already run in
            // this iteration is past.
            log(
                Level::Info,
                &format!(
                    "bridge: the plan guides from this iteration, from its call {}",
                    crate::virt::sequence::next_offset().unwrap_or(0)
                ),
            );
            crate::virt::executor::adopt(ready);
        }
        Ok(Err(why)) => no_plan(policy, why, planning_ms),
        Err(_) => no_plan(policy, "the planner panicked".into(), planning_ms),
    }
}

/// The plan ready for the executor, its recipes made from the records it was planned on, and
/// kept as its kind's (`tokens`: the kind's calls, if the tracker still has them).
fn keep(
    found: Found,
    converted: Converted,
    (plan, workspace_cap): (Plan, Option<u64>),
    (outcome, planned_within): (Outcome, u64),
    records: &[Record],
    tokens: Option<Vec<u64>>,
    record: Event,
) -> Arc<Ready> {
    let recipes = recipes(&converted, &plan, records);
    let ready = Arc::new(Ready {
        found,
        converted,
        plan,
        outcome,
        planned_within,
        recipes,
        workspace_cap,
    });
    if let Some(tokens) = tokens {
        crate::virt::kinds::remember(tokens, ready.clone(), record);
    }
    ready
}

fn no_plan(policy: &str, why: String, planning_ms: f64) {
    log(
        Level::Info,
        &format!("bridge: {policy} gave no plan ({why}); execution stays passive"),
    );
    crate::core::bus::emit(Event::NoPlan {
        policy: policy.into(),
        why,
        planning_ms,
    });
}

/// The model of the records' steady iteration (of `period` calls: the repetition the tracker
/// follows) and the policy's plan for it. The model folds chains
/// (`planner::shimtrace::convert_with`) as the shim carries them out: a plan made on the
/// unfolded model predicted ResNet-50 at 0.3 of its peak 9% faster than the folded one and ran
/// 3% slower (simulated H100), so only MARMOSET_TEST_FOLD=0 plans it. The plan is the one the
/// shim carries out (`planner::memory::carried_out::as_carried_out`: no `Extend`, no recomputation from
/// sources the program frees first), and so is its prediction.
fn plan_now(
    policy: &str,
    budget: u64,
    records: &[Record],
    found: &Found,
) -> Result<Planned, String> {
    let fold = config().test_fold != Some(false);
    let mut converted = match &found.once {
        Some(once) => convert_once(records, fold, found.start_seq, once.end_seq)?,
        None => convert_with(records, fold, Some(found.period))?,
    };
    if let Err(why) = &converted.iteration {
        return Err(format!("the model found no steady iteration: {why}"));
    }
    // The model as the allocator holds its tensors (planner::shimtrace::as_held): pages, and
    // a pool of small tensors off the budget; the plan record says how, for `marmoset plan`.
    let held = crate::virt::memory::holding();
    let budget = held.map_or(budget, |h| {
        as_held(&mut converted.trace, &h);
        h.left_of(budget)
    });
    let link = link(records);
    converted.trace.shim_carries_out = true;
    // A bound on the search's steps, which decides (the same iteration and budget give the
    // same plan on any host), and a time bound far above, a safety net: the best plan found so
    // far when either is reached (the planner's anytime search).
    let pace = planner::memory::Pace::new(config().plan_deadline_ms as f64 / 1e3);
    let t0 = Instant::now();
    let (steps, timed_out) = (std::cell::Cell::new(0u64), std::cell::Cell::new(false));
    let steps_before = std::cell::Cell::new(0u64);
    let most = config().plan_steps;
    let more = || {
        if steps.get() >= most {
            return false;
        }
        steps.set(steps.get() + 1);
        let in_time = pace.more(t0.elapsed().as_secs_f64());
        timed_out.set(!in_time);
        in_time
    };
    // As the shim carries it out (`Trace::shim_carries_out`). Under the joint plan, with
    // the convolutions' configurations chosen with it: a plan per cap on their lent
    // workspaces, each with the whole bound on steps (the time bound is shared).
    converted.trace.lends_workspaces = config().joint_workspace();
    let joint = if converted.trace.lends_workspaces {
        planner::memory::joint::choose(&converted.trace, budget, &mut |cap, c| {
            steps_before.set(steps_before.get() + steps.get());
            steps.set(0);
            let planned = planner::policy::run_until(policy, c, budget, link, &more);
            if let Some((_, o)) = &planned
                && crate::core::state::logs(Level::Debug)
            {
                log(
                    Level::Debug,
                    &format!(
                        "bridge: convolutions lent up to {} B of workspace: {:.3} ms predicted{}",
                        cap,
                        o.makespan * 1e3,
                        if o.feasible { "" } else { " (not feasible)" }
                    ),
                );
            }
            planned
        })
    } else {
        None
    };
    let (workspace_cap, plan, outcome) = match joint {
        Some((cap, plan, outcome)) => (Some(cap), plan, outcome),
        None => {
            let (plan, outcome) =
                planner::policy::run_until(policy, &converted.trace, budget, link, &more)
                    .ok_or_else(|| format!("the planner has no policy {policy:?}"))?;
            (None, plan, outcome)
        }
    };
    steps.set(steps.get() + steps_before.get());
    Ok(Planned {
        workspace_cap,
        converted,
        plan,
        outcome,
        planned_within: budget,
        held,
        link,
        steps: steps.get(),
        timed_out: timed_out.get(),
    })
}

/// What [`plan_now`] gives: the model, the plan and its prediction as the shim carries it out,
/// how memory was held and the PCIe links the plan assumed.
struct Planned {
    /// The joint plan's cap on a convolution's lent workspace (None: not the joint plan).
    workspace_cap: Option<u64>,
    converted: Converted,
    plan: Plan,
    outcome: Outcome,
    /// The budget the plan keeps within, as the model holds memory (`held`).
    planned_within: u64,
    held: Option<Held>,
    link: Link,
    /// The search's steps (the times it asked whether to go on).
    steps: u64,
    /// The time bound stopped the search.
    timed_out: bool,
}

#[cfg(test)]
mod feedback_tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_margin_grows_by_the_shortfall_in_whole_pages() {
        assert_eq!(next_margin(0, 40 * MIB, 250 * MIB), 40 * MIB);
        assert_eq!(next_margin(40 * MIB, 1, 250 * MIB), 42 * MIB);
        // At most a quarter of the budget, never less than before.
        assert_eq!(next_margin(200 * MIB, 100 * MIB, 250 * MIB), 250 * MIB);
        assert_eq!(next_margin(300 * MIB, 0, 250 * MIB), 300 * MIB);
    }

    #[test]
    fn a_replan_that_does_not_fit_or_beat_the_limit_is_declined() {
        let f = Feedback {
            limit_s: 0.020,
            margin_before: 0,
        };
        let o = |makespan: f64, feasible: bool| Outcome {
            makespan,
            feasible,
            ..Outcome::default()
        };
        assert!(!f.declines(&o(0.019, true)));
        assert!(f.declines(&o(0.020, true)));
        assert!(f.declines(&o(0.015, false)), "a replan that does not fit");
    }

    #[test]
    fn a_replan_must_beat_the_allocators_round_trip() {
        let link = Link {
            h2d: 50e9,
            d2h: 25e9,
        };
        let t = to_beat(0.050, 500_000_000, link);
        // 10 ms in, 20 ms out on top of the 50 ms predicted.
        assert!((t - 0.080).abs() < 1e-12, "{t}");
    }
}
