//! WD (μ-cuDNN's workspace division): one workspace Marmoset owns, of the total asked for, shared
//! by every kernel Marmoset plans, legacy convolutions and backend graphs alike; a multiple-choice
//! knapsack over their desirable sets picks one configuration each and a segment of the
//! workspace, solved again when new kernels appear.

use super::{Kernel, dev_alloc, with_state};
use crate::core::config::Level;
use crate::core::state::{config, log};
use planner::microbatch::{Configuration, wd};

pub(crate) fn wd_mode() -> bool {
    config().workspace_total.is_some()
}

/// WD: registers a kernel; the assignment is (re)solved at the next convolution.
pub(super) fn register(k: Kernel) {
    with_state(|s| {
        if !s.registered.contains(&k) {
            s.registered.push(k);
        }
    });
}

/// WD: registers a backend graph with its desirable set; it joins the knapsack of the legacy
/// convolutions at the next solve.
pub(crate) fn register_graph(key: &str, front: Vec<Configuration>) {
    with_state(|s| {
        s.graphs.insert(key.to_string(), front);
    });
    register(Kernel::Graph(key.to_string()));
}

/// WD's shared workspace as allocated so far: (address, bytes); (0, 0) before the first solve.
pub(crate) fn wd_pool() -> (usize, u64) {
    with_state(|s| (s.pool, s.pool_size)).unwrap_or((0, 0))
}

/// WD: the configuration and workspace segment of a kernel, solving the knapsack when the
/// registered set changed. The shared workspace is allocated once: the total asked for, or the
/// largest part of it the device can give.
pub(crate) fn wd_assignment(k: &Kernel) -> Option<(Configuration, usize)> {
    register(k.clone());
    let total = config().workspace_total?;
    let (need_solve, kernels, pool, pool_size) = with_state(|s| {
        let need = s.solved != s.registered.len();
        // Each registered kernel with its desirable set (those not planned have none).
        let kernels: Vec<(Kernel, Vec<Configuration>)> = s
            .registered
            .iter()
            .map(|k| {
                let front = match k {
                    Kernel::Conv(sig) => s.plans.get(sig.as_ref()).map(|p| p.front.clone()),
                    Kernel::Graph(key) => s.graphs.get(key).cloned(),
                };
                (k.clone(), front.unwrap_or_default())
            })
            .filter(|(_, f)| !f.is_empty())
            .collect();
        (need, kernels, s.pool, s.pool_size)
    })?;
    if need_solve {
        let (pool, pool_size) = if pool != 0 {
            (pool, pool_size)
        } else {
            // The total first; what the device refuses is halved down to 1 MiB.
            let mut size = total.max(1);
            let mut p = dev_alloc(size as usize);
            while p.is_none() && size > 1 << 20 {
                size /= 2;
                p = dev_alloc(size as usize);
            }
            if size < total {
                log(
                    Level::Warn,
                    &format!(
                        "WD: the device gives {size} B of the {total} B asked for the shared workspace"
                    ),
                );
            }
            (p.unwrap_or(0), if p.is_some() { size } else { 0 })
        };
        let options: Vec<Vec<(f64, u64)>> = kernels
            .iter()
            .map(|(_, front)| {
                front
                    .iter()
                    .map(|c| (c.time_ms, c.workspace.div_ceil(256) * 256))
                    .collect()
            })
            .collect();
        let solution = if pool != 0 {
            wd(&options, pool_size, 200_000)
        } else {
            None
        };
        let assigned = with_state(|s| {
            s.pool = pool;
            s.pool_size = pool_size;
            s.solved = s.registered.len();
            s.assignment.clear();
            let mut offset = 0;
            if let Some(sol) = &solution {
                for ((k, front), &j) in kernels.iter().zip(&sol.choice) {
                    let c = front[j].clone();
                    let w = c.workspace.div_ceil(256) * 256;
                    s.assignment.insert(k.clone(), (c, offset));
                    offset += w;
                }
            }
            offset
        })
        .unwrap_or(0);
        match solution {
            Some(sol) => log(
                Level::Info,
                &format!(
                    "WD: {} kernels share {pool_size} B at {pool:#x} ({assigned} B assigned; {} backend graphs): {:.4} ms of convolutions ({}, {} nodes)",
                    kernels.len(),
                    kernels
                        .iter()
                        .filter(|(k, _)| matches!(k, Kernel::Graph(_)))
                        .count(),
                    sol.time_ms,
                    if sol.exact {
                        "optimal"
                    } else {
                        "node budget reached"
                    },
                    sol.nodes
                ),
            ),
            None => log(
                Level::Warn,
                &format!(
                    "WD: the kernels' smallest configurations do not fit {pool_size} B; they run without workspace"
                ),
            ),
        }
    }
    with_state(|s| {
        s.assignment
            .get(k)
            .map(|(c, o)| (c.clone(), s.pool + *o as usize))
    })
    .flatten()
}

/// WD's fallback for a kernel without a share of the workspace: its configuration that needs
/// none (the framework was told it needs none).
pub(crate) fn without_workspace(front: &[Configuration]) -> Option<Configuration> {
    front
        .iter()
        .filter(|c| c.workspace == 0)
        .min_by(|a, b| a.time_ms.total_cmp(&b.time_ms))
        .cloned()
}
