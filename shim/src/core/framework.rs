//! What Marmoset sets in the framework's environment before the framework reads it: one
//! allocation per tensor where a memory policy or a trace needs it (PyTorch's
//! `backend:cudaMallocAsync`, TensorFlow's `cuda_malloc_async`), the legacy convolution calls
//! where a policy splits them, and one executor thread for TensorFlow where a plan follows the
//! iteration call by call. Never what the user set.

use super::config::{Level, Policy};
/// A line the framework settings say at start, at `level`. `pytorch`: said only once PyTorch's
/// CUDA library is in the process, at the first CUDA call (a setting a trace alone asked for
/// changes nothing in a program without PyTorch, so such a program hears nothing of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Said {
    pub level: Level,
    pub pytorch: bool,
    pub line: String,
}

/// Why the framework is asked for one allocation per tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PerTensor {
    /// Nothing needs it.
    No,
    /// A memory policy: it moves tensors, so each must be an allocation of its own.
    Policy,
    /// A trace: only a trace of tensors can be planned (`marmoset plan`, `report`); the
    /// allocations of a caching allocator are its blocks, each holding many tensors.
    Trace,
}

/// What to set in the environment so that a framework allocates per tensor, uses the legacy
/// convolution calls, and issues an iteration's calls in one order, when the policy or a trace
/// (`tracing`) needs it; never overriding what the user set. Returns (variables to set, lines
/// to say, whether the memory policy can work).
pub fn framework_settings(
    policy: Policy,
    tracing: bool,
    get: impl Fn(&str) -> Option<String>,
) -> (Vec<(String, String)>, Vec<Said>, bool) {
    let tensors = if policy.needs_tensor_allocations() {
        PerTensor::Policy
    } else if tracing {
        PerTensor::Trace
    } else {
        PerTensor::No
    };
    settings_for(
        policy.name(),
        tensors,
        policy.needs_legacy_convolutions(),
        policy.guided().is_some() || tracing,
        get,
    )
}

