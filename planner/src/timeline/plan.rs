//! What a replay is given besides the trace and the budget: the plan (a [`Decision`] per storage
//! and interval), the link's bandwidths, and for passive mode how the simulator evicts on its
//! own ([`Passive`]).

/// What happens to one storage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Swap out after operation `after`, start the swap-in at the start of `trigger`, needed
    /// again by `back`.
    Swap {
        after: usize,
        trigger: usize,
        back: usize,
    },
    /// Drop after `after`, re-run its producer before `back`.
    Recompute { after: usize, back: usize },
    /// Keep the storage past the program's free of it until operation `until` has run, as a
    /// source of a later recomputation (DTR keeps such tensors too). Dropped, it costs nothing
    /// meanwhile, and can itself be recomputed.
    Extend { until: usize },
}

/// Decisions per storage; a storage may be moved several times over disjoint intervals.
pub type Plan = Vec<(usize, Decision)>;

/// PCIe bandwidths in bytes per second.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub h2d: f64,
    pub d2h: f64,
}

impl Link {
    pub fn from_profile(p: &simgpu_model::Profile) -> Link {
        Link {
            h2d: p.pcie_h2d_gbs * 1e9,
            d2h: p.pcie_d2h_gbs * 1e9,
        }
    }
}

/// How passive mode chooses and evicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evict {
    /// Swap out, least recently used first (the passive baseline).
    Lru,
    /// Drop, smallest DTR score first: the recompute cost of the evicted neighbourhood (what
    /// would come back with it, and the dropped storages made from it, which would need it)
    /// / (size x staleness).
    Dtr,
    /// Drop, by DTR's score with only what would come back with it in the cost.
    DtrUpstream,
    /// The shim's online policy (see [`Passive::ways`]): DTR's score with the cost the cheaper
    /// of a rebuild (what would come back with it) and a copy out and back in, dropped or
    /// swapped out by which is cheaper.
    DtrOrSwap,
}

/// Passive mode (Capuchin's on-demand eviction, and all that DTR and LRU do): when an
/// allocation would exceed the budget, the simulator evicts resident storages itself and records
/// each eviction as a decision, so that the plan with the evictions added replays the same run.
pub struct Passive<'a> {
    /// How it evicts; storages nothing reads again go first.
    pub evict: Evict,
    /// Whether storage `s` may leave during operation `op`: `Some(back)`, the operation that
    /// needs it next (`usize::MAX`: none does, it goes for good), `None` when it may not.
    pub evictable: &'a dyn Fn(usize, usize) -> Option<usize>,
    /// [`Evict::DtrOrSwap`] only: whether storage `s`, leaving during `op` until `back`, may be
    /// swapped out (something reads it at `back`) and whether dropped (a recomputation finds
    /// its sources then), as `(swap, drop)`.
    pub ways: Option<&'a dyn Fn(usize, usize, usize) -> (bool, bool)>,
    /// Dropping only: per storage, the last operation that reads it or anything made from it.
    /// What the program frees before then stays as metadata (constants: resident) until then,
    /// as DTR keeps what a recomputation may need, so that every dropped storage can be
    /// recomputed from its sources.
    pub horizon: Option<&'a [usize]>,
    /// Asked before each operation: false once the caller's time is up, and the run stops
    /// there, not feasible (see `memory::Deadline`).
    pub more: Option<&'a dyn Fn() -> bool>,
    /// Per storage, the first operation from which `evictable` says nothing needs it again
    /// (`usize::MAX`: never). Given, evictions are chosen through an index of candidates
    /// (the same choice, without rescanning every storage); else by a scan.
    pub gone_from: Option<&'a [usize]>,
    /// A makespan the caller already has: the run stops there, not feasible, once its time so
    /// far and the compute left reach it (it cannot win). Infinite: never.
    pub cutoff: f64,
}
