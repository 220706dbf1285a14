//! How the allocator meets the policies above it: the online policy's answers (`virt::online`)
//! and what a guiding plan says of the calls ahead, attached at start-up, and the victim each
//! would choose. Under a planner policy, while no plan guides, the victim is the least
//! `cost / (size x staleness)` (DTR), dead contents first; while one guides, dead contents,
//! then the tensor its calls touch furthest ahead (Belady's rule: the plan knows the future it
//! expects); otherwise the allocator's own order, least recently used.

use super::{Manager, Place, Tensor, alloc_of};
use planner::trace::Event;

/// What the online policy (`virt::online`, above this module) answers the allocator, attached
/// once at start-up: whether it chooses victims now, a tensor's replay cost and sources when
/// it can be dropped, the drop itself, the link's speed, and what it rebuilds before a use or a
/// free.
pub struct Online {
    pub choosing: fn() -> bool,
    pub droppable: fn(u64) -> Option<(f64, Vec<u64>)>,
    pub drop: fn(u64) -> bool,
    pub link_bps: fn() -> f64,
    /// Before a call's tensors are made resident: rebuilds what it needs; from then until
    /// `after_use`, none of its tensors is dropped.
    pub before_use: fn(&Event, &[u64], u64, bool),
    pub after_use: fn(&Event),
    pub before_free: fn(u64, u64),
    /// Before contents are marked dead (a plan's drop): rebuilds what was dropped and reads
    /// them.
    pub before_loss: fn(u64, u64),
    /// MARMOSET_VERIFY: a dropped tensor's bytes, kept to check its rebuild against.
    pub saved: fn(u64, Vec<u8>),
    pub is_dropped: fn(u64) -> bool,
    /// Dead contents released without a copy are guarded where they can be rebuilt (see
    /// `virt::online::dead`): `guard` (with whether a source holds its bytes here), `kept`
    /// when the release fails, `lost` when contents go unguarded.
    pub guard: fn(u64, &dyn Fn(u64) -> bool) -> bool,
    pub kept: fn(u64),
    pub lost: fn(u64),
}

static ONLINE: std::sync::OnceLock<Online> = std::sync::OnceLock::new();

/// While a plan guides: how many calls ahead its calls next touch each allocation (those it
/// does not touch within an iteration absent), else None.
pub type Ahead = fn() -> Option<std::collections::HashMap<u64, usize>>;

static AHEAD: std::sync::OnceLock<Ahead> = std::sync::OnceLock::new();

/// Attaches what the plan that guides says of the calls ahead (once, at start-up, under a
/// planner policy).
pub fn attach_ahead(f: Ahead) {
    let _ = AHEAD.set(f);
}

/// [`Ahead`], if attached and a plan guides.
pub(super) fn ahead() -> Option<std::collections::HashMap<u64, usize>> {
    AHEAD.get().and_then(|f| f())
}

/// The order of victims while a plan guides, least first: dead contents, then the tensor the
/// plan's calls touch furthest `ahead` (one they do not touch within an iteration, None,
/// before any), then the least recently used.
pub(super) fn furthest_first(dead: bool, ahead: Option<usize>, last_use: u64, va: u64) -> impl Ord {
    (
        !dead,
        std::cmp::Reverse(ahead.unwrap_or(usize::MAX)),
        last_use,
        va,
    )
}

/// Attaches the online policy (once, at start-up).
pub fn attach_online(o: Online) {
    let _ = ONLINE.set(o);
}

pub(super) fn online() -> Option<&'static Online> {
    ONLINE.get()
}

