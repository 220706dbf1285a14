//! Marmoset's settings, all from the environment, validated at first use. A value that does not
//! parse is reported in one stderr line (variable, value, what is accepted) and Marmoset passes
//! every call through unchanged.

use planner::microbatch::Sizes;
use planner::{SIZE_ACCEPTED, parse_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// What Marmoset does to the program's memory and convolutions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Observe and trace only; every call is forwarded unchanged.
    None,
    /// Passive memory virtualisation: evict least recently used tensors on demand.
    Lru,
    /// A planner policy (`marmoset plan --policy`): the first iteration runs passively while it
    /// is measured, the planner plans it off the hot path (runtime::bridge).
    Guided(&'static str),
}

/// The planner's policies the shim runs by name (`planner::policy::run`), best first: the names
/// MARMOSET_POLICY accepts after none and lru.
pub const GUIDED: &[&str] = {
    let (_, guided) = planner::settings::RUNTIME_POLICIES.split_at(2);
    guided
};

/// The policy a budget gets when MARMOSET_POLICY names none: the planner's portfolio, whose
/// plan is the best of every other policy's (within the planning time bound); it ran at least as
/// fast as `capuchin` at every point of `scripts/bench-memory.sh` (README, "Measured and guided
/// execution") and faster on BERT.
pub const BUDGET_DEFAULT: &str = "auto";

impl Policy {
    pub const ACCEPTED: &'static str =
        "none, lru, auto, capuchin, swap, recompute, dtr, vdnn-all, vdnn-conv, autoswap, hybrid";

    pub fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::Lru => "lru",
            Policy::Guided(name) => name,
        }
    }

    /// Whether Marmoset allocates and moves the program's device memory.
    pub fn manages_memory(self) -> bool {
        self != Policy::None
    }

    /// The planner policy whose plan guides execution, if any.
    pub fn guided(self) -> Option<&'static str> {
        match self {
            Policy::Guided(name) => Some(name),
            _ => None,
        }
    }

    /// Whether the policy needs one allocation per tensor from the framework.
    pub fn needs_tensor_allocations(self) -> bool {
        self.manages_memory()
    }

    /// Whether the policy needs the legacy convolution calls (it splits or replans them).
    pub fn needs_legacy_convolutions(self) -> bool {
        false
    }
}

