//! Dead contents, guarded. A plan releases contents it predicts dead (their next access
//! overwrites them whole) without a copy, and the prediction holds only while the program
//! follows the plan: one that changes (a backbone unfrozen, a branch taken once) may read them
//! first. Each such release is guarded where the shim can rebuild the contents: the call that
//! produced them is kept as a recipe, as for the online policy's own drops, and replayed if the
//! program reads them. A guard costs no device time while the prediction holds.
//!
//! A guard lasts while what its recipe reads holds the bytes the producing call read: the
//! program's write of a source, its free, a replay's cuDNN plan destroyed, or a source's bytes
//! gone without a guard of their own end it, and with it the guards of whatever is rebuilt from
//! the contents; so does the contents' own overwrite, the predicted end. Sources that are
//! guarded in turn are rebuilt first, along chains of at most [`CHAIN`].

use super::{ANY, Dropped, Online, with};
use crate::core::state::config;
use std::sync::atomic::Ordering;

/// The longest chain of guarded contents rebuilt from one another.
pub const CHAIN: u32 = 32;

impl Online {
    /// What guarded contents `a` would be rebuilt from, and the length of the chain of guarded
    /// sources it ends (None: it cannot be guarded). `holds(b)`: whether allocation `b` holds
    /// its bytes for the memory manager (resident, or swapped out); a source dropped by this
    /// policy is rebuilt first.
    fn guardable(&self, a: u64, holds: &dyn Fn(u64) -> bool) -> Option<(Vec<u64>, u32)> {
        let p = self.producers.get(&a)?;
        if self.dropped.contains_key(&a) || self.busy.contains_key(&a) {
            return None;
        }
        let mut depth = 1;
        let mut sources = Vec::new();
        for &(b, v) in p.versions.iter() {
            // Everything the call touched holds what it held after the call.
            if self.versions.get(&b) != Some(&v) {
                return None;
            }
            if b == a || p.rebuilds(b) {
                continue;
            }
            match self.dropped.get(&b) {
                // The online policy's own drops go two deep.
                Some(d) => depth = depth.max(d.guard.unwrap_or(2) + 1),
                None if holds(b) => {}
                None => return None,
            }
            sources.push(b);
        }
        (depth <= CHAIN).then_some((sources, depth))
    }

    /// Guarded contents `a` are forgotten (overwritten, or what rebuilds them changed), and so
    /// are the guarded contents rebuilt from them.
    pub(super) fn unguard(&mut self, a: u64) {
        if self.dropped.get(&a).is_some_and(|d| d.guard.is_some()) {
            self.dropped.remove(&a);
            self.saved.remove(&a);
            self.unguard_readers(a);
        }
        ANY.store(!self.dropped.is_empty(), Ordering::Relaxed);
    }

    /// Allocation `a` no longer holds the bytes guarded contents were made from: those guards
    /// end (each chain is shorter than [`CHAIN`], so the recursion is bounded).
    pub(super) fn unguard_readers(&mut self, a: u64) {
        let readers: Vec<u64> = self
            .dropped
            .iter()
            .filter(|(b, d)| **b != a && d.guard.is_some() && d.sources.contains(&a))
            .map(|(b, _)| *b)
            .collect();
        for b in readers {
            self.unguard(b);
        }
    }
}

/// The memory manager releases dead contents `a` without a copy (asked under its lock): they
/// are guarded if the shim can rebuild them. True when guarded.
pub fn guard(a: u64, holds: &dyn Fn(u64) -> bool) -> bool {
    if !config().online || !crate::virt::tracker::enabled() {
        return false;
    }
    with(|o| {
        let Some((sources, depth)) = o.guardable(a, holds) else {
            return false;
        };
        let Some(recipe) = o.recipe(a) else {
            return false;
        };
        o.dropped.insert(
            a,
            Dropped {
                recipe,
                sources,
                guard: Some(depth),
            },
        );
        ANY.store(true, Ordering::Relaxed);
        true
    })
    .unwrap_or(false)
}

/// Guarded contents `a` were kept after all (their release failed): no longer guarded, and
/// what is guarded from them stays so.
pub fn kept(a: u64) {
    let _ = with(|o| {
        if o.dropped.get(&a).is_some_and(|d| d.guard.is_some()) {
            o.dropped.remove(&a);
            o.saved.remove(&a);
        }
        ANY.store(!o.dropped.is_empty(), Ordering::Relaxed);
    });
}

/// Allocation `a`'s bytes are gone with no way to rebuild them (dead contents released without
/// a guard): the guards of contents rebuilt from them end.
pub fn lost(a: u64) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let _ = with(|o| {
        o.unguard_readers(a);
        ANY.store(!o.dropped.is_empty(), Ordering::Relaxed);
    });
}