fn settings_for(
    policy: &str,
    tensors: PerTensor,
    legacy: bool,
    ordered: bool,
    get: impl Fn(&str) -> Option<String>,
) -> (Vec<(String, String)>, Vec<Said>, bool) {
    let (mut set, mut log, mut memory_ok) = (Vec::new(), Vec::new(), true);
    // Information, said in every process that loads the library.
    let info = |line: String| Said {
        level: Level::Info,
        pytorch: false,
        line,
    };
    // What a trace changed in PyTorch's allocator, or could not: said at the default level, so
    // that the user sees why torch's allocator changed (or why the trace will not plan), in
    // the processes where PyTorch is.
    let traced = |line: String| Said {
        level: Level::Warn,
        pytorch: true,
        line,
    };
    if tensors != PerTensor::No {
        let conf = get("PYTORCH_CUDA_ALLOC_CONF").or_else(|| get("PYTORCH_ALLOC_CONF"));
        let per_tensor = |c: &str| c.replace(' ', "").contains("backend:cudaMallocAsync");
        match conf {
            Some(c)
                if tensors == PerTensor::Policy
                    && c.replace(' ', "").contains("expandable_segments:True") =>
            {
                memory_ok = false;
                log.push(Said {
                    level: Level::Warn,
                    pytorch: false,
                    line: format!(
                        "marmoset: PYTORCH_CUDA_ALLOC_CONF={c:?} turns on expandable segments, which hide tensors from \
                         Marmoset; the {policy} policy is off for this process (calls pass through)"
                    ),
                });
            }
            Some(c) if tensors == PerTensor::Trace && !per_tensor(&c) => log.push(traced(format!(
                "marmoset: keeping the user's PYTORCH_CUDA_ALLOC_CONF={c:?}: PyTorch's caching allocator \
                 hands out blocks that hold many tensors, so `marmoset plan` cannot plan this trace \
                 (backend:cudaMallocAsync gives one allocation per tensor)"
            ))),
            Some(c) => log.push(info(format!(
                "marmoset: keeping the user's PYTORCH_CUDA_ALLOC_CONF={c:?}"
            ))),
            None if get("PYTORCH_NO_CUDA_MEMORY_CACHING").is_some() => log.push(info(
                "marmoset: keeping the user's PYTORCH_NO_CUDA_MEMORY_CACHING".into(),
            )),
            None => {
                // Stream-ordered per-tensor allocations: cudaFree would synchronise the device.
                set.push((
                    "PYTORCH_CUDA_ALLOC_CONF".into(),
                    "backend:cudaMallocAsync".into(),
                ));
                log.push(if tensors == PerTensor::Trace {
                    traced(
                        "marmoset: tracing: set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, so that PyTorch \
                         makes one allocation per tensor and the trace can be planned (set \
                         PYTORCH_CUDA_ALLOC_CONF yourself to keep another allocator)"
                            .into(),
                    )
                } else {
                    info(
                        "marmoset: set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (one stream-ordered \
                         allocation per tensor, without the device-wide synchronisation of cudaFree)"
                            .into(),
                    )
                });
            }
        }
    }
    // torch's default NCCL process group (its "nccl2") reads the caching allocator's snapshot
    // when a group is destroyed, which backend:cudaMallocAsync refuses: the process aborts
    // before its first step. The stock group (TORCH_DIST_USE_NCCL2=0) has no such hook.
    let async_backend = set.iter().any(|(k, v): &(String, String)| {
        k == "PYTORCH_CUDA_ALLOC_CONF" && v.contains("backend:cudaMallocAsync")
    }) || get("PYTORCH_CUDA_ALLOC_CONF")
        .or_else(|| get("PYTORCH_ALLOC_CONF"))
        .is_some_and(|c| c.replace(' ', "").contains("backend:cudaMallocAsync"));
    if async_backend {
        match get("TORCH_DIST_USE_NCCL2") {
            None => {
                set.push(("TORCH_DIST_USE_NCCL2".into(), "0".into()));
                log.push(info(
                    "marmoset: set TORCH_DIST_USE_NCCL2=0 (PyTorch's stock NCCL process group: its \
                     default one aborts under backend:cudaMallocAsync)"
                        .into(),
                ));
            }
            Some(v) if v != "0" => log.push(Said {
                level: Level::Warn,
                pytorch: true,
                line: format!(
                    "marmoset: TORCH_DIST_USE_NCCL2={v:?} keeps PyTorch's default NCCL process \
                     group, which aborts under backend:cudaMallocAsync when a group is made or \
                     destroyed (unset it, or set it to 0)"
                ),
            }),
            Some(_) => log.push(info(
                "marmoset: keeping the user's TORCH_DIST_USE_NCCL2=0".into(),
            )),
        }
    }
    if tensors != PerTensor::No {
        tensorflow_allocator(policy, &get, &mut set, &mut log);
    }
    if ordered {
        // TensorFlow's executor runs the ops that are ready on a pool of threads, each issuing
        // its ops' CUDA calls, so that independent ops (a batch's two copies in) come in an
        // order that changes from step to step; a plan, and a trace to plan, follow the
        // iteration call by call. One thread issues them in the graph's order.
        match get("TF_NUM_INTEROP_THREADS") {
            None => {
                set.push(("TF_NUM_INTEROP_THREADS".into(), "1".into()));
                log.push(info(
                    "marmoset: set TF_NUM_INTEROP_THREADS=1 (TensorFlow issues an iteration's calls \
                     in one order, which a plan follows)"
                        .into(),
                ));
            }
            Some(v) if v.trim() != "1" => log.push(info(format!(
                "marmoset: keeping the user's TF_NUM_INTEROP_THREADS={v:?}: TensorFlow's calls may \
                 come in an order that changes from step to step, and a plan then guides no step \
                 (1 keeps one order)"
            ))),
            Some(_) => {}
        }
    }
    if legacy {
        if get("TORCH_CUDNN_V8_API_DISABLED").is_some() {
            log.push(info(
                "marmoset: keeping the user's TORCH_CUDNN_V8_API_DISABLED".into(),
            ));
        } else {
            set.push(("TORCH_CUDNN_V8_API_DISABLED".into(), "1".into()));
            log.push(info(
                "marmoset: set TORCH_CUDNN_V8_API_DISABLED=1 (legacy cuDNN convolution calls)"
                    .into(),
            ));
        }
    }
    (set, log, memory_ok)
}