pub use planner::settings::Limit;
use planner::settings::{limit_accepted, parse_limit};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub policy: Policy,
    pub trace: Option<String>,
    pub trace_timing: bool,
    pub log: Level,
    pub disable: bool,
    pub memory_limit: Option<Limit>,
    pub workspace_limit: Option<u64>,
    /// WD: one workspace of this size shared by all convolution kernels.
    pub workspace_total: Option<u64>,
    /// Micro-batch sizes benchmarked (MARMOSET_BATCH_SIZES).
    pub batch_sizes: Sizes,
    /// Where the benchmark database lives (MARMOSET_CACHE_DIR).
    pub cache_dir: Option<String>,
    /// Test facility: panic inside the named hook (MARMOSET_TEST_PANIC).
    pub test_panic: Option<String>,
    /// Test facility: plan every convolution as micro-batches of this many images.
    pub test_microbatch: Option<u64>,
    /// Allocations of at least this many bytes are tensors Marmoset can evict.
    pub min_tensor: u64,
    /// Pinned host memory for evicted tensors, at most.
    pub host_limit: u64,
    /// Test facility: skip the Nth restore, to show the simulator's trap fires.
    pub test_skip_restore: Option<u64>,
    /// MARMOSET_VERIFY: keep a host copy of every tensor dropped for recomputation and compare
    /// the recomputed bytes with it.
    pub verify: bool,
    /// Test facility: the Nth replay (from 1) computes with twice its alpha, a wrong replay.
    pub test_corrupt_replay: Option<u64>,
    /// Test facility (MARMOSET_TEST_REFUSE_REPLAY=N): the Nth recomputation finds no room
    /// within the budget, as when nothing can be evicted for its workspace or operands.
    pub test_refuse_replay: Option<u64>,
    /// Test facility (MARMOSET_TEST_FAST_LINK=N): plans assume copies N times faster than this
    /// run measured, so that their prefetches arrive late and the feedback must move them.
    pub test_fast_link: Option<u64>,
    /// Test facility (MARMOSET_TEST_UNCOUNTED=N): plans believe the budget N bytes larger than
    /// it is, so that the allocator meets memory they did not count and the memory feedback
    /// must replan.
    pub test_uncounted: Option<u64>,
    /// Test facility (MARMOSET_TEST_JOINT_SHARE=N): the workspace the framework is told under
    /// the joint plan is at most 1/N of the budget instead of 1/768.
    pub test_joint_share: Option<u64>,
    /// Test facility (MARMOSET_TEST_FOLD): plan the model with chains folded (`1`, the
    /// default) or unfolded (`0`) (see `runtime::bridge`).
    pub test_fold: Option<bool>,
    /// MARMOSET_PLAN_STEPS: the in-process planner's search steps at most (the times it asks
    /// whether to go on): the bound that decides, so that the same iteration and budget give
    /// the same plan on any host.
    pub plan_steps: u64,
    /// MARMOSET_PLAN_DEADLINE_MS: the in-process planner's time bound (host time), a safety
    /// net far above what its steps take.
    pub plan_deadline_ms: u64,
    /// MARMOSET_PLAN_WAIT: the program waits for the planning thread, so that on the simulated
    /// GPU (whose iterations take far less host time than planning) the plan applies from the
    /// next iteration boundary, as it would on a real GPU. Off by default here, as a real GPU
    /// needs; `marmoset run --sim` sets it unless the user did.
    pub plan_wait: bool,
    /// MARMOSET_ONLINE: under a planner policy, while no plan guides, the passive mechanism
    /// chooses its victims by DTR's heuristic and drops what it can replay (`1`, the default);
    /// `0`: least recently used, swapped, as under `lru`.
    pub online: bool,
    /// MARMOSET_MEMORY_FEEDBACK: guided execution replans within less where the allocator
    /// needed more memory than a plan counted (`1`, the default); `0`: plans stay as made.
    pub memory_feedback: bool,
    /// MARMOSET_JOINT_WORKSPACE: under a budget with no workspace limit or total, convolutions
    /// on the backend API run the fastest configuration whose workspace the budget has spare
    /// (`1`, the default); `0`: the framework's engines and workspaces, as it chose them.
    pub joint: bool,
}

impl Config {
    /// Micro-batching (μ-cuDNN) is on when a workspace limit (WR) or total (WD) is given, and
    /// under a budget for the joint plan.
    pub fn microbatching(&self) -> bool {
        self.workspace_limit.is_some() || self.workspace_total.is_some() || self.joint_workspace()
    }

    /// Micro-batching of convolutions on the legacy API: only under a workspace limit or total
    /// (the joint plan leaves the program's own algorithm and workspace choices alone there).
    pub fn microbatching_legacy(&self) -> bool {
        self.workspace_limit.is_some() || self.workspace_total.is_some()
    }

    /// The joint plan of tensors and workspaces: a budget Marmoset manages, and neither a
    /// workspace limit nor a total.
    pub fn joint_workspace(&self) -> bool {
        self.joint
            && self.memory_limit.is_some()
            && self.policy.manages_memory()
            && self.workspace_limit.is_none()
            && self.workspace_total.is_none()
    }

    /// Settings that are valid but do nothing in this combination: a line each, said at start
    /// so that no setting is ignored without a word.
    pub fn without_effect(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.disable {
            let mut idle: Vec<&str> = Vec::new();
            if self.memory_limit.is_some() {
                idle.push("MARMOSET_MEMORY_LIMIT (the program sees the whole device)");
            }
            if self.microbatching() {
                idle.push("the workspace limit (no micro-batching)");
            }
            if self.trace.is_some() {
                idle.push("MARMOSET_TRACE (no trace is written)");
            }
            if self.policy != Policy::None && self.memory_limit.is_none() {
                idle.push("MARMOSET_POLICY");
            }
            if !idle.is_empty() {
                lines.push(format!(
                    "marmoset: MARMOSET_DISABLE=1 turns Marmoset off, so these do nothing: {}",
                    idle.join(", ")
                ));
            }
            return lines;
        }
        if self.verify && self.policy.guided().is_none() {
            lines.push(format!(
                "marmoset: MARMOSET_VERIFY=1 checks recomputations, which only a planner policy makes; under `{}` it has nothing to check",
                self.policy.name()
            ));
        }
        if !self.joint && (self.memory_limit.is_none() || !self.policy.manages_memory()) {
            lines.push(
                "marmoset: MARMOSET_JOINT_WORKSPACE=0 turns off the joint plan, which only a memory budget under a memory policy makes; without one it has nothing to turn off".to_string(),
            );
        }
        lines
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            policy: Policy::None,
            trace: None,
            trace_timing: false,
            log: Level::Warn,
            disable: false,
            memory_limit: None,
            workspace_limit: None,
            workspace_total: None,
            batch_sizes: Sizes::Pow2,
            cache_dir: None,
            test_panic: None,
            test_microbatch: None,
            min_tensor: 1 << 20,
            host_limit: u64::MAX,
            test_skip_restore: None,
            verify: false,
            test_corrupt_replay: None,
            test_refuse_replay: None,
            test_fold: None,
            test_fast_link: None,
            test_uncounted: None,
            test_joint_share: None,
            plan_wait: false,
            memory_feedback: true,
            plan_steps: 500_000,
            plan_deadline_ms: 10_000,
            online: true,
            joint: true,
        }
    }
}

