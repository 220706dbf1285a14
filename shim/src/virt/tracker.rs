//! The tracker: the bus's observer under a planner policy. It feeds each record to the
//! observed sequence ([`sequence`](super::sequence)), and acts on what that finds: an iteration
//! boundary goes to the executor, a verified iteration to the bridge to be planned, a
//! divergence to the executor (passive for the rest of the iteration).

use super::sequence::{self, After};
use crate::core::config::Level;
use crate::core::state::{config, log};
use planner::trace::{Event, Record};

/// Whether the tracker runs: a planner policy manages memory.
pub fn enabled() -> bool {
    config().policy.guided().is_some() && crate::virt::memory::active()
}

/// Sees one record (every record the shim writes or would write).
pub fn observe(r: &Record) {
    if !enabled() {
        return;
    }
    if let Event::Lineage {
        replay: planner::trace::Replay::Kernel { params, .. },
    } = &r.event
    {
        crate::virt::recompute::note_params(params);
    }
    // A kind planned before, recognised from an iteration's first calls: its plan, kept for
    // the executor once the sequence's lock is released.
    let mut kept = None;
    let (boundary, after) = sequence::see(r, &mut |hash: u64| {
        let (ready, record) = crate::virt::kinds::get(hash)?;
        let names = crate::virt::kinds::names(&ready);
        let provisional = ready.found.once.is_some();
        kept = Some((ready, record));
        Some((names, provisional))
    });
    if let Some(period) = boundary {
        crate::virt::executor::boundary(period);
        if let Some(r) = crate::virt::executor::take_replan() {
            crate::virt::bridge::replan(r);
        }
    }
    match after {
        After::Nothing => {}
        After::Plan {
            found,
            records,
            calls,
        } => {
            crate::core::bus::emit(Event::Iteration {
                start: found.start_seq,
                period: found.period as u64,
                calls: calls as u64,
            });
            // A plan that guided (a kind's, found again or inside a longer cycle) speaks of
            // another iteration's calls from here: passive until the new one guides.
            crate::virt::executor::diverged();
            log(
                Level::Info,
                &format!(
                    "tracker: an iteration of {} calls, verified after {calls} calls{}; planning it",
                    found.period,
                    if found.one_period {
                        " (over one iteration and the next's first calls: followed call by call)"
                    } else {
                        ""
                    }
                ),
            );
            crate::virt::bridge::plan(found, records);
        }
        After::Diverged { seq, call, period } => {
            crate::core::bus::emit(Event::Divergence {
                at: seq,
                call: call as u64,
                period: period as u64,
            });
            log(
                Level::Info,
                &format!(
                    "tracker: call {call} of the {period}-call iteration left the planned sequence; passive for the rest of it, replanning"
                ),
            );
            crate::virt::executor::diverged();
        }
        After::Adopted {
            seq,
            call,
            kind,
            once,
        } => {
            let Some((ready, record)) = kept else {
                return;
            };
            log(
                Level::Info,
                &format!(
                    "tracker: the latest calls are a kind planned before ({kind} calls, now at its call {call}): its plan guides from the next call"
                ),
            );
            crate::core::bus::emit(crate::virt::kinds::reused(record, seq, 0.0));
            crate::virt::executor::adopt(ready);
            if let Some((found, records)) = once {
                crate::core::bus::emit(Event::Iteration {
                    start: found.start_seq,
                    period: found.period as u64,
                    calls: found.period as u64,
                });
                log(
                    Level::Info,
                    &format!(
                        "tracker: the {} calls before it, since the program left a plan, are an iteration of a new kind; planning it from this one occurrence",
                        found.period
                    ),
                );
                crate::virt::bridge::plan(found, records);
            }
        }
        After::Stopped => crate::virt::executor::diverged(),
    }
}
