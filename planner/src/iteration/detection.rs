//! The period of the call stream: the repetition of tokens that covers the longest stretch, with
//! two full repetitions at least (SINGA's rule).

use std::collections::HashMap;

/// A stretch of the stream that repeats with `period`: `tokens[j] == tokens[j + period]` for
/// every j in `start .. end - period`, and `end - start >= 2 * period`.
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
    const NEXT: usize = 4;
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
    let half = tokens.len() / 2;
    let mut out = Vec::new();
    for &(_, t) in by_count.iter().take(RAREST) {
        let v = &at[&t];
        for i in 0..v.len() {
            for m in 1..=NEXT {
                if let Some(&j) = v.get(i + m)
                    && j - v[i] <= half
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

/// The longest stretch that repeats with `p`, if it holds two full repetitions.
fn region_of(tokens: &[u64], p: usize) -> Option<Region> {
    let (mut best, mut run_start) = ((0, 0), 0);
    for j in 0..tokens.len().saturating_sub(p) {
        if tokens[j] != tokens[j + p] {
            run_start = j + 1;
        } else if j + 1 - run_start > best.1 {
            best = (run_start, j + 1 - run_start);
        }
    }
    (best.1 >= p).then_some(Region {
        start: best.0,
        period: p,
        end: best.0 + best.1 + p,
    })
}

/// Two consecutive repetitions or more (SINGA): the period covering the longest stretch, the
/// smaller period on a tie (a multiple of the iteration covers no more than the iteration).
pub fn detect(tokens: &[u64]) -> Option<Region> {
    candidates(tokens)
        .into_iter()
        .filter_map(|p| region_of(tokens, p))
        .min_by_key(|r| (std::cmp::Reverse(r.end - r.start), r.period, r.start))
}

impl Region {
    /// The cuts (first calls of an iteration) that leave two full iterations in the region.
    pub fn cuts(&self) -> std::ops::Range<usize> {
        let last = (self.end - 2 * self.period).min(self.start + self.period - 1);
        self.start..last + 1
    }
}
