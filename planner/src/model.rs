//! The planner's trace model: storages (the memory a tensor occupies), operations with their
//! durations, inputs, outputs and in-place writes, and the program order of operations and
//! frees, with the iteration's annotations. Imported from DTR's logs ([`import_dtr`]) and from
//! Marmoset's traces ([`crate::shimtrace`]).
//!
//! DTR's format (anchors.md): JSON lines; `ANNOTATE` START (skip what comes before) and
//! BACKWARD; `CONSTANT name` then `MEMORY name bytes`; `CALL name args result time` with, for each
//! result, `MEMORY result bytes` and `ALIAS result k` (k = -1: new storage; k >= 0: a view of
//! argument k); `MUTATE name args mutate time`; `COPY dst src` (a new reference);
//! `COPY_FROM dst src` (dst now refers to src's storage); `RELEASE name` (the storage is freed
//! when its last reference goes). Times are nanoseconds.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The memory of one tensor (views share their base's storage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Storage {
    pub size: u64,
    /// Exists before the iteration (weights, inputs): resident from the start.
    pub constant: bool,
    /// The operation that produced it.
    pub producer: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub name: String,
    pub time_s: f64,
    /// Storages read (arguments, views resolved to their base).
    pub inputs: Vec<usize>,
    /// Storages this operation creates.
    pub outputs: Vec<usize>,
    /// Storages written in place.
    pub mutates: Vec<usize>,
    /// In-place writes as versions: (old, new). The new version takes over the old one's
    /// memory; the old one is gone (it can only come back by recomputation).
    #[serde(default)]
    pub inplace: Vec<(usize, usize)>,
    pub backward: bool,
    /// Bytes of scratch a re-run of this operation needs while it runs, beyond its storages
    /// (a recomputed convolution's workspace: the replay brings its own).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scratch: u64,
    /// A re-run for one of its outputs writes the others into scratch of their own size, not
    /// over them (the shim's replays: a second output may be freed by then, or hold newer
    /// contents). Without it a re-run remakes every output in place, as DTR's does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub separate_outputs: bool,
    /// Runs beside the compute, on the device's links (a collective): the compute goes on while
    /// it runs; what it writes is ready, and what it reads free, only when it ends. Such
    /// operations run one after another.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub concurrent: bool,
    /// A convolution that could have run other configurations (μ-cuDNN's desirable set, a
    /// `configs` record): the lower bound relaxes it to the least of each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configs: Option<Configs>,
    /// A copy of the program's own between host and device: it runs on that direction's copy
    /// engine once the copies queued there (swaps included) are done, and the compute waits for
    /// it (the program's stream orders it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<Direction>,
}

/// A copy engine's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Host to device.
    H2d,
    /// Device to host.
    D2h,
}

/// What a convolution's configurations allow at least.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Configs {
    /// The fastest configuration's time, seconds.
    pub fastest_s: f64,
    /// The least workspace any configuration needs, bytes.
    pub least_workspace: u64,
    /// The storages the operation's workspace occupies (its scratch outputs).
    pub workspace: Vec<usize>,
    /// Every configuration it could run: (seconds, workspace bytes), fastest first (empty in
    /// traces written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub front: Vec<(f64, u64)>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

