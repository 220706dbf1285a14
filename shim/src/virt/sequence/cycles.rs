//! What the program runs next, where it runs iterations of several kinds: the kinds that ran,
//! in order, give the kind expected next (the one that followed the same latest kinds before),
//! which decides where the calls cannot yet (kinds that share their first calls); a cycle of
//! kinds run twice in a row is tried, detected and planned as one iteration.

use super::{After, CONTEXT, HISTORY, MAX_RECORDS, Recognise, Tracker, kind_hash};
use crate::core::config::Level;
use crate::core::state::log;
use planner::iteration;
use planner::trace::Record;

impl Tracker {
    /// An iteration of kind `hash` ran to its end, before call `end` of the whole stream. Where
    /// the latest kinds are a cycle of several, run twice in a row (a program whose kinds come
    /// at random repeats a few by chance, once), the cycle is tried as one iteration from the
    /// next's first calls (see [`Tracker::try_cycle`]).
    pub(super) fn ran(&mut self, hash: u64, end: usize) {
        self.ran_count += 1;
        self.history.push_back((hash, end));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        let h = &self.history;
        let n = h.len();
        // The shortest cycle: one kind repeating is an iteration, and the tracker's own.
        self.cycle = (1..=n / 2)
            .find(|&m| (0..m).all(|i| h[n - 1 - i].0 == h[n - 1 - m - i].0))
            .filter(|&m| m >= 2)
            .map(|m| end - h[n - 1 - m].1)
            .filter(|calls| self.cycles_tried.iter().filter(|&c| c == calls).count() < 2)
            .map(|calls| match self.cycle {
                // Tried from where it was first due (kinds shorter than the calls it waits).
                Some((c, from)) if c == calls => (calls, from),
                _ => (calls, end + iteration::NEXT),
            });
    }

    /// The kind expected next: the one that followed the longest run of latest kinds (up to
    /// [`CONTEXT`]) the last time that run came before, as a program that cycles through kinds
    /// (micro-steps then an optimizer step, training steps then an evaluation pass) does again.
    /// None before anything has come twice.
    fn expected(&self) -> Option<u64> {
        self.expected_after(None)
    }

    /// The calls since the program left a plan, up to call `first` of the whole stream: a kind
    /// of their own, seen once (its name), if they are all among the recent calls.
    pub(super) fn once_kind(&self, first: usize) -> Option<u64> {
        let from = self.open.filter(|&f| f >= self.recent_from && first > f)?;
        let at = |g: usize| self.recent[g - self.recent_from].0;
        Some(kind_hash(&(from..first).map(at).collect::<Vec<u64>>()))
    }

    /// The kind expected for kinds under way from call `first` of the whole stream, after the
    /// calls before it ran as a kind of their own where `once` says so
    /// ([`Tracker::once_kind`]): asked at every call until the calls tell the kinds apart,
    /// worked out once for that call and the kinds that ran.
    pub(super) fn expected_at(&mut self, first: usize, once: bool) -> Option<u64> {
        let key = (first, self.ran_count, once);
        if let Some((k, e)) = self.tie
            && k == key
        {
            return e;
        }
        let then = if once { self.once_kind(first) } else { None };
        let e = self.expected_after(then);
        self.tie = Some((key, e));
        e
    }

    /// [`Tracker::expected`] once the kind `then` too has run (an iteration seen once, not
    /// yet among the kinds that ran).
    fn expected_after(&self, then: Option<u64>) -> Option<u64> {
        let mut h: Vec<u64> = self.history.iter().map(|k| k.0).collect();
        h.extend(then);
        let n = h.len();
        (1..n.min(CONTEXT + 1)).rev().find_map(|len| {
            (0..n - len)
                .rev()
                .find(|&j| h[j..j + len] == h[n - len..])
                .map(|j| h[j + len])
        })
    }

    /// Where the program cycles through kinds (see [`Tracker::ran`]) and the calls since the
    /// cycle's first repeat the cycle before them, from the call the cycle is tried from on:
    /// the cycle is an iteration, detected, verified and planned as one (micro-steps and their
    /// optimizer step, each kind's plan blind to what the next needs of it, are planned
    /// together).
    pub(super) fn try_cycle(&mut self) -> Option<After> {
        let (calls, from) = self.cycle?;
        if self.seen < from {
            return None;
        }
        self.cycle = None;
        self.cycles_tried.push(calls);
        // The records of the cycles: the ones older than the followed kind's, then these.
        let mut records: Vec<Record> = std::mem::take(&mut self.older).into();
        records.append(&mut self.records);
        records.sort_by_key(|r| r.seq);
        records.dedup_by_key(|r| r.seq);
        self.records = records;
        let (found, made) = (self.found.take(), std::mem::take(&mut self.made));
        let planned = self.detect_by(|tokens, work| iteration::detect_period(tokens, work, calls));
        if matches!(planned, After::Plan { .. }) {
            log(
                Level::Info,
                &format!(
                    "tracker: the program cycles through kinds; the cycle of {calls} calls is planned as one iteration"
                ),
            );
            return Some(planned);
        }
        self.found = found;
        self.made = made;
        None
    }

    /// Keeps records dropped from `records` among the older ones, while their calls are among
    /// the recent ones, [`MAX_RECORDS`] at most.
    pub(super) fn shelve(&mut self, dropped: impl IntoIterator<Item = Record>) {
        self.older.extend(dropped);
        let oldest = self.recent.front().map_or(u64::MAX, |c| c.2);
        while self
            .older
            .front()
            .is_some_and(|r| r.seq < oldest || self.older.len() > MAX_RECORDS)
        {
            self.older.pop_front();
        }
    }

    /// At the first call of an iteration of the kind followed: where the kind expected next
    /// is another, kept, that begins with this call, it is followed from here instead (kinds
    /// that share their first calls, a forward pass, part only where the calls say so, too
    /// late for a plan to act on what comes before).
    pub(super) fn switch(&mut self, seq: u64, token: u64, recognise: Recognise) -> Option<After> {
        let next = self.expected()?;
        if self.history.back().map(|h| h.0) == Some(next) {
            return None;
        }
        let kind = self.matcher.get(next)?;
        if kind.first() != Some(&token) {
            return None;
        }
        let (names, provisional) = recognise(next)?;
        let calls = kind.len();
        self.follow(self.seen - 1, kind, names, provisional);
        Some(After::Adopted {
            seq,
            call: 0,
            kind: calls,
            once: None,
        })
    }
}
