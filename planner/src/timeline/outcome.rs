//! What a replay reports: its makespan, peak and traffic, every stall explained, and the memory
//! curve the searches read ([`Usage`]).

/// Why time was lost.
#[derive(Debug, Clone, PartialEq)]
pub enum Stall {
    /// Operation `op` waited `secs` for storage `storage` to come back.
    SwapIn {
        op: usize,
        storage: usize,
        secs: f64,
    },
    /// Operation `op` waited `secs` for swap-outs to release memory.
    Memory { op: usize, secs: f64 },
    /// Operation `op`, a copy of the program's own, waited `secs` for its copy engine (the
    /// swaps queued there before it).
    Engine { op: usize, secs: f64 },
    /// Operation `op` re-ran producer `producer` of `storage` (`secs` of compute).
    Recompute {
        op: usize,
        storage: usize,
        producer: usize,
        secs: f64,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub makespan: f64,
    pub peak: u64,
    pub stall_s: f64,
    pub swapped_out: u64,
    pub swapped_in: u64,
    pub recomputed_ops: u64,
    /// Never above the budget, and every recomputation possible.
    pub feasible: bool,
    /// The operation at which memory exceeded the budget most, and by how much.
    pub worst: Option<(usize, u64)>,
    /// A recomputation needed a storage the program had already freed (an invalid plan).
    pub invalid: bool,
    pub stalls: Vec<Stall>,
    /// Every operation at which memory exceeded the budget, with the excess (largest first).
    pub overs: Vec<(usize, u64)>,
    /// What the searches read to choose their next replay (see [`Usage`]).
    pub usage: Usage,
}

/// The memory curve of a replay and the extensions it used: a search reads them to leave out
/// replays that cannot succeed.
#[derive(Clone, Default)]
pub struct Usage {
    /// Per operation: the most memory held while it (and its recomputations) ran.
    pub mem_at: Vec<u64>,
    /// Per storage: the last operation at which a recomputation read it after the program had
    /// freed it, kept by an extension (`usize::MAX`: never).
    pub read_late: Vec<usize>,
}

impl std::fmt::Debug for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let late = self.read_late.iter().filter(|&&x| x != usize::MAX).count();
        write!(
            f,
            "Usage {{ {} operations, {late} storages read late }}",
            self.mem_at.len()
        )
    }
}