impl Op {
    /// A forward operation that writes nothing in place.
    pub fn new(name: &str, time_s: f64, inputs: Vec<usize>, outputs: Vec<usize>) -> Op {
        Op {
            name: name.into(),
            time_s,
            inputs,
            outputs,
            mutates: Vec::new(),
            inplace: Vec::new(),
            backward: false,
            scratch: 0,
            separate_outputs: false,
            concurrent: false,
            configs: None,
            copy: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    Op(usize),
    Free(usize),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub storages: Vec<Storage>,
    pub ops: Vec<Op>,
    pub steps: Vec<Step>,
    /// Recomputations replay into the dropped tensor's own memory and read their sources where
    /// the program left them (the shim's executor): no source is kept past the program's free
    /// of it (an old version an update in place replaced is rebuilt on the way, into the
    /// replay's scratch: `memory::carried_out::slice`). False for DTR's simulator, which keeps
    /// sources past their frees too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replay_in_place: bool,
    /// The shim will carry the plan out (`memory::carried_out`): every policy's plan comes
    /// back as carried out, and `auto` judges each plan it weighs that way. Set by the shim's
    /// planner and by `marmoset plan` on the trace of a run that planned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shim_carries_out: bool,
    /// Per storage, the bytes a swap copies where they are fewer than the memory it holds
    /// (`shimtrace::as_held`: a tensor held in whole pages copies only its own bytes); empty:
    /// each storage's size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copied: Vec<u64>,
    /// The executor lends a convolution a workspace beside the program's, up to a cap each
    /// plan chooses with its evictions (`memory::joint`): every policy plans so. Set by the
    /// shim under the joint plan and by `marmoset plan` on the trace of a run that planned so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lends_workspaces: bool,
    /// The allocator's page where the model is as it holds memory (`shimtrace::as_held`): a
    /// workspace the executor lends takes whole pages. 0: bytes as asked.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub page: u64,
}

impl Trace {
    /// The bytes a swap of storage `s` copies each way.
    pub fn copy_bytes(&self, s: usize) -> u64 {
        self.copied.get(s).copied().unwrap_or(self.storages[s].size)
    }

    /// The bytes resident before the first operation (weights, inputs).
    pub fn constant_bytes(&self) -> u64 {
        self.storages
            .iter()
            .filter(|s| s.constant)
            .map(|s| s.size)
            .sum()
    }

    /// The iteration's time with all the memory it wants: Σ operation times, where a
    /// concurrent operation (a collective) takes no compute time but holds back what reads its
    /// results until it ends, and concurrent operations run one after another.
    pub fn compute_time(&self) -> f64 {
        if !self.ops.iter().any(|o| o.concurrent) {
            return self.ops.iter().map(|o| o.time_s).sum();
        }
        let (mut now, mut link_free) = (0.0f64, 0.0f64);
        let mut ready = vec![0.0f64; self.storages.len()];
        for step in &self.steps {
            let Step::Op(i) = *step else { continue };
            let op = &self.ops[i];
            now = op
                .inputs
                .iter()
                .chain(&op.mutates)
                .map(|&s| ready[s])
                .fold(now, f64::max);
            if op.concurrent {
                let end = now.max(link_free) + op.time_s;
                link_free = end;
                for &s in op.mutates.iter().chain(&op.outputs) {
                    ready[s] = end;
                }
                for &(_, new) in &op.inplace {
                    ready[new] = end;
                }
            } else {
                now += op.time_s;
            }
        }
        now.max(link_free)
    }

    /// The trace with every convolution that could have run other configurations at the least
    /// of them: its fastest time and its least workspace (None: no operation has any). Each
    /// choice of configurations is this trace with longer operations and larger storages, and
    /// no plan is slower on this one than the best plan on any of them (a longer operation can
    /// be waited for, a larger storage left partly unused), so a lower bound on it bounds the
    /// joint choice of configurations and plans.
    pub fn at_least_configs(&self) -> Option<Trace> {
        if self.ops.iter().all(|o| o.configs.is_none()) {
            return None;
        }
        let mut t = self.clone();
        for i in 0..t.ops.len() {
            let Some(c) = t.ops[i].configs.clone() else {
                continue;
            };
            t.ops[i].time_s = t.ops[i].time_s.min(c.fastest_s);
            let mut left = c.least_workspace;
            for &s in &c.workspace {
                let size = t.storages[s].size.min(left);
                left -= size;
                t.storages[s].size = size;
                if let Some(b) = t.copied.get_mut(s) {
                    *b = (*b).min(size);
                }
            }
            t.ops[i].scratch = t.ops[i].scratch.min(c.least_workspace);
        }
        Some(t)
    }

    /// The largest memory in use at any point of the program order (constants from the start,
    /// an operation's outputs from its start, frees at their step).
    pub fn peak(&self) -> u64 {
        let mut used = self.constant_bytes();
        let mut peak = used;
        for step in &self.steps {
            match *step {
                Step::Op(i) => {
                    used += self.ops[i]
                        .outputs
                        .iter()
                        .map(|&s| self.storages[s].size)
                        .sum::<u64>();
                    peak = peak.max(used);
                }
                Step::Free(s) => used -= self.storages[s].size,
            }
        }
        peak
    }

    /// Checks the model's own invariants (what the importers guarantee).
    pub fn validate(&self) -> Result<(), String> {
        // Every sum of sizes the planner takes must fit its u64 arithmetic.
        self.storages
            .iter()
            .try_fold(0u64, |a, s| a.checked_add(s.size))
            .ok_or("the storages' sizes add up to more than 2^64 B")?;
        let mut alive: Vec<bool> = self.storages.iter().map(|s| s.constant).collect();
        let mut freed = vec![false; self.storages.len()];
        for (k, step) in self.steps.iter().enumerate() {
            match *step {
                Step::Op(i) => {
                    let op = self
                        .ops
                        .get(i)
                        .ok_or(format!("step {k}: no operation {i}"))?;
                    for &s in op.inputs.iter().chain(&op.mutates) {
                        if !alive.get(s).copied().unwrap_or(false) {
                            return Err(format!(
                                "step {k}: {} uses storage {s}, which is not alive",
                                op.name
                            ));
                        }
                    }
                    for &s in &op.outputs {
                        if alive[s] || freed[s] {
                            return Err(format!("step {k}: storage {s} created twice"));
                        }
                        alive[s] = true;
                    }
                    for &(old, new) in &op.inplace {
                        if !alive[old] || alive[new] || freed[new] {
                            return Err(format!(
                                "step {k}: in-place version {new} of {old} is inconsistent"
                            ));
                        }
                        alive[old] = false;
                        freed[old] = true;
                        alive[new] = true;
                    }
                }
                Step::Free(s) => {
                    if !alive.get(s).copied().unwrap_or(false) {
                        return Err(format!("step {k}: free of storage {s}, which is not alive"));
                    }
                    alive[s] = false;
                    freed[s] = true;
                }
            }
        }
        Ok(())
    }
}

/// A line's JSON, with the line number in every error.
struct Line<'a> {
    n: usize,
    v: &'a serde_json::Value,
}

impl Line<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> String {
        format!("line {}: {msg}", self.n)
    }

