//! vDNN (Rhu et al., MICRO '16): offload forward activations, prefetch one layer ahead.

use super::analysis::Analysis;
use crate::model::Trace;
use crate::timeline::{Decision, Link, Outcome, Plan, simulate};

/// vDNN's static policies: forward activations (all of them, or those read by convolutions)
/// leave after their last forward use and come back one convolution ahead of their first
/// backward use.
pub(super) fn vdnn(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    conv_only: bool,
) -> (Plan, Outcome) {
    // DTR's logs say "conv..."; a shim trace names the cuDNN call, "cudnnConvolution...".
    let conv: Vec<bool> = t
        .ops
        .iter()
        .map(|o| o.name.to_ascii_lowercase().contains("conv"))
        .collect();
    let is_conv = |i: usize| conv[i];
    // Per operation: the last convolution at or before it (a trace without any would otherwise
    // have every storage scan its whole gap).
    let mut last_conv = vec![None; t.ops.len()];
    let mut seen = None;
    for (i, &c) in conv.iter().enumerate() {
        if c {
            seen = Some(i);
        }
        last_conv[i] = seen;
    }
    let mut plan = Vec::new();
    for (s, st) in t.storages.iter().enumerate() {
        if st.constant || st.size < 1 << 20 {
            continue;
        }
        let acc = &a.accesses[s];
        let Some(last_fwd) = acc.iter().rev().find(|&&i| !t.ops[i].backward).copied() else {
            continue;
        };
        let Some(first_bwd) = acc.iter().find(|&&i| t.ops[i].backward).copied() else {
            continue;
        };
        if conv_only
            && !acc
                .iter()
                .any(|&i| !t.ops[i].backward && is_conv(i) && t.ops[i].inputs.contains(&s))
        {
            continue;
        }
        if first_bwd <= last_fwd + 1 {
            continue;
        }
        // The last convolution in last_fwd + 1 .. first_bwd.
        let trigger = last_conv[first_bwd - 1]
            .filter(|&j| j > last_fwd)
            .unwrap_or(first_bwd - 1)
            .max(last_fwd + 1);
        plan.push((
            s,
            Decision::Swap {
                after: last_fwd,
                trigger,
                back: first_bwd,
            },
        ));
    }
    let out = simulate(t, budget, link, &plan);
    (plan, out)
}