impl Manager {
    /// The online policy's victim (see `virt::online`): dead contents first, least recently
    /// used first among them; then the least `cost / (size x staleness)`, the cost of one the
    /// shim can rebuild its rebuild's (see [`Manager::rebuild_cost`]), of any other its copy
    /// out and back in. With whether it is dead.
    pub(super) fn cheapest<'a>(
        &self,
        candidates: impl Iterator<Item = (&'a u64, &'a Tensor)>,
    ) -> Option<(u64, bool)> {
        let o = online()?;
        let bps = (o.link_bps)();
        // (key, address, dead): keys order dead contents first, then by score.
        type Best = ((bool, f64, u64, u64), u64, bool);
        let mut best: Option<Best> = None;
        for (&va, t) in candidates {
            let dead = t.dead && !t.keep;
            let key = if t.dead {
                (false, 0.0, t.last_use, va)
            } else {
                let swap = 2.0 * t.size as f64 / bps;
                let cost = self.rebuild_cost(va, o, bps).map_or(swap, |r| r.min(swap));
                let stale = self.clock.saturating_sub(t.last_use) as f64 + 1.0;
                (true, cost / (t.size.max(1) as f64 * stale), t.last_use, va)
            };
            if best
                .as_ref()
                .is_none_or(|b| key.partial_cmp(&b.0) == Some(std::cmp::Ordering::Less))
            {
                best = Some((key, va, dead));
            }
        }
        best.map(|(_, va, dead)| (va, dead))
    }

    /// Whether the tensor at `va` can be dropped for the online policy to rebuild it: it can
    /// be rebuilt, more cheaply than swapped.
    pub(super) fn droppable_now(&self, va: u64) -> bool {
        let (Some(t), Some(o)) = (self.tensors.get(&va), online()) else {
            return false;
        };
        let bps = (o.link_bps)();
        let swap = 2.0 * t.size as f64 / bps;
        self.rebuild_cost(va, o, bps).is_some_and(|r| r < swap)
    }

    /// What rebuilding the tensor at `va` would cost (seconds), if the online policy can: its
    /// replay (and a dropped source's, see `virt::online`), and bringing back each source that
    /// is swapped out; None when a source holds its bytes nowhere.
    fn rebuild_cost(&self, va: u64, o: &Online, bps: f64) -> Option<f64> {
        let (replay, sources) = (o.droppable)(alloc_of(va))?;
        let mut cost = replay;
        for s in sources {
            let (sva, size) = crate::core::registry::allocation(s)?;
            match self.tensors.get(&sva).map(|t| &t.place) {
                None | Some(Place::Resident(_)) if self.holds_bytes(s, o) => {}
                Some(Place::Evicted(_)) => cost += size as f64 / bps,
                Some(Place::Empty { .. }) if (o.is_dropped)(s) => {}
                _ => return None,
            }
        }
        Some(cost)
    }

    /// Whether allocation `id` holds its bytes somewhere: resident and live, swapped out, in the
    /// pool of small allocations (never evicted), or dropped by the online policy (rebuilt
    /// before any use).
    fn holds_bytes(&self, id: u64, o: &Online) -> bool {
        let Some((va, _)) = crate::core::registry::allocation(id) else {
            return false;
        };
        self.tensors.get(&va).is_none_or(|t| match t.place {
            Place::Empty { .. } => (o.is_dropped)(id),
            _ => !t.dead || t.keep,
        })
    }

    /// Guards the dead contents at `va`, about to go without a copy (see
    /// `virt::online::dead`): true when the online policy can rebuild them if they are read.
    /// MARMOSET_VERIFY keeps their bytes to check the rebuild against.
    pub(super) fn guard(&mut self, va: u64) -> bool {
        let Some(o) = online() else {
            return false;
        };
        // A source holds its bytes resident (dead ones too: released later, guarded or said
        // lost) or on the host; the online policy knows its own drops.
        let holds = |b: u64| {
            crate::core::registry::allocation(b).is_some_and(|(bva, _)| {
                self.tensors
                    .get(&bva)
                    .is_none_or(|t| !matches!(t.place, Place::Empty { .. }))
            })
        };
        let a = alloc_of(va);
        if !(o.guard)(a, &holds) {
            return false;
        }
        if crate::core::state::config().verify
            && let Some(size) = crate::core::registry::allocation(a).map(|x| x.1)
            && let Some(bytes) = self.snapshot(va, size)
        {
            (o.saved)(a, bytes);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::furthest_first;

    /// (dead, calls ahead, last use, address) of each candidate; the victims in order.
    fn order(c: &[(bool, Option<usize>, u64, u64)]) -> Vec<u64> {
        let mut v = c.to_vec();
        v.sort_by_key(|&(d, a, l, va)| furthest_first(d, a, l, va));
        v.iter().map(|x| x.3).collect()
    }

    #[test]
    fn under_a_plan_the_victim_is_the_one_needed_furthest_ahead() {
        // Used long ago but needed next (a weight the forward pass reaches now) goes last;
        // needed in 900 calls before needed in 40; one no call needs within the iteration
        // before both; dead contents before all.
        let c = [
            (false, Some(0), 1, 0xa),
            (false, Some(40), 50, 0xb),
            (false, Some(900), 60, 0xc),
            (false, None, 70, 0xd),
            (true, Some(0), 80, 0xe),
        ];
        assert_eq!(order(&c), [0xe, 0xd, 0xc, 0xb, 0xa]);
        // As far ahead: the least recently used first.
        let c = [(false, Some(5), 9, 0x1), (false, Some(5), 3, 0x2)];
        assert_eq!(order(&c), [0x2, 0x1]);
    }
}