    fn str(&self, key: &str) -> Result<&str, String> {
        self.v
            .get(key)
            .and_then(|x| x.as_str())
            .ok_or_else(|| self.err(format!("no string field {key}")))
    }

    fn strs(&self, key: &str) -> Result<Vec<&str>, String> {
        let a = self
            .v
            .get(key)
            .and_then(|x| x.as_array())
            .ok_or_else(|| self.err(format!("no list field {key}")))?;
        a.iter()
            .map(|x| {
                x.as_str()
                    .ok_or_else(|| self.err(format!("{key} holds a non-string")))
            })
            .collect()
    }

    /// A whole number written as a JSON number or a string (DTR writes strings of digits),
    /// within `range`: anything else is refused, never rounded or clamped.
    fn int(&self, key: &str, range: std::ops::RangeInclusive<i64>) -> Result<i64, String> {
        let v = self
            .v
            .get(key)
            .ok_or_else(|| self.err(format!("no field {key}")))?;
        let text = match v {
            serde_json::Value::String(s) => s.trim().to_string(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => String::new(),
        };
        let n = text.parse::<i64>().ok().or_else(|| {
            // A whole number in another notation (1e3, 2000.0), exactly.
            let f = text.parse::<f64>().ok().filter(|f| f.is_finite())?;
            (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
        });
        match n {
            Some(n) if range.contains(&n) => Ok(n),
            Some(_) | None if text.parse::<f64>().is_ok_and(f64::is_finite) => {
                Err(self.err(format!(
                    "{key} {text} is out of range: accepted are whole numbers from {} to {}",
                    range.start(),
                    range.end()
                )))
            }
            _ => Err(self.err(format!("{key} is not a number"))),
        }
    }
}

/// The largest MEMORY a DTR log may give one tensor: 2^50 B (1 PiB). Sums of many such sizes
/// still fit the planner's u64 arithmetic.
pub const MAX_BYTES: i64 = 1 << 50;
/// The longest TIME of one operation: 10^15 ns (about 11.6 days).
pub const MAX_TIME_NS: i64 = 1_000_000_000_000_000;

/// Reads a DTR log into the model. Malformed input is an error naming the line and the reason;
/// it never panics. Numbers out of range are refused, never clamped.
pub fn import_dtr(text: &str) -> Result<Trace, String> {
    let mut t = Trace::default();
    let mut started = false;
    let mut backward = false;
    // Reference name -> storage; storage -> number of references.
    let mut refs: HashMap<String, usize> = HashMap::new();
    let mut count: Vec<u64> = Vec::new();
    // Results of the last CALL still waiting for their MEMORY / ALIAS lines: name -> (op, size).
    let mut pending: HashMap<String, (usize, Option<u64>)> = HashMap::new();
    let mut constant_sizes: HashMap<String, usize> = HashMap::new();

    fn drop_ref(
        name: &str,
        refs: &mut HashMap<String, usize>,
        count: &mut [u64],
        t: &mut Trace,
    ) -> Option<()> {
        let s = refs.remove(name)?;
        count[s] -= 1;
        if count[s] == 0 {
            t.steps.push(Step::Free(s));
        }
        Some(())
    }

    for (i, raw) in text.lines().enumerate() {
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
        let l = Line { n: i + 1, v: &v };
        let ins = l.str("INSTRUCTION")?;
        if ins == "ANNOTATE" {
            match l.str("ANNOTATION")? {
                "START" => started = true,
                "BACKWARD" => backward = true,
                _ => {}
            }
            continue;
        }
        if !started {
            continue;
        }
        let storage_of = |name: &str, refs: &HashMap<String, usize>| -> Result<usize, String> {
            refs.get(name)
                .copied()
                .ok_or_else(|| l.err(format!("{name} is not a live tensor")))
        };
        match ins {
            "CONSTANT" => {
                let name = l.str("NAME")?;
                if refs.contains_key(name) {
                    return Err(l.err(format!("{name} defined twice")));
                }
                t.storages.push(Storage {
                    size: 0,
                    constant: true,
                    producer: None,
                });
                count.push(1);
                refs.insert(name.to_string(), t.storages.len() - 1);
                constant_sizes.insert(name.to_string(), t.storages.len() - 1);
            }
            "MEMORY" => {
                let name = l.str("NAME")?;
                let bytes = l.int("MEMORY", 0..=MAX_BYTES)?;
                if let Some(p) = pending.get_mut(name) {
                    p.1 = Some(bytes as u64);
                } else if let Some(&s) = constant_sizes.get(name) {
                    t.storages[s].size = bytes as u64;
                    constant_sizes.remove(name);
                } else if !refs.contains_key(name) {
                    return Err(l.err(format!("MEMORY for {name}, which is not a tensor")));
                }
            }
            "CALL" | "MUTATE" => {
                let name = l.str("NAME")?.to_string();
                let args = l.strs("ARGS")?;
                let time_ns = l.int("TIME", 0..=MAX_TIME_NS)?;
                let inputs: Vec<usize> = args
                    .iter()
                    .map(|a| storage_of(a, &refs))
                    .collect::<Result<_, _>>()?;
                let mut mutates = Vec::new();
                if ins == "MUTATE" {
                    let idx =
                        l.v.get("MUTATE")
                            .and_then(|m| m.as_array())
                            .ok_or_else(|| l.err("no list field MUTATE"))?;
                    for k in idx {
                        let k = k
                            .as_i64()
                            .or_else(|| k.as_str().and_then(|s| s.parse().ok()))
                            .ok_or_else(|| l.err("MUTATE holds a non-number"))?;
                        let s = usize::try_from(k)
                            .ok()
                            .and_then(|k| inputs.get(k))
                            .ok_or_else(|| l.err(format!("MUTATE index {k} out of range")))?;
                        mutates.push(*s);
                    }
                }
                t.ops.push(Op {
                    mutates: mutates.clone(),
                    backward,
                    ..Op::new(&name, time_ns as f64 * 1e-9, inputs.clone(), Vec::new())
                });
                let op = t.ops.len() - 1;
                t.steps.push(Step::Op(op));
                // Each in-place write makes a new version in the same memory; every name that
                // referred to the old version now refers to the new one.
                let mut seen = Vec::new();
                for old in mutates {
                    if seen.contains(&old) {
                        continue;
                    }
                    seen.push(old);
                    t.storages.push(Storage {
                        size: t.storages[old].size,
                        constant: false,
                        producer: Some(op),
                    });
                    let new = t.storages.len() - 1;
                    t.ops[op].inplace.push((old, new));
                    count.push(count[old]);
                    count[old] = 0;
                    for v in refs.values_mut() {
                        if *v == old {
                            *v = new;
                        }
                    }
                }
                if ins == "CALL" {
                    for r in l.strs("RESULT")? {
                        if refs.contains_key(r) || pending.contains_key(r) {
                            return Err(l.err(format!("result {r} already names a tensor")));
                        }
                        pending.insert(r.to_string(), (op, None));
                    }
                }
            }
            "ALIAS" => {
                let name = l.str("NAME")?;
                // -1: a new tensor; k >= 0: the k-th argument's storage.
                let k = l.int("ALIAS", -1..=i64::MAX)?;
                let (op, size) = pending.remove(name).ok_or_else(|| {
                    l.err(format!("ALIAS for {name}, which is not a pending result"))
                })?;
                if k < 0 {
                    let size =
                        size.ok_or_else(|| l.err(format!("ALIAS for {name} before its MEMORY")))?;
                    t.storages.push(Storage {
                        size,
                        constant: false,
                        producer: Some(op),
                    });
                    count.push(1);
                    let s = t.storages.len() - 1;
                    t.ops[op].outputs.push(s);
                    refs.insert(name.to_string(), s);
                } else {
                    let s = *t.ops[op]
                        .inputs
                        .get(k as usize)
                        .ok_or_else(|| l.err(format!("ALIAS index {k} out of range")))?;
                    count[s] += 1;
                    refs.insert(name.to_string(), s);
                }
            }
            "COPY" => {
                let (dst, src) = (l.str("DST")?, l.str("SRC")?);
                let s = storage_of(src, &refs)?;
                if refs.contains_key(dst) {
                    return Err(l.err(format!("COPY to {dst}, which already names a tensor")));
                }
                count[s] += 1;
                refs.insert(dst.to_string(), s);
            }
            "COPY_FROM" => {
                let (dst, src) = (l.str("DST")?, l.str("SRC")?);
                let s = storage_of(src, &refs)?;
                count[s] += 1;
                if refs.contains_key(dst) {
                    drop_ref(dst, &mut refs, &mut count, &mut t);
                }
                refs.insert(dst.to_string(), s);
            }
            "RELEASE" => {
                let name = l.str("NAME")?;
                if pending.remove(name).is_some() {
                    continue;
                }
                drop_ref(name, &mut refs, &mut count, &mut t).ok_or_else(|| {
                    l.err(format!("RELEASE of {name}, which is not a live tensor"))
                })?;
            }
            other => return Err(l.err(format!("unknown INSTRUCTION {other:?}"))),
        }
    }
    if !started {
        return Err("no ANNOTATE START: not a DTR log of an iteration".into());
    }
    if let Some(name) = pending.keys().next() {
        return Err(format!(
            "result {name} never got its MEMORY and ALIAS lines"
        ));
    }
    t.validate()?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
{"INSTRUCTION":"CONSTANT","NAME":"before"}
{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"w"}
{"INSTRUCTION":"MEMORY","MEMORY":"100","NAME":"w"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"10","NAME":"x"}
{"ARGS":["x","w"],"INSTRUCTION":"CALL","NAME":"conv","RESULT":["y"],"TIME":"2000"}
{"INSTRUCTION":"MEMORY","MEMORY":"40","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"40","NAME":"v"}
{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}
{"DST":"y2","INSTRUCTION":"COPY","SRC":"y"}
{"INSTRUCTION":"RELEASE","NAME":"y"}
{"ARGS":["v"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":"1000"}
{"INSTRUCTION":"MEMORY","MEMORY":"40","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}
{"ARGS":["z","w"],"INSTRUCTION":"MUTATE","NAME":"add_","MUTATE":[1],"TIME":"500"}
{"INSTRUCTION":"RELEASE","NAME":"v"}
{"INSTRUCTION":"RELEASE","NAME":"y2"}
{"INSTRUCTION":"RELEASE","NAME":"z"}
"#;

    #[test]
    fn a_small_log() {
        let t = import_dtr(SMALL).unwrap();
        assert_eq!(
            t.storages.len(),
            5,
            "w, x, y, z (the view and the copy share y), w's new version"
        );
        assert_eq!(t.ops.len(), 4);
        assert_eq!(t.ops[0].outputs, vec![2]);
        assert!(t.ops[1].outputs.is_empty(), "a view makes no storage");
        assert_eq!(t.ops[3].mutates, vec![0], "add_ writes w in place");
        assert_eq!(
            t.ops[3].inplace,
            vec![(0, 4)],
            "as a new version in the same memory"
        );
        assert!(t.ops[3].backward && !t.ops[2].backward);
        // y is freed only when its last reference (view v, copy y2) goes.
        let frees: Vec<usize> = t
            .steps
            .iter()
            .filter_map(|s| {
                if let Step::Free(x) = s {
                    Some(*x)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(frees, vec![2, 3]);
        assert_eq!(t.peak(), 190, "w + x + y + z");
        assert!((t.compute_time() - 3.51e-6).abs() < 1e-12);
    }

    #[test]
    fn numbers_out_of_range_are_refused_not_clamped() {
        for (from, to, line, what) in [
            (
                r#""MEMORY":"40","NAME":"y""#,
                r#""MEMORY":"1e30","NAME":"y""#,
                9,
                "MEMORY 1e30 is out of range",
            ),
            (
                r#""MEMORY":"40","NAME":"y""#,
                r#""MEMORY":"-40","NAME":"y""#,
                9,
                "MEMORY -40 is out of range",
            ),
            (
                r#""MEMORY":"40","NAME":"y""#,
                r#""MEMORY":"1125899906842625","NAME":"y""#,
                9,
                "to 1125899906842624",
            ),
            (
                r#""MEMORY":"40","NAME":"y""#,
                r#""MEMORY":"40.5","NAME":"y""#,
                9,
                "whole numbers",
            ),
            (
                r#""ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y""#,
                r#""ALIAS":"-2","INSTRUCTION":"ALIAS","NAME":"y""#,
                10,
                "ALIAS -2 is out of range",
            ),
            (
                r#""TIME":"2000""#,
                r#""TIME":"99999999999999999999""#,
                8,
                "TIME 99999999999999999999 is out of range",
            ),
            (
                r#""TIME":"2000""#,
                r#""TIME":"-1""#,
                8,
                "TIME -1 is out of range",
            ),
        ] {
            let bad = SMALL.replacen(from, to, 1);
            assert_ne!(bad, SMALL);
            let e = import_dtr(&bad).unwrap_err();
            assert!(
                e.starts_with(&format!("line {line}:")) && e.contains(what),
                "{to}: {e}"
            );
        }
        // Whole numbers in other notations are still read exactly.
        let t = import_dtr(&SMALL.replace(r#""TIME":"2000""#, r#""TIME":"2e3""#)).unwrap();
        assert_eq!(t, import_dtr(SMALL).unwrap());
        // An imported trace whose sizes overflow the planner's arithmetic is refused too.
        let mut t = import_dtr(SMALL).unwrap();
        t.storages[0].size = u64::MAX;
        assert!(t.validate().unwrap_err().contains("2^64"));
    }

    #[test]
    fn errors_name_the_line() {
        for (bad, line, what) in [
            (
                SMALL.replace(r#""ARGS":["x","w"]"#, r#""ARGS":["x","nope"]"#),
                8,
                "nope",
            ),
            (
                SMALL.replace(r#""TIME":"2000""#, r#""TIME":"soon""#),
                8,
                "TIME",
            ),
            (
                SMALL.replace(
                    r#"{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}"#,
                    r#"{"ALIAS":"5","INSTRUCTION":"ALIAS","NAME":"v"}"#,
                ),
                13,
                "ALIAS index",
            ),
            (
                SMALL.replace(
                    r#"{"INSTRUCTION":"RELEASE","NAME":"z"}"#,
                    r#"{"INSTRUCTION":"RELEASE","NAME":"q"}"#,
                ),
                23,
                "RELEASE",
            ),
            (
                SMALL.replace(
                    r#"{"DST":"y2","INSTRUCTION":"COPY","SRC":"y"}"#,
                    "{not json",
                ),
                14,
                "not JSON",
            ),
        ] {
            let e = import_dtr(&bad).unwrap_err();
            assert!(
                e.starts_with(&format!("line {line}:")) && e.contains(what),
                "{e}"
            );
        }
        assert!(import_dtr("").unwrap_err().contains("START"));
    }

    /// Mangled logs: every cut, every deleted line, random byte damage. Errors, never panics.
    #[test]
    fn importer_never_panics_on_damaged_input() {
        let lines: Vec<&str> = SMALL.lines().collect();
        for i in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(i);
            let _ = import_dtr(&v.join("\n"));
            let _ = import_dtr(&lines[..i].join("\n"));
        }
        let mut seed = 12345u64;
        let bytes = SMALL.as_bytes();
        for _ in 0..3000 {
            let mut b = bytes.to_vec();
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % b.len() as u64) as usize;
                const NOISE: &[u8] = b"{}[]\":,-0123456789aZ \n";
                b[at] = NOISE[(seed >> 32) as usize % NOISE.len()];
            }
            let _ = import_dtr(&String::from_utf8_lossy(&b));
        }
    }

    #[test]
    fn the_four_dtr_logs_import() {
        let logs = crate::testdata::dtr_logs();
        if logs.is_empty() {
            return;
        }
        let mut seen = 0;
        for p in logs {
            let t = import_dtr(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(t.ops.len() > 100 && t.peak() > 1 << 30, "{}", p.display());
            seen += 1;
        }
        assert_eq!(seen, 4);
    }
}
