//! Finding the iteration: a repetition of the latest calls, verified (the same touches by
//! name in consecutive periods, the bytes held steady), and where none holds, the tracker's
//! records restarted from where the next may begin.

use super::{After, CHECK, Found, Tracker, periods};
use crate::core::config::Level;
use crate::core::state::log;
use planner::iteration;
use planner::trace::{Event, Record};
use std::collections::HashMap;

impl Tracker {
    /// Finds and verifies a repetition reaching the latest call.
    pub(super) fn detect(&mut self) -> After {
        self.detect_by(iteration::detect_at_end)
    }

    /// [`Tracker::detect`], the repetition found by `how` among the calls of the records kept.
    pub(super) fn detect_by(
        &mut self,
        how: impl FnOnce(&[u64], &iteration::Work) -> Option<iteration::Region>,
    ) -> After {
        let mut sorted = self.records.clone();
        sorted.sort_by_key(|r| r.seq);
        let calls = iteration::calls(&sorted);
        let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
        let Some(region) = how(&tokens, &iteration::Work::of(&calls)) else {
            return After::Nothing;
        };
        let not = |why: &str| {
            log(
                Level::Debug,
                &format!(
                    "tracker: the last {} calls repeat with a period of {}; not an iteration: {why}",
                    region.end - region.start,
                    region.period
                ),
            );
            After::Nothing
        };
        if !steady_bytes(&sorted, region) {
            return not("it keeps what it allocates");
        }
        // One full period is enough once the cuts that leave it whole and the next's first
        // calls reach its boundary, the quietest call of its first period, or one as quiet: the
        // model's cut must be one of them. Tried again as soon as they will.
        if region.one_period() {
            let quiet = iteration::quietest(&calls, region);
            if !region.cuts().contains(&quiet) && !iteration::quiet_cut(&calls, region) {
                let run = quiet - region.start + iteration::NEXT;
                self.periods.wait(region.period, run);
                return not("the next has not passed its boundary yet");
            }
        }
        let st = match iteration::steady_from(&calls, region, |r| r.cuts().start) {
            Ok(st) => st,
            Err(d) => return not(&d.to_string()),
        };
        // Records arrive nearly in `seq` order (a free takes its number before it is forwarded);
        // from here the order of `seq` is the order of the calls.
        self.tokens = calls
            .iter()
            .map(|c| iteration::kind_token(&c.effect, c.token))
            .collect();
        self.allocs = calls
            .iter()
            .map(|c| match c.effect {
                iteration::Effect::Alloc { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        self.seqs = calls.iter().map(|c| c.seq).collect();
        self.dropped = 0;
        self.open = None;
        let n = tokens.len();
        self.generation += 1;
        let found = Found {
            period: st.period,
            boundary: 0,
            start_seq: calls[st.start].seq,
            generation: self.generation,
            expected: None,
            one_period: st.iterations == 1,
            names: None,
            provisional: false,
            once: None,
        };
        self.found = Some(found.clone());
        self.periods.clear();
        self.align(st.start);
        let found = self.found.clone().expect("set above");
        After::Plan {
            found,
            records: sorted,
            calls: n,
        }
    }

    /// Starts detection again at call `index`, with the calls from call `from` (the first of
    /// the iteration the program left, which begins whatever comes instead), their records,
    /// and those of the allocations still live before them or freed since (tensor sizes and
    /// lifetimes need them).
    pub(super) fn restart(&mut self, index: usize, from: usize) {
        self.found = None;
        self.generation += 1;
        self.made.clear();
        let from_seq = self.seqs[from];
        let freed: std::collections::HashSet<u64> = self
            .records
            .iter()
            .filter(|r| r.seq >= from_seq)
            .filter_map(|r| match r.event {
                Event::Free { alloc: Some(a), .. } => Some(a),
                _ => None,
            })
            .collect();
        let live = &self.sizes;
        let records = std::mem::take(&mut self.records);
        let (before, after): (Vec<Record>, Vec<Record>) =
            records.into_iter().partition(|r| r.seq < from_seq);
        let (before, dropped): (Vec<Record>, Vec<Record>) = before
            .into_iter()
            .partition(|r| matches!(r.event, Event::Alloc { alloc, result: 0, .. } if live.contains_key(&alloc) || freed.contains(&alloc)));
        self.shelve(dropped);
        // Tokens: the kept allocations, then the calls from `from` as they were seen.
        let none: HashMap<u64, u64> = HashMap::new();
        let mut tokens: Vec<u64> = before
            .iter()
            .filter_map(|r| iteration::token(&r.event, &none))
            .collect();
        let mut allocs: Vec<Option<u64>> = before
            .iter()
            .map(|r| match r.event {
                Event::Alloc { alloc, .. } => Some(alloc),
                _ => None,
            })
            .collect();
        let mut seqs: Vec<u64> = before.iter().map(|r| r.seq).collect();
        tokens.extend_from_slice(&self.tokens[from..=index]);
        allocs.extend_from_slice(&self.allocs[from..=index]);
        seqs.extend_from_slice(&self.seqs[from..=index]);
        (self.tokens, self.allocs, self.seqs) = (tokens, allocs, seqs);
        self.records = before;
        self.records.extend(after);
        self.dropped = 0;
        self.next_check = self.tokens.len() + CHECK;
        self.next_try = self.tokens.len();
        // The candidates of the calls kept.
        self.periods.clear();
        let mut sizes: HashMap<u64, u64> = HashMap::new();
        let mut k = 0;
        // Pooled frees are no calls: the next call counts their bytes freed.
        let mut between = 0;
        for r in &self.records {
            let (made, freed) = match r.event {
                Event::Alloc {
                    alloc,
                    size,
                    result: 0,
                    ..
                } => {
                    sizes.insert(alloc, size);
                    (size, 0)
                }
                Event::Free {
                    alloc: Some(id),
                    result: 0,
                    ..
                } => (0, sizes.get(&id).copied().unwrap_or(0)),
                _ => (0, 0),
            };
            if !iteration::is_call(&r.event) {
                between += freed;
                continue;
            }
            if k >= self.tokens.len() {
                continue;
            }
            self.periods.see(
                &self.tokens[..=k],
                made,
                freed + std::mem::take(&mut between),
            );
            k += 1;
        }
    }
}

/// Whether `region` of the calls of `records` (sorted by `seq`; the region ends with the last
/// call) frees what it allocates, by the rules the candidates are ripe by (see `periods`). A
/// pooled free is no call: the bytes it frees count from the next call on.
fn steady_bytes(records: &[Record], region: iteration::Region) -> bool {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let (mut held, mut allocated) = (Vec::new(), Vec::new());
    let (mut h, mut a) = (0u64, 0u64);
    for r in records {
        match iteration::effect(&r.event) {
            iteration::Effect::Alloc { id, size } => {
                sizes.insert(id, size);
                h += size;
                a += size;
            }
            iteration::Effect::Free { id } => h = h.saturating_sub(sizes.remove(&id).unwrap_or(0)),
            iteration::Effect::Use => {}
        }
        if iteration::is_call(&r.event) {
            held.push(h);
            allocated.push(a);
        }
    }
    let low = periods::fewest(&held, region.start, region.period);
    periods::ripe(&held, &allocated, region.start, region.period, low)
}