/// TensorFlow's allocator: its default (BFC) takes the whole device in one allocation, in which
/// no tensor can be told from another; `cuda_malloc_async` (the driver's memory pools) makes one
/// allocation per tensor.
fn tensorflow_allocator(
    policy: &str,
    get: &impl Fn(&str) -> Option<String>,
    set: &mut Vec<(String, String)>,
    log: &mut Vec<Said>,
) {
    match get("TF_GPU_ALLOCATOR") {
        None => {
            set.push(("TF_GPU_ALLOCATOR".into(), "cuda_malloc_async".into()));
            log.push(Said {
                level: Level::Info,
                pytorch: false,
                line: "marmoset: set TF_GPU_ALLOCATOR=cuda_malloc_async (TensorFlow makes one \
                       allocation per tensor)"
                    .into(),
            });
        }
        Some(v) if v.trim() == "cuda_malloc_async" => {}
        Some(v) => log.push(Said {
            level: Level::Warn,
            pytorch: false,
            line: format!(
                "marmoset: keeping the user's TF_GPU_ALLOCATOR={v:?}: in a TensorFlow program its \
                 allocator holds every tensor in one allocation, which the {policy} policy cannot \
                 move nor a trace plan (cuda_malloc_async makes one per tensor)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::BUDGET_DEFAULT;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    /// `pairs` in an environment whose TensorFlow settings are already what Marmoset would set:
    /// what is set and said is PyTorch's alone.
    fn torch(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let mut all = pairs.to_vec();
        all.extend([
            ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
            ("TF_NUM_INTEROP_THREADS", "1"),
        ]);
        env(&all)
    }

    #[test]
    fn tensorflow_gets_one_allocation_per_tensor_and_one_order_of_calls() {
        let tf = |set: &[(String, String)]| -> Vec<(String, String)> {
            set.iter()
                .filter(|(k, _)| k.starts_with("TF_"))
                .cloned()
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let allocator = pair("TF_GPU_ALLOCATOR", "cuda_malloc_async");
        let one_thread = pair("TF_NUM_INTEROP_THREADS", "1");
        // A planner policy follows the iteration call by call; so does a trace's plan.
        for (policy, tracing) in [
            (Policy::Guided(BUDGET_DEFAULT), false),
            (Policy::None, true),
        ] {
            let (set, log, ok) = framework_settings(policy, tracing, env(&[]));
            assert!(ok);
            assert_eq!(tf(&set), vec![allocator.clone(), one_thread.clone()]);
            assert!(
                log.iter()
                    .any(|l| l.line.contains("TF_NUM_INTEROP_THREADS=1") && !l.pytorch),
                "{log:?}"
            );
        }
        // Swapping alone needs tensors, not an order.
        let (set, _, _) = framework_settings(Policy::Lru, false, env(&[]));
        assert_eq!(tf(&set), vec![allocator.clone()]);
        let (set, log, _) = framework_settings(Policy::None, false, env(&[]));
        assert!(set.is_empty() && log.is_empty());
        // The user's settings stay, with a word where they defeat the policy or the plan.
        let (set, log, ok) = framework_settings(
            Policy::Guided(BUDGET_DEFAULT),
            false,
            env(&[("TF_GPU_ALLOCATOR", "bfc"), ("TF_NUM_INTEROP_THREADS", "8")]),
        );
        assert!(ok && tf(&set).is_empty(), "{set:?}");
        assert!(
            log.iter()
                .any(|l| l.level == Level::Warn && l.line.contains("TF_GPU_ALLOCATOR=\"bfc\"")),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.line.contains("TF_NUM_INTEROP_THREADS=\"8\"")),
            "{log:?}"
        );
    }

    #[test]
    fn framework_settings_for_policy_none_change_nothing() {
        let (set, log, ok) = framework_settings(
            Policy::None,
            false,
            torch(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]),
        );
        assert!(set.is_empty() && log.is_empty() && ok);
    }

    #[test]
    fn a_trace_asks_for_one_allocation_per_tensor_whatever_the_policy() {
        let stock_nccl = ("TORCH_DIST_USE_NCCL2".to_string(), "0".to_string());
        let per_tensor = vec![
            (
                "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                "backend:cudaMallocAsync".to_string(),
            ),
            stock_nccl.clone(),
        ];
        // Under `none`, the trace alone asks, and says so at the default level where PyTorch is.
        let (set, log, ok) = framework_settings(Policy::None, true, torch(&[]));
        assert_eq!(set, per_tensor);
        assert!(ok);
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log[0].level <= Level::Warn && log[0].pytorch, "{log:?}");
        assert!(log[0].line.contains("backend:cudaMallocAsync") && log[0].line.contains("plan"));
        assert!(log[1].line.contains("TORCH_DIST_USE_NCCL2=0"), "{log:?}");
        // Under a memory policy it is the policy's setting, said at info as before.
        for policy in [Policy::Lru, Policy::Guided(BUDGET_DEFAULT)] {
            let (set, log, ok) = framework_settings(policy, true, torch(&[]));
            assert_eq!(set, per_tensor);
            assert!(
                ok && log.len() == 2 && log.iter().all(|l| l.level == Level::Info),
                "{log:?}"
            );
        }
        // The user's own setting stays: one per tensor already (the stock NCCL group then comes
        // with it), or a caching one that the trace cannot plan, said at the default level;
        // expandable segments refuse no policy under `none`.
        let (set, log, _) = framework_settings(
            Policy::None,
            true,
            torch(&[("PYTORCH_CUDA_ALLOC_CONF", "backend: cudaMallocAsync")]),
        );
        assert_eq!(set, vec![stock_nccl.clone()]);
        assert!(log[0].level == Level::Info, "{log:?}");
        // The user's choice of NCCL group stays too; the default one is warned of.
        let (set, log, _) =
            framework_settings(Policy::None, true, torch(&[("TORCH_DIST_USE_NCCL2", "1")]));
        assert_eq!(set, per_tensor[..1].to_vec());
        assert!(
            log.iter()
                .any(|l| l.level == Level::Warn && l.line.contains("TORCH_DIST_USE_NCCL2=\"1\"")),
            "{log:?}"
        );
        for conf in ["max_split_size_mb:64", "expandable_segments:True"] {
            let (set, log, ok) =
                framework_settings(Policy::None, true, torch(&[("PYTORCH_ALLOC_CONF", conf)]));
            assert!(set.is_empty() && ok, "{conf}: {set:?}");
            assert!(
                log.len() == 1 && log[0].level == Level::Warn && log[0].line.contains(conf),
                "{log:?}"
            );
        }
        let (set, log, _) = framework_settings(
            Policy::None,
            true,
            torch(&[("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")]),
        );
        assert!(set.is_empty() && log[0].level == Level::Info, "{log:?}");
    }

    #[test]
    fn framework_settings_never_override_the_user() {
        let (set, _, ok) = settings_for("p", PerTensor::Policy, true, true, torch(&[]));
        assert!(ok);
        assert_eq!(
            set,
            vec![
                (
                    "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                    "backend:cudaMallocAsync".to_string()
                ),
                ("TORCH_DIST_USE_NCCL2".to_string(), "0".to_string()),
                ("TORCH_CUDNN_V8_API_DISABLED".to_string(), "1".to_string())
            ]
        );
        let (set, log, _) = settings_for(
            "p",
            PerTensor::Policy,
            true,
            true,
            torch(&[
                ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"),
                ("TORCH_CUDNN_V8_API_DISABLED", "0"),
            ]),
        );
        assert!(set.is_empty(), "{set:?}");
        assert_eq!(log.len(), 2);
        let (set, _, _) = settings_for(
            "p",
            PerTensor::Policy,
            false,
            true,
            torch(&[("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")]),
        );
        assert!(set.is_empty());
        let (set, log, ok) = settings_for(
            "p",
            PerTensor::Policy,
            false,
            true,
            torch(&[("PYTORCH_ALLOC_CONF", "expandable_segments:True")]),
        );
        assert!(
            set.is_empty()
                && !ok
                && log[0].line.contains("expandable")
                && log[0].level == Level::Warn,
            "{log:?}"
        );
    }
}
