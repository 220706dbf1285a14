//! Prompt detection: the periods the latest calls repeat with, kept up to date call by call, so
//! that the costly detection (the whole stream tokenised again, the repetition verified) runs
//! when a repetition is there to be found, not at intervals that grow with the stream.
//!
//! A candidate period is the distance from a call to one of the last few calls with its token (a
//! token that occurs m times per iteration recurs one period back at its m-th occurrence; every
//! iteration holds some that occur at most a few times: its loss, its optimizer step). For each
//! candidate, the run of calls ending with the latest that repeat the call one period before
//! them grows by one comparison per call, and ends at the first that does not. A candidate is
//! ripe when:
//! - its run holds one full period and the next's first calls (`iteration::NEXT`), over a
//!   longer stretch than any repetition of two full periods that ended before (a loop inside
//!   an iteration);
//! - the period frees what it allocates, but for a sixteenth of that and of the fewest bytes
//!   held in its first period (a steady iteration leaves memory as it found it; the loops that
//!   build a model's layers, or keep each layer's activations for the backward pass, do not, nor
//!   does a first step that makes the optimizer's state).
//!
//! A ripe candidate is tried again only once its run has doubled, or, where detection found the
//! next iteration's first calls have not passed the first's boundary yet, once they have.

use planner::iteration::NEXT;
use std::collections::HashMap;

/// Last occurrences of a token from which candidates are taken.
const AHEAD: usize = 4;
/// Candidates followed at most (the longest runs stay).
const KEPT: usize = 64;
/// A period may keep a sixteenth of what it allocates and of the fewest bytes held in its first
/// period (an output kept per step).
const LEFT: u64 = 16;

struct Run {
    period: usize,
    /// Calls ending with the latest that repeat the call one period before.
    run: usize,
    /// The run from which it is ripe (doubled at each try).
    next: usize,
    /// The fewest bytes held after a call of its first full period.
    low: Option<u64>,
    /// Whether `next` is the run a detection asked for (see [`Periods::wait`]).
    waited: bool,
}

/// The candidate periods of the calls seen, and the bytes each call left allocated.
pub(super) struct Periods {
    /// Each token's last occurrences (a ring) and how many there were.
    seen: HashMap<u64, ([usize; AHEAD], usize)>,
    runs: Vec<Run>,
    /// Bytes allocated after each call.
    held: Vec<u64>,
    /// Bytes allocated by the calls up to each one.
    allocated: Vec<u64>,
    /// The longest stretch of two full periods or more that ended (see
    /// `planner::iteration::detect_at_end`: what repeats over a shorter one is a loop inside an
    /// iteration).
    ended: usize,
}

impl Periods {
    pub(super) fn new() -> Periods {
        Periods {
            seen: HashMap::new(),
            runs: Vec::new(),
            held: Vec::new(),
            allocated: Vec::new(),
            ended: 0,
        }
    }

    /// Nothing seen (the calls are numbered again, or followed).
    pub(super) fn clear(&mut self) {
        *self = Periods::new();
    }

    /// Sees the latest call (the last of `tokens`), which allocated `made` bytes and freed
    /// `freed`: the ripe period whose calls have repeated the longest, the smaller on a tie, if
    /// any (as `planner::iteration::detect_at_end` chooses), and whether a detection waits for
    /// it (see [`Periods::wait`]).
    pub(super) fn see(&mut self, tokens: &[u64], made: u64, freed: u64) -> Option<(usize, bool)> {
        let i = tokens.len().checked_sub(1)?;
        let t = tokens[i];
        let held = self.held.last().copied().unwrap_or(0);
        self.held.push((held + made).saturating_sub(freed));
        let allocated = self.allocated.last().copied().unwrap_or(0);
        self.allocated.push(allocated + made);
        let ended = &mut self.ended;
        self.runs.retain_mut(|r| {
            let on = i >= r.period && tokens[i - r.period] == t;
            if on {
                r.run += 1;
            } else if r.run >= r.period {
                *ended = (*ended).max(r.run + r.period);
            }
            on
        });
        let (last, n) = self.seen.entry(t).or_insert(([0; AHEAD], 0));
        for &q in &last[..(*n).min(AHEAD)] {
            let p = i - q;
            if self.runs.iter().any(|r| r.period == p) {
                continue;
            }
            let mut run = 0;
            while run + p <= i && tokens[i - run] == tokens[i - run - p] {
                run += 1;
            }
            self.runs.push(Run {
                period: p,
                run,
                next: NEXT,
                low: None,
                waited: false,
            });
        }
        last[*n % AHEAD] = i;
        *n += 1;
        if self.runs.len() > KEPT {
            self.runs.sort_by_key(|r| std::cmp::Reverse(r.run));
            self.runs.truncate(KEPT);
        }
        let (held, allocated) = (&self.held, &self.allocated);
        let mut best: Option<&Run> = None;
        let ended = self.ended;
        for r in self
            .runs
            .iter_mut()
            .filter(|r| r.run >= r.next && r.run + r.period > ended)
        {
            let start = i + 1 - r.run - r.period;
            let low = *r.low.get_or_insert_with(|| fewest(held, start, r.period));
            let longer = |b: &Run| (r.run, b.period) > (b.run, r.period);
            if ripe(held, allocated, start, r.period, low) && best.is_none_or(longer) {
                best = Some(r);
            }
        }
        best.map(|r| (r.period, r.waited))
    }

    /// Period `p` was tried: ripe again once its run has doubled.
    pub(super) fn tried(&mut self, p: usize) {
        if let Some(r) = self.runs.iter_mut().find(|r| r.period == p) {
            r.next = r.run * 2;
            r.waited = false;
        }
    }

    /// A detection found period `p` repeating but not yet for long enough: ripe again once its
    /// run is `run` calls, and then tried at once.
    pub(super) fn wait(&mut self, p: usize, run: usize) {
        if let Some(r) = self.runs.iter_mut().find(|r| r.period == p) {
            r.next = run.max(r.run + 1);
            r.waited = true;
        }
    }
}

/// The fewest bytes held after a call of the period from `start`.
pub(super) fn fewest(held: &[u64], start: usize, period: usize) -> u64 {
    held[start..(start + period).min(held.len())]
        .iter()
        .copied()
        .min()
        .unwrap_or(0)
}

/// Whether the region of `period` from `start` to the last call repeats long enough and frees
/// what it allocates (see the module's rules), given the bytes held after each call (`held`),
/// allocated up to each (`allocated`), and the [`fewest`] held in its first period (`low`).
pub(super) fn ripe(held: &[u64], allocated: &[u64], start: usize, period: usize, low: u64) -> bool {
    let n = held.len();
    let Some(i) = n
        .checked_sub(1)
        .filter(|&i| i >= period && start + period + NEXT <= n)
    else {
        return false;
    };
    // Kept: what the period leaves allocated (or frees) beyond what it found.
    let kept = held[i - period].abs_diff(held[i]).saturating_mul(LEFT);
    kept <= allocated[i] - allocated[i - period] && kept <= low
}
