//! Where an iteration's boundary lies: the cut before which the fewest bytes are in use.

use super::detection::Region;
use super::tokens::{Call, Effect};
use std::collections::HashMap;

/// The call of the region's first period before which the fewest bytes are in use, the last
/// such (the first iteration may differ, and hold less at its start than the later ones do at
/// theirs): an allocation is in use from a call that touches or makes it to the next call that
/// touches it (every touch a use: the API's, and a kernel's inferred ones; a free is not one).
/// An iteration's boundary lies there (a training step's: its optimizer done, its gradients
/// dead, the next batch not yet made), and so does the model's cut, which counts only what a
/// later call reads (`shimtrace::convert`); the touches of the calls after the period, seen as
/// far as `calls` goes, decide what is used again.
pub fn quietest(calls: &[Call], region: Region) -> usize {
    let in_use = in_use(calls);
    let mut best = (i128::MAX, region.start);
    let end = (region.start + region.period).min(calls.len());
    for (c, &u) in in_use.iter().enumerate().take(end).skip(region.start) {
        if u <= best.0 {
            best = (u, c);
        }
    }
    best.1
}

/// Whether one of the region's cuts ([`Region::cuts`]) is as quiet as the quietest call of its
/// first period ([`quietest`]): as few bytes in use before it. A boundary that the calls seen
/// cannot pass yet (the quietest call ends the first period, and what follows the second is
/// another kind of iteration) has its equal at the same place one period before, or a few
/// calls after it, where a step's last calls and the next one's first leave nothing more in
/// use.
pub fn quiet_cut(calls: &[Call], region: Region) -> bool {
    let in_use = in_use(calls);
    let end = (region.start + region.period).min(calls.len());
    let Some(&least) = in_use.get(region.start..end).and_then(|u| u.iter().min()) else {
        return false;
    };
    region
        .cuts()
        .any(|c| in_use.get(c).is_some_and(|&u| u <= least))
}

/// The bytes in use just before each call (see [`quietest`]).
fn in_use(calls: &[Call]) -> Vec<i128> {
    let n = calls.len();
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    // The last use of each allocation so far, and how many bytes are in use just before each
    // call, as a running sum of differences.
    let mut last: HashMap<u64, usize> = HashMap::new();
    let mut diff = vec![0i128; n + 1];
    for (i, c) in calls.iter().enumerate() {
        if let Effect::Alloc { id, size } = c.effect {
            sizes.insert(id, size);
            last.insert(id, i);
        }
        for &a in &c.touches {
            let Some(&size) = sizes.get(&a) else {
                continue;
            };
            if let Some(prev) = last.insert(a, i) {
                // In use just before calls prev + 1 ..= i.
                diff[prev + 1] += size as i128;
                diff[i + 1] -= size as i128;
            }
        }
        if let Effect::Free { id } = c.effect {
            last.remove(&id);
            sizes.remove(&id);
        }
    }
    let mut in_use = 0i128;
    diff.iter()
        .take(n)
        .map(|d| {
            in_use += d;
            in_use
        })
        .collect()
}
