//! Plans per iteration kind (Mimose's idea: a plan per input shape). A kind is one iteration's
//! calls, sizes included, cut where the planner's model cut it. Its plan is made the first time
//! the kind is found and kept; when the program runs that kind again (after an evaluation
//! pass, an iteration of another shape), the plan guides again without planning. The cache is
//! bounded: past [`CAPACITY`] kinds, the one used least recently goes.

use super::executor::Ready;
use crate::virt::sequence::kind_hash;
use planner::trace::Event;
use std::sync::{Arc, Mutex};

/// Kinds kept at most.
pub const CAPACITY: usize = 32;

struct Kind {
    /// The kind's calls, from its cut.
    tokens: Arc<[u64]>,
    hash: u64,
    ready: Arc<Ready>,
    /// The plan record of its planning, written again (as reused) each time it guides again.
    record: Event,
    used: u64,
}

struct Cache {
    kinds: Vec<Kind>,
    clock: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    kinds: Vec::new(),
    clock: 0,
});

/// Keeps the plan of the kind whose calls, from its cut, are `tokens`.
pub fn remember(tokens: Vec<u64>, ready: Arc<Ready>, record: Event) {
    let Ok(mut c) = CACHE.lock() else { return };
    c.clock += 1;
    let used = c.clock;
    let hash = kind_hash(&tokens);
    c.kinds
        .retain(|k| k.hash != hash || *k.tokens != tokens[..]);
    if c.kinds.len() >= CAPACITY
        && let Some(i) = c
            .kinds
            .iter()
            .enumerate()
            .min_by_key(|(_, k)| k.used)
            .map(|(i, _)| i)
    {
        c.kinds.remove(i);
    }
    c.kinds.push(Kind {
        tokens: tokens.into(),
        hash,
        ready,
        record,
        used,
    });
    // The tracker recognises them wherever they begin (its lock is taken after this one's is
    // released: it asks for a kind under its own).
    let kept: Vec<(u64, Arc<[u64]>)> = c.kinds.iter().map(|k| (k.hash, k.tokens.clone())).collect();
    drop(c);
    crate::virt::sequence::set_kinds(kept);
}

/// A kept kind whose calls are `window` (one whole iteration as found, from any call of it)
/// taken from another cut: the offset in `window` where the kind's cut falls, its plan, and its
/// plan record.
pub fn find(window: &[u64]) -> Option<(usize, Arc<Ready>, Event)> {
    let mut c = CACHE.lock().ok()?;
    c.clock += 1;
    let now = c.clock;
    let n = window.len();
    let k = c
        .kinds
        .iter_mut()
        // A kind planned from one occurrence is planned again from its repetition.
        .filter(|k| k.tokens.len() == n && n > 0 && k.ready.found.once.is_none())
        .find_map(|k| rotation(&k.tokens, window).map(|r| (k, r)))?;
    let (kind, r) = k;
    kind.used = now;
    // window[i] == kind[(i + r) % n]: the kind's call 0 is the window's call (n - r) % n.
    Some(((n - r) % n, kind.ready.clone(), kind.record.clone()))
}

/// The kept kind `hash` names (the tracker recognised it): its plan and its plan record.
pub fn get(hash: u64) -> Option<(Arc<Ready>, Event)> {
    let mut c = CACHE.lock().ok()?;
    c.clock += 1;
    let now = c.clock;
    let kind = c.kinds.iter_mut().find(|k| k.hash == hash)?;
    kind.used = now;
    Some((kind.ready.clone(), kind.record.clone()))
}

/// The names each call of a kind's iteration touches by, in its plan (what the tracker checks
/// the calls it follows against).
pub fn names(ready: &Ready) -> Option<crate::virt::sequence::Names> {
    let st = ready.converted.iteration.as_ref().ok()?;
    Some(st.touched.clone())
}

/// A kind's plan record written again as it guides again: `reused`, starting at record `start`,
/// with the look-up's time as its planning time (the memory feedback did not make this one).
pub fn reused(mut record: Event, start: u64, planning_ms: f64) -> Event {
    if let Event::Plan {
        start: s,
        planning_ms: ms,
        reused,
        feedback,
        ..
    } = &mut record
    {
        (*s, *ms, *reused, *feedback) = (start, planning_ms, true, false);
    }
    record
}

/// The smallest `r` with `window[i] == kind[(i + r) % n]` for every `i`, if any: the window
/// searched for in the kind read twice round (Knuth-Morris-Pratt, linear: an iteration of
/// identical layers repeats its calls many times over).
fn rotation(kind: &[u64], window: &[u64]) -> Option<usize> {
    let n = kind.len();
    if n == 0 || window.len() != n {
        return None;
    }
    // fail[i]: the length of the longest proper prefix of window[..=i] that is also its suffix.
    let mut fail = vec![0usize; n];
    let mut k = 0;
    for i in 1..n {
        while k > 0 && window[i] != window[k] {
            k = fail[k - 1];
        }
        if window[i] == window[k] {
            k += 1;
        }
        fail[i] = k;
    }
    let mut k = 0;
    for j in 0..2 * n - 1 {
        let t = kind[j % n];
        while k > 0 && t != window[k] {
            k = fail[k - 1];
        }
        if t == window[k] {
            k += 1;
        }
        if k == n {
            return Some(j + 1 - n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_window_is_found_with_the_kinds_cut() {
        let kind = [10, 11, 12, 13, 14];
        // The iteration as found starts at the kind's call 2.
        let window = [12, 13, 14, 10, 11];
        let r = rotation(&kind, &window).unwrap();
        assert_eq!(r, 2);
        // The kind's call 0 is the window's call (n - r) % n, where `find` cuts.
        let cut = (kind.len() - r) % kind.len();
        assert_eq!((cut, window[cut]), (3, kind[0]));
        assert_eq!(rotation(&kind, &[12, 13, 14, 11, 10]), None);
        assert_eq!(rotation(&kind, &kind), Some(0));
        // Repeated layers: the first rotation that matches whole.
        let layers = [1, 2, 1, 2, 1, 3];
        assert_eq!(rotation(&layers, &[1, 2, 1, 3, 1, 2]), Some(2));
        assert_eq!(rotation(&layers, &[2, 1, 2, 1, 3, 1]), Some(1));
        assert_eq!(rotation(&layers, &[2, 1, 2, 1, 2, 1]), None);
    }
}
