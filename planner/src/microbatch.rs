//! μ-cuDNN's optimisers (seed 002), pure and deterministic.
//!
//! A **micro-configuration** is one algorithm run on a micro-batch of `batch` images, with its
//! measured time and workspace. A **configuration** of a convolution over a mini-batch of N is a
//! list of micro-configurations whose batches sum to N, run one after the other with one
//! workspace: its time is the sum, its workspace the largest part.
//!
//! * **WR** ([`fastest`]): the dynamic program of the paper, per layer, under a workspace limit:
//!   `T(b) = min( min_k t_k(b), min_{b' <= b/2} [ min_k t_k(b') + T(b - b') ] )`.
//! * **Desirable set** ([`desirable`]): the same recursion keeping, per b, the Pareto front of
//!   (time, workspace) instead of one argmin.
//! * **WD** ([`wd`]): one workspace shared by all kernels, each kernel taking one configuration
//!   of its desirable set: an exact multiple-choice knapsack minimising total time under the
//!   total workspace (dominance pruning, then branch and bound on the LP relaxation, with a node
//!   budget and a feasible fallback).

mod knapsack;
mod table;
mod wr;

pub use knapsack::{WdSolution, wd};
pub use table::read_table;
pub use wr::{desirable, fastest};

/// One measured micro-configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Micro {
    pub batch: u64,
    pub algo: i32,
    pub time_ms: f64,
    pub workspace: u64,
}

/// A configuration: micro-batches in order, with total time and the workspace they need.
#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    /// (micro-batch size, algorithm), in execution order (largest first).
    pub parts: Vec<(u64, i32)>,
    pub time_ms: f64,
    pub workspace: u64,
}

impl Configuration {
    pub fn batch(&self) -> u64 {
        self.parts.iter().map(|p| p.0).sum()
    }
}

/// Which micro-batch sizes are benchmarked (μ-cuDNN's batch-size policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// 1, 2, ..., N.
    All,
    /// 1, 2, 4, ... and N (the default).
    Pow2,
    /// N only.
    Undivided,
}

impl Sizes {
    pub const ACCEPTED: &'static str = "all, pow2, undivided";

    pub fn parse(s: &str) -> Option<Sizes> {
        match s {
            "all" => Some(Sizes::All),
            "pow2" | "powerOfTwo" => Some(Sizes::Pow2),
            "undivided" => Some(Sizes::Undivided),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sizes::All => "all",
            Sizes::Pow2 => "pow2",
            Sizes::Undivided => "undivided",
        }
    }

    /// Whether `b` is one of the sizes benchmarked for a mini-batch of `n`.
    pub fn allows(self, n: u64, b: u64) -> bool {
        b >= 1
            && b <= n
            && match self {
                Sizes::All => true,
                Sizes::Pow2 => b == n || b.is_power_of_two(),
                Sizes::Undivided => b == n,
            }
    }

    /// The micro-batch sizes to benchmark for a mini-batch of `n`, largest first.
    pub fn sizes(self, n: u64) -> Vec<u64> {
        let mut v: Vec<u64> = match self {
            Sizes::All => (1..=n).collect(),
            Sizes::Pow2 => {
                let mut v: Vec<u64> = std::iter::successors(Some(1u64), |&b| b.checked_mul(2))
                    .take_while(|&b| b < n)
                    .collect();
                v.push(n);
                v
            }
            Sizes::Undivided => vec![n],
        };
        v.retain(|&b| b >= 1);
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v
    }
}

/// The largest mini-batch the optimisers take: the DP keeps one configuration per batch size
/// up to N, so N bounds their memory (a few hundred bytes each) and time.
pub const MAX_BATCH: u64 = 1 << 16;

#[cfg(test)]
mod tests;
