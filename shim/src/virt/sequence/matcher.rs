//! Kept kinds recognised wherever they begin. For each kind planned before, the longest prefix
//! of its calls that ends the stream so far (Knuth-Morris-Pratt: one failure table per kind,
//! each call a constant amortised step per kind), fed every call whether the program follows a
//! plan or none: an iteration of a kind seen before is known some calls after it begins, even
//! where nothing says an iteration begins (after calls of no kind kept). Where the tracker knows
//! an iteration begins (the one the program left), it matches the kinds from there itself.

use std::sync::Arc;

/// Calls a kind must have matched before it is taken for the iteration under way, at least (or
/// the whole kind if shorter); more where its first calls come again inside it (repeated
/// layers), until they say where in it the stream is: its shortest first calls found nowhere
/// else in it, read round.
pub const RECOGNISE: usize = 16;

struct Kept {
    hash: u64,
    tokens: Arc<[u64]>,
    /// fail[i]: the longest proper prefix of tokens[..=i] that is also its suffix.
    fail: Vec<usize>,
    /// The longest prefix of `tokens` that ends the stream.
    at: usize,
    /// The calls it must have matched to be taken (see [`RECOGNISE`]).
    need: usize,
}

/// A kind's name (in the trace, the plan cache, the tracker's history): FNV-1a over its calls'
/// tokens.
pub fn kind_hash(tokens: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for t in tokens {
        for b in t.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A kind kept: its name and its calls.
pub type Kind = (u64, Arc<[u64]>);

#[derive(Default)]
pub struct Matcher {
    kinds: Vec<Kept>,
}

impl Matcher {
    /// The kinds kept now (their names and calls): new ones start unmatched, those kept before
    /// keep their place.
    pub fn set(&mut self, kinds: Vec<(u64, Arc<[u64]>)>) {
        let mut old = std::mem::take(&mut self.kinds);
        for (hash, tokens) in kinds {
            if tokens.is_empty() {
                continue;
            }
            match old
                .iter()
                .position(|k| k.hash == hash && k.tokens == tokens)
            {
                Some(i) => self.kinds.push(old.swap_remove(i)),
                None => self.kinds.push(Kept {
                    hash,
                    fail: failure(&tokens),
                    need: unique_prefix(&tokens, RECOGNISE),
                    tokens,
                    at: 0,
                }),
            }
        }
    }

    /// The kinds kept (their names and calls).
    pub fn kinds(&self) -> impl Iterator<Item = (u64, &Arc<[u64]>)> {
        self.kinds.iter().map(|k| (k.hash, &k.tokens))
    }

    /// The longest kind's length (what the tracker keeps of the recent calls to follow one).
    pub fn longest(&self) -> usize {
        self.kinds.iter().map(|k| k.tokens.len()).max().unwrap_or(0)
    }

    /// One more call.
    pub fn feed(&mut self, token: u64) {
        for k in &mut self.kinds {
            if k.at == k.tokens.len() {
                k.at = k.fail[k.at - 1];
            }
            while k.at > 0 && k.tokens[k.at] != token {
                k.at = k.fail[k.at - 1];
            }
            if k.tokens[k.at] == token {
                k.at += 1;
            }
        }
    }

    /// The calls of kind `hash`, if it is kept.
    pub fn get(&self, hash: u64) -> Option<Arc<[u64]>> {
        self.kinds
            .iter()
            .find(|k| k.hash == hash)
            .map(|k| k.tokens.clone())
    }

    /// The kinds under way: those that have matched the most calls, enough of them (see
    /// [`RECOGNISE`]); several where kinds share their first calls (the calls that tell them
    /// apart have not come yet). The calls matched, and the kinds' names and calls.
    pub fn under_way(&self) -> Option<(usize, Vec<Kind>)> {
        let enough = |k: &&Kept| k.at >= k.need;
        let most = self.kinds.iter().filter(enough).map(|k| k.at).max()?;
        let tied = self
            .kinds
            .iter()
            .filter(enough)
            .filter(|k| k.at == most)
            .map(|k| (k.hash, k.tokens.clone()))
            .collect();
        Some((most, tied))
    }
}

/// The shortest first calls of `tokens`, `least` at least (or all of them), that occur nowhere
/// else in `tokens` read round (an iteration followed by the next's first calls), doubling
/// from `least`.
fn unique_prefix(tokens: &[u64], least: usize) -> usize {
    let n = tokens.len();
    let mut len = least.min(n);
    while len < n {
        let prefix = &tokens[..len];
        let fail = failure(prefix);
        // The prefix searched for in tokens[1..] and round into the first len - 1 again.
        let (mut k, mut again) = (0, false);
        for &t in tokens[1..].iter().chain(&tokens[..len - 1]) {
            while k > 0 && prefix[k] != t {
                k = fail[k - 1];
            }
            if prefix[k] == t {
                k += 1;
            }
            if k == len {
                again = true;
                break;
            }
        }
        if !again {
            return len;
        }
        len = (2 * len).min(n);
    }
    n
}

fn failure(tokens: &[u64]) -> Vec<usize> {
    let mut fail = vec![0usize; tokens.len()];
    let mut k = 0;
    for i in 1..tokens.len() {
        while k > 0 && tokens[i] != tokens[k] {
            k = fail[k - 1];
        }
        if tokens[i] == tokens[k] {
            k += 1;
        }
        fail[i] = k;
    }
    fail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one kind under way (its name and the calls matched), if it is alone.
    fn one(m: &Matcher) -> Option<(u64, usize)> {
        let (matched, tied) = m.under_way()?;
        match tied.as_slice() {
            [(hash, _)] => Some((*hash, matched)),
            _ => None,
        }
    }

    fn matcher(kinds: &[&[u64]]) -> Matcher {
        let mut m = Matcher::default();
        m.set(
            kinds
                .iter()
                .enumerate()
                .map(|(i, k)| (i as u64, Arc::from(*k)))
                .collect(),
        );
        m
    }

    #[test]
    fn a_kind_is_found_wherever_it_begins() {
        // A kind of 20 calls (16 to recognise it): found 16 calls after it begins, after
        // calls of no kind, and again after a whole match.
        let kind: Vec<u64> = [1, 2, 3, 1, 2].into_iter().chain(4..19).collect();
        let mut m = matcher(&[&kind]);
        for t in [9, 1, 2, 9, 7] {
            m.feed(t);
        }
        assert!(one(&m).is_none());
        for &t in &kind[..15] {
            m.feed(t);
        }
        assert!(one(&m).is_none(), "15 calls are not enough");
        m.feed(kind[15]);
        assert_eq!(one(&m), Some((0, 16)));
        for &t in &kind[16..] {
            m.feed(t);
        }
        assert_eq!(one(&m).map(|u| u.1), Some(20));
        // The next iteration of the kind, from its first call.
        for &t in &kind[..16] {
            m.feed(t);
        }
        assert_eq!(one(&m).map(|u| u.1), Some(16));
        // Repeated layers inside the kind: 1, 2, 3, 1, 2 then 3 falls back to the prefix 1, 2, 3.
        let mut m = matcher(&[&kind]);
        for t in [1, 2, 3, 1, 2, 3] {
            m.feed(t);
        }
        assert!(one(&m).is_none());
        assert_eq!(m.kinds.first().map(|k| k.at), Some(3));
        // A kind whose first 16 calls come again inside it needs more: 32 here.
        let layers: Vec<u64> = (0..16).chain(0..16).chain(100..104).collect();
        assert_eq!(unique_prefix(&layers, RECOGNISE), 32);
        // Round: the first calls after the last ones are the next iteration's.
        let round: Vec<u64> = (0..20).chain(0..8).collect();
        assert_eq!(unique_prefix(&round, 8), 16);
        // A kind shorter than 16 calls is recognised whole.
        let short: &[u64] = &[5, 6, 7];
        let mut m = matcher(&[short]);
        for &t in short {
            assert!(one(&m).is_none());
            m.feed(t);
        }
        assert_eq!(one(&m).map(|u| u.1), Some(3));
    }

    #[test]
    fn kinds_that_share_their_first_calls_wait_for_what_tells_them_apart() {
        let a: Vec<u64> = (1..=16).chain(100..104).collect();
        let b: Vec<u64> = (1..=16).chain(200..204).collect();
        let mut m = matcher(&[&a, &b]);
        for t in 1..=16 {
            m.feed(t);
        }
        assert!(one(&m).is_none(), "a tie");
        let (matched, tied) = m.under_way().unwrap();
        assert_eq!(matched, 16);
        assert_eq!(tied.iter().map(|k| k.0).collect::<Vec<_>>(), [0, 1]);
        m.feed(200);
        assert_eq!(one(&m), Some((1, 17)));
        // Kinds kept again keep their place; a new one starts unmatched.
        m.set(vec![
            (1, Arc::from(&b[..])),
            (2, Arc::from(&[200u64, 201][..])),
        ]);
        assert_eq!(one(&m), Some((1, 17)));
        assert_eq!(m.longest(), 20);
        assert_eq!(m.kinds().count(), 2);
    }

    #[test]
    fn kinds_hash_by_their_calls() {
        assert_eq!(kind_hash(&[1, 2, 3]), kind_hash(&[1, 2, 3]));
        assert_ne!(kind_hash(&[1, 2, 3]), kind_hash(&[1, 3, 2]));
    }
}
