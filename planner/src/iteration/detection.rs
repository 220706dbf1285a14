//! The period of the call stream: the repetition of tokens that covers the longest stretch, with
//! two full repetitions (SINGA's rule), or, at the stream's end, one full repetition and the
//! first [`NEXT`] calls of the next (an iteration under way, followed call by call from there).

use super::tokens::{Call, Effect};
use std::collections::HashMap;

/// Calls of the next iteration that must repeat the first, at the stream's end, for one full
/// iteration to count.
pub const NEXT: usize = 16;

/// A stretch of the stream that repeats with `period`: `tokens[j] == tokens[j + period]` for
/// every j in `start .. end - period`, and `end - start >= 2 * period`, or, ending the stream,
/// `end - start >= period + NEXT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub start: usize,
    pub period: usize,
    pub end: usize,
}

/// Candidate periods: distances between an occurrence of a rare token and its next few
/// occurrences. A token that occurs m times per iteration recurs after exactly one period at its
/// m-th next occurrence, and every iteration holds some token that occurs at most a few times
/// (its loss, its optimizer step); scanning every period would cost O(n²).
fn candidates(tokens: &[u64]) -> Vec<usize> {
    const RAREST: usize = 256;
    const AHEAD: usize = 4;
    let mut at: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, &t) in tokens.iter().enumerate() {
        at.entry(t).or_default().push(i);
    }
    let mut by_count: Vec<(usize, u64)> = at
        .iter()
        .filter(|(_, v)| v.len() >= 2)
        .map(|(&t, v)| (v.len(), t))
        .collect();
    by_count.sort_unstable();
    // Two full periods fit in the stream, or one and the next's first calls.
    let longest = (tokens.len() / 2).max(tokens.len().saturating_sub(NEXT));
    let mut out = Vec::new();
    for &(_, t) in by_count.iter().take(RAREST) {
        let v = &at[&t];
        for i in 0..v.len() {
            for m in 1..=AHEAD {
                if let Some(&j) = v.get(i + m)
                    && j - v[i] <= longest
                {
                    out.push(j - v[i]);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The runs of calls that repeat the call `p` before them: (start, length) of the longest, and
/// of the one ending the stream.
fn runs(tokens: &[u64], p: usize) -> [(usize, usize); 2] {
    let n = tokens.len();
    let (mut best, mut run_start) = ((0, 0), 0);
    for j in 0..n.saturating_sub(p) {
        if tokens[j] != tokens[j + p] {
            run_start = j + 1;
        } else if j + 1 - run_start > best.1 {
            best = (run_start, j + 1 - run_start);
        }
    }
    let last = (run_start, n.saturating_sub(p).saturating_sub(run_start));
    [best, last]
}

/// Which calls of a stream do work: `works[i]` counts the calls before call i that compute,
/// copy, set or synchronise (allocations and frees do not).
pub struct Work(Vec<usize>);

impl Work {
    /// From each call's effect.
    pub fn of(calls: &[Call]) -> Work {
        Work::from_flags(calls.iter().map(|c| c.effect == Effect::Use))
    }

    /// From a flag per call: true where it works.
    pub fn from_flags(flags: impl IntoIterator<Item = bool>) -> Work {
        let mut v = vec![0];
        for f in flags {
            v.push(v[v.len() - 1] + usize::from(f));
        }
        Work(v)
    }

    /// Whether a call of `start .. start + p` works.
    fn any(&self, start: usize, p: usize) -> bool {
        let at = |i: usize| self.0[i.min(self.0.len() - 1)];
        at(start + p) > at(start)
    }
}

/// The run `(start, length)` of period `p` as a region, if it counts: two full repetitions, or
/// one and the next's first [`NEXT`] calls ending the stream of `n` calls, of a period that does
/// some work (a run of frees repeats, and is no iteration).
fn counts((start, run): (usize, usize), p: usize, n: usize, work: &Work) -> Option<Region> {
    (work.any(start, p) && (run >= p || (run >= NEXT && start + run + p == n))).then_some(Region {
        start,
        period: p,
        end: start + run + p,
    })
}

/// The longest stretch that repeats with `p` and counts as a region.
fn region_of(tokens: &[u64], work: &Work, p: usize) -> Option<Region> {
    runs(tokens, p)
        .into_iter()
        .filter_map(|r| counts(r, p, tokens.len(), work))
        .max_by_key(|r| (r.end - r.start, std::cmp::Reverse(r.start)))
}

/// The region of period `p` that ends the stream, if it counts.
pub fn detect_period(tokens: &[u64], work: &Work, p: usize) -> Option<Region> {
    if p == 0 || p >= tokens.len() {
        return None;
    }
    counts(runs(tokens, p)[1], p, tokens.len(), work)
}

/// The period covering the longest stretch (SINGA: two consecutive repetitions or more; at the
/// stream's end, one and the next's first calls), the smaller period on a tie (a multiple of the
/// iteration covers no more than the iteration).
pub fn detect(tokens: &[u64], work: &Work) -> Option<Region> {
    candidates(tokens)
        .into_iter()
        .filter_map(|p| region_of(tokens, work, p))
        .min_by_key(|r| (std::cmp::Reverse(r.end - r.start), r.period, r.start))
}

/// The repetition under way: of the regions that end the stream, the one whose calls have
/// repeated the call a period before them the longest, the smaller period on a tie (a longer
/// stretch is no better evidence here: the first iteration of a loop may differ from the next by
/// a few calls, and then the first two together repeat at the third's start, over a stretch
/// longer than the iteration's own but for fewer calls). None if a repetition of two full
/// periods that ended before covers as long a stretch: the iteration is the longest repeating
/// part of the stream (SINGA), and a shorter one under way is a loop inside an iteration (over a
/// network's layers, its attention heads), which ends with it.
pub fn detect_at_end(tokens: &[u64], work: &Work) -> Option<Region> {
    let n = tokens.len();
    let mut under_way: Option<Region> = None;
    let mut ended = 0;
    for p in candidates(tokens) {
        let [best, last] = runs(tokens, p);
        if best.1 >= p && best.0 + best.1 + p < n && work.any(best.0, p) {
            ended = ended.max(best.1 + p);
        }
        if let Some(r) = counts(last, p, n, work) {
            let key = |r: &Region| (r.end - r.start - r.period, std::cmp::Reverse(r.period));
            if under_way.is_none_or(|u| key(&r) > key(&u)) {
                under_way = Some(r);
            }
        }
    }
    under_way.filter(|r| r.end - r.start > ended)
}

impl Region {
    /// Whether the region holds one full iteration only, and the next's first calls.
    pub fn one_period(&self) -> bool {
        self.end - self.start < 2 * self.period
    }

    /// The cuts (first calls of an iteration) that leave two full iterations in the region, or,
    /// in a region of one, that leave it whole and the next's first [`NEXT`] calls.
    pub fn cuts(&self) -> std::ops::Range<usize> {
        let p = self.period;
        let last = if self.one_period() {
            (self.end - p).saturating_sub(NEXT).max(self.start)
        } else {
            (self.end - 2 * p).min(self.start + p - 1)
        };
        self.start..last + 1
    }
}
