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
    let is_conv = |i: usize| t.ops[i].name.to_ascii_lowercase().contains("conv");
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
        let trigger = (last_fwd + 1..first_bwd)
            .rev()
            .find(|&j| is_conv(j))
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