fn bad(var: &str, value: &str, accepted: &str) -> String {
    format!(
        "marmoset: {var}={value:?} is not valid: accepted are {accepted}; Marmoset passes every call through"
    )
}

fn flag(var: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(bad(var, v, "1, 0, true, false, on, off")),
    }
}

/// Parses the settings from `get` (the environment); errors are the lines to print.
pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Config, Vec<String>> {
    let mut c = Config::default();
    let mut errors = Vec::new();
    let var = |name: &str| get(name).filter(|v| !v.is_empty());
    if let Some(v) = var("MARMOSET_POLICY") {
        match v.as_str() {
            "none" => c.policy = Policy::None,
            "lru" => c.policy = Policy::Lru,
            name if GUIDED.contains(&name) => {
                c.policy = Policy::Guided(GUIDED.iter().find(|&&g| g == name).expect("listed"))
            }
            _ => errors.push(bad("MARMOSET_POLICY", &v, Policy::ACCEPTED)),
        }
    }
    c.trace = var("MARMOSET_TRACE");
    if let Some(v) = var("MARMOSET_TRACE_TIMING") {
        flag("MARMOSET_TRACE_TIMING", &v)
            .map(|b| c.trace_timing = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_DISABLE") {
        flag("MARMOSET_DISABLE", &v)
            .map(|b| c.disable = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_LOG") {
        c.log = match v.as_str() {
            "error" => Level::Error,
            "warn" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            _ => {
                errors.push(bad("MARMOSET_LOG", &v, "error, warn, info, debug"));
                Level::Warn
            }
        };
    }
    if let Some(v) = var("MARMOSET_MEMORY_LIMIT") {
        match parse_limit(&v) {
            Some(l) => {
                c.memory_limit = Some(l);
                // A budget with no policy named gets the best one (an explicit `none` observes).
                if var("MARMOSET_POLICY").is_none() {
                    c.policy = Policy::Guided(BUDGET_DEFAULT);
                }
            }
            None => errors.push(bad("MARMOSET_MEMORY_LIMIT", &v, &limit_accepted())),
        }
    }
    if let Some(v) = var("MARMOSET_WORKSPACE_LIMIT") {
        match parse_size(&v) {
            Ok(b) => c.workspace_limit = Some(b),
            Err(_) => errors.push(bad("MARMOSET_WORKSPACE_LIMIT", &v, SIZE_ACCEPTED)),
        }
    }
    if let Some(v) = var("MARMOSET_WORKSPACE_TOTAL") {
        match parse_size(&v) {
            Ok(b) => c.workspace_total = Some(b),
            Err(_) => errors.push(bad("MARMOSET_WORKSPACE_TOTAL", &v, SIZE_ACCEPTED)),
        }
    }
    if let Some(v) = var("MARMOSET_BATCH_SIZES") {
        match Sizes::parse(&v) {
            Some(s) => c.batch_sizes = s,
            None => errors.push(bad("MARMOSET_BATCH_SIZES", &v, Sizes::ACCEPTED)),
        }
    }
    c.cache_dir = var("MARMOSET_CACHE_DIR");
    for (name, slot) in [
        ("MARMOSET_MIN_TENSOR", &mut c.min_tensor),
        ("MARMOSET_HOST_LIMIT", &mut c.host_limit),
    ] {
        if let Some(v) = var(name) {
            match parse_size(&v) {
                Ok(b) => *slot = b,
                Err(_) => errors.push(bad(name, &v, SIZE_ACCEPTED)),
            }
        }
    }
    if let Some(v) = var("MARMOSET_JOINT_WORKSPACE") {
        flag("MARMOSET_JOINT_WORKSPACE", &v)
            .map(|b| c.joint = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_MEMORY_FEEDBACK") {
        flag("MARMOSET_MEMORY_FEEDBACK", &v)
            .map(|b| c.memory_feedback = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_ONLINE") {
        flag("MARMOSET_ONLINE", &v)
            .map(|b| c.online = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_VERIFY") {
        flag("MARMOSET_VERIFY", &v)
            .map(|b| c.verify = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_PLAN_STEPS") {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => c.plan_steps = n,
            _ => errors.push(bad(
                "MARMOSET_PLAN_STEPS",
                &v,
                "search steps, a whole number from 1",
            )),
        }
    }
    if let Some(v) = var("MARMOSET_PLAN_DEADLINE_MS") {
        match v.parse::<u64>() {
            Ok(n) => c.plan_deadline_ms = n,
            Err(_) => errors.push(bad(
                "MARMOSET_PLAN_DEADLINE_MS",
                &v,
                "milliseconds, a whole number",
            )),
        }
    }
    if let Some(v) = var("MARMOSET_PLAN_WAIT") {
        flag("MARMOSET_PLAN_WAIT", &v)
            .map(|b| c.plan_wait = b)
            .unwrap_or_else(|e| errors.push(e));
    }
    if let Some(v) = var("MARMOSET_TEST_FOLD") {
        flag("MARMOSET_TEST_FOLD", &v)
            .map(|b| c.test_fold = Some(b))
            .unwrap_or_else(|e| errors.push(e));
    }
    c.test_panic = var("MARMOSET_TEST_PANIC");
    // Test facilities that count: the Nth restore, replay, micro-batch size.
    for (name, slot, what) in [
        (
            "MARMOSET_TEST_SKIP_RESTORE",
            &mut c.test_skip_restore,
            "a restore number, at least 1",
        ),
        (
            "MARMOSET_TEST_CORRUPT_REPLAY",
            &mut c.test_corrupt_replay,
            "a replay number, at least 1",
        ),
        (
            "MARMOSET_TEST_REFUSE_REPLAY",
            &mut c.test_refuse_replay,
            "a replay number, at least 1",
        ),
        (
            "MARMOSET_TEST_MICROBATCH",
            &mut c.test_microbatch,
            "a whole number of images, at least 1",
        ),
        (
            "MARMOSET_TEST_FAST_LINK",
            &mut c.test_fast_link,
            "a whole factor, at least 1",
        ),
        (
            "MARMOSET_TEST_UNCOUNTED",
            &mut c.test_uncounted,
            "a number of bytes, at least 1",
        ),
        (
            "MARMOSET_TEST_JOINT_SHARE",
            &mut c.test_joint_share,
            "a whole divisor of the budget, at least 1",
        ),
    ] {
        if let Some(v) = var(name) {
            match v.parse::<u64>() {
                Ok(n) if n >= 1 => *slot = Some(n),
                _ => errors.push(bad(name, &v, what)),
            }
        }
    }
    if errors.is_empty() {
        Ok(c)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn settings_without_effect_are_named() {
        let said = |pairs: &[(&str, &str)]| parse(env(pairs)).unwrap().without_effect();
        assert!(said(&[]).is_empty());
        assert!(said(&[("MARMOSET_VERIFY", "1"), ("MARMOSET_POLICY", "auto")]).is_empty());
        for policy in ["lru", "none"] {
            let lines = said(&[("MARMOSET_VERIFY", "1"), ("MARMOSET_POLICY", policy)]);
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("MARMOSET_VERIFY") && lines[0].contains(policy));
        }
        let lines = said(&[
            ("MARMOSET_DISABLE", "1"),
            ("MARMOSET_MEMORY_LIMIT", "0.5"),
            ("MARMOSET_VERIFY", "1"),
        ]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("MARMOSET_MEMORY_LIMIT") && lines[0].contains("whole device"));
        assert!(
            !lines[0].contains("MARMOSET_POLICY"),
            "implied by the budget: {lines:?}"
        );
        assert!(said(&[("MARMOSET_DISABLE", "1")]).is_empty());
        let off = ("MARMOSET_JOINT_WORKSPACE", "0");
        let lines = said(&[off]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("MARMOSET_JOINT_WORKSPACE"));
        assert!(said(&[off, ("MARMOSET_MEMORY_LIMIT", "0.5")]).is_empty());
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse(env(&[])).unwrap(), Config::default());
        let c = parse(env(&[
            ("MARMOSET_POLICY", "none"),
            ("MARMOSET_TRACE", "/tmp/t.jsonl"),
            ("MARMOSET_LOG", "debug"),
            ("MARMOSET_MEMORY_LIMIT", "0.5"),
            ("MARMOSET_WORKSPACE_LIMIT", "64MiB"),
            ("MARMOSET_TRACE_TIMING", "1"),
        ]))
        .unwrap();
        assert_eq!(c.trace.as_deref(), Some("/tmp/t.jsonl"));
        assert_eq!(c.log, Level::Debug);
        assert_eq!(c.memory_limit, Some(Limit::Fraction(0.5)));
        assert_eq!(c.workspace_limit, Some(64 << 20));
        assert!(c.trace_timing);
        let c = parse(env(&[("MARMOSET_MEMORY_LIMIT", "8GiB")])).unwrap();
        assert_eq!(c.memory_limit, Some(Limit::Bytes(8 << 30)));
        // A budget alone gets the default planner policy; `none` named explicitly stays none.
        assert_eq!(c.policy, Policy::Guided(BUDGET_DEFAULT));
        assert!(GUIDED.contains(&BUDGET_DEFAULT));
        assert_eq!(c.policy.guided(), Some(BUDGET_DEFAULT));
        assert_eq!((c.plan_steps, c.plan_deadline_ms), (500_000, 10_000));
        let c = parse(env(&[("MARMOSET_PLAN_STEPS", "1000")])).unwrap();
        assert_eq!(c.plan_steps, 1000);
        assert!(parse(env(&[("MARMOSET_PLAN_STEPS", "0")])).is_err());
        assert!(parse(env(&[("MARMOSET_PLAN_STEPS", "many")])).is_err());
        let c = parse(env(&[("MARMOSET_PLAN_DEADLINE_MS", "250")])).unwrap();
        assert_eq!(c.plan_deadline_ms, 250);
        assert!(parse(env(&[("MARMOSET_PLAN_DEADLINE_MS", "soon")])).is_err());
    }

    #[test]
    fn every_bad_value_is_named_with_what_is_accepted() {
        for (var, val, accepted) in [
            ("MARMOSET_POLICY", "capuchin2", "none, lru, auto, capuchin"),
            ("MARMOSET_MIN_TENSOR", "big", "MiB"),
            ("MARMOSET_HOST_LIMIT", "-1", "MiB"),
            ("MARMOSET_LOG", "loud", "error, warn, info, debug"),
            ("MARMOSET_DISABLE", "maybe", "1, 0"),
            ("MARMOSET_TRACE_TIMING", "2", "1, 0"),
            ("MARMOSET_MEMORY_LIMIT", "1.5", "fraction"),
            ("MARMOSET_MEMORY_LIMIT", "lots", "MiB"),
            ("MARMOSET_WORKSPACE_LIMIT", "64XB", "MiB"),
            ("MARMOSET_WORKSPACE_TOTAL", "much", "MiB"),
            ("MARMOSET_BATCH_SIZES", "some", "all, pow2, undivided"),
            ("MARMOSET_TEST_MICROBATCH", "0", "at least 1"),
            ("MARMOSET_TEST_FAST_LINK", "fast", "at least 1"),
        ] {
            let e = parse(env(&[(var, val)])).unwrap_err();
            assert_eq!(e.len(), 1);
            assert!(
                e[0].contains(var) && e[0].contains(val) && e[0].contains(accepted),
                "{}",
                e[0]
            );
        }
    }

    #[test]
    fn the_policies_marmoset_run_accepts_are_the_ones_parsed_here() {
        for name in planner::settings::RUNTIME_POLICIES {
            let c = parse(env(&[("MARMOSET_POLICY", name)])).unwrap();
            assert_eq!(c.policy.name(), *name);
        }
        assert_eq!(
            Policy::ACCEPTED,
            planner::settings::RUNTIME_POLICIES.join(", ")
        );
    }
}
