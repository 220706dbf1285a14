//! `marmoset inspect`: a summary of a trace: calls by kind and API, bytes allocated, the peak
//! memory load and when it happened, the largest allocations, device time by kind, and the
//! kernels that took the most of it.

use crate::trace::{Event, Record};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub records: usize,
    pub by_kind: BTreeMap<String, u64>,
    pub by_api: BTreeMap<String, u64>,
    pub failed_calls: u64,
    pub allocations: u64,
    pub bytes_allocated: u64,
    /// Largest sum of live allocation sizes, and the record (seq, host ns) where it was reached.
    pub peak_load: u64,
    pub peak_at: Option<(u64, u64)>,
    /// (size, api, seq), largest first, at most five.
    pub largest: Vec<(u64, String, u64)>,
    /// Device milliseconds by kind, from timing records.
    pub device_ms: BTreeMap<String, f64>,
    pub frees_of_unknown_pointers: u64,
    /// Kernels the device ran: the program's successful launches, and the kernels cuBLAS /
    /// cuBLASLt ran inside successful GEMM calls (as SIMGPU_REPORT splits `kernels` into
    /// `fatbin_kernels` and `library_kernels`).
    pub launches: u64,
    pub library_kernels: u64,
    /// Memory virtualisation: bytes moved to host (evictions) and back (restores), and the
    /// device time of the eviction copies (the host waits for them).
    pub evicted_bytes: u64,
    pub restored_bytes: u64,
    pub evict_ms: f64,
    /// The kernels that took the most device time: (name, launches, device ms), at most eight;
    /// named by the trace's `kernel` records, else by handle.
    pub top_kernels: Vec<(String, u64, f64)>,
    /// The in-process planner's plans per iteration kind: plans made (cache misses), plans of
    /// a kind seen before used again (hits), the distinct kinds, and the host time planning.
    pub plans_made: u64,
    pub plans_reused: u64,
    pub kinds: u64,
    pub planning_ms: f64,
    /// The plans made whose search its time bound cut (they depend on the host's speed).
    pub plans_timed_out: u64,
}

pub fn summarize(records: &[Record]) -> Summary {
    let mut s = Summary {
        records: records.len(),
        ..Summary::default()
    };
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut load = 0u64;
    let mut kind_of: HashMap<u64, &'static str> = HashMap::new();
    let mut allocs: Vec<(u64, String, u64)> = Vec::new();
    // Per kernel handle: launches and device ms; and each launch's handle by seq.
    let mut kernels: HashMap<u64, (u64, f64)> = HashMap::new();
    let mut func_of: HashMap<u64, u64> = HashMap::new();
    let mut names: HashMap<u64, &str> = HashMap::new();
    let mut kinds: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for r in records {
        let kind = r.event.kind();
        if let Event::Timing { of, device_ms } = &r.event {
            if let Some(k) = kind_of.get(of) {
                *s.device_ms.entry(k.to_string()).or_default() += device_ms;
            }
            if let Some(f) = func_of.get(of) {
                kernels.entry(*f).or_default().1 += device_ms;
            }
            continue;
        }
        if let Event::Kernel { func, name } = &r.event {
            names.insert(*func, name);
        }
        // Not calls: the header, kernels' names, and the lineage written ahead of a call.
        if kind == "header" || kind == "lineage" || kind == "kernel" {
            continue;
        }
        *s.by_kind.entry(kind.into()).or_default() += 1;
        if let Some(api) = r.event.api() {
            *s.by_api.entry(api.into()).or_default() += 1;
        }
        kind_of.insert(r.seq, kind);
        match &r.event {
            Event::Alloc {
                alloc,
                size,
                result,
                api,
                ..
            } if *result == 0 => {
                s.allocations += 1;
                s.bytes_allocated += size;
                live.insert(*alloc, *size);
                load += size;
                allocs.push((*size, api.clone(), r.seq));
                if load > s.peak_load {
                    s.peak_load = load;
                    s.peak_at = Some((r.seq, r.t_ns));
                }
            }
            Event::Free { alloc, .. } => match alloc.and_then(|a| live.remove(&a)) {
                Some(size) => load -= size,
                None => s.frees_of_unknown_pointers += 1,
            },
            Event::Evict {
                bytes, device_ms, ..
            } => {
                s.evicted_bytes += bytes;
                s.evict_ms += device_ms;
            }
            Event::Restore { bytes, .. } => s.restored_bytes += bytes,
            Event::Plan {
                reused,
                iteration_kind,
                planning_ms,
                timed_out,
                ..
            } => {
                if *reused {
                    s.plans_reused += 1;
                } else {
                    s.plans_made += 1;
                    s.plans_timed_out += u64::from(*timed_out);
                }
                s.planning_ms += planning_ms;
                if let Some(k) = iteration_kind {
                    kinds.insert(*k);
                }
            }
            Event::NoPlan { planning_ms, .. } => {
                s.plans_made += 1;
                s.planning_ms += planning_ms;
            }
            Event::Launch {
                result: 0, func, ..
            } => {
                s.launches += 1;
                kernels.entry(*func).or_default().0 += 1;
                func_of.insert(r.seq, *func);
            }
            Event::Cublas {
                kernels, result: 0, ..
            } => s.library_kernels += u64::from(*kernels),
            _ => {}
        }
        if r.event.result() != 0 {
            s.failed_calls += 1;
        }
    }
    allocs.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
    allocs.truncate(5);
    s.largest = allocs;
    let mut top: Vec<(String, u64, f64)> = kernels
        .into_iter()
        .map(|(f, (n, ms))| {
            let name = names.get(&f).map_or_else(
                || format!("kernel {f:#x}"),
                |n| crate::shimtrace::short_kernel_name(n),
            );
            (name, n, ms)
        })
        .collect();
    top.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    top.truncate(8);
    s.top_kernels = top;
    s.kinds = kinds.len() as u64;
    s
}

fn size(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls: u64 = self.by_kind.values().sum();
        writeln!(
            f,
            "{} records, {calls} calls ({} failed)",
            self.records, self.failed_calls
        )?;
        writeln!(f, "calls by kind:")?;
        for (k, n) in &self.by_kind {
            writeln!(f, "  {k:<8} {n}")?;
        }
        writeln!(f, "calls by API:")?;
        let mut apis: Vec<_> = self.by_api.iter().collect();
        apis.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (api, n) in apis {
            writeln!(f, "  {api:<48} {n}")?;
        }
        writeln!(
            f,
            "kernels: {} ({} launches, {} in cuBLAS/cuBLASLt calls)",
            self.launches + self.library_kernels,
            self.launches,
            self.library_kernels
        )?;
        writeln!(
            f,
            "allocations: {} ({} in all)",
            self.allocations,
            size(self.bytes_allocated)
        )?;
        match self.peak_at {
            Some((seq, t)) => writeln!(
                f,
                "peak memory load: {} at record {seq} ({:.3} ms after start)",
                size(self.peak_load),
                t as f64 / 1e6
            )?,
            None => writeln!(f, "peak memory load: 0 B")?,
        }
        let plans = self.plans_made + self.plans_reused;
        if plans > 0 {
            writeln!(
                f,
                "plans: {plans} for {} iteration kind(s): {} planned, {} reused from the cache ({:.0}% hits), {:.1} ms planning (host){}",
                self.kinds,
                self.plans_made,
                self.plans_reused,
                100.0 * self.plans_reused as f64 / plans as f64,
                self.planning_ms,
                match self.plans_timed_out {
                    0 => String::new(),
                    n => format!("; {n} cut by the time bound (host-dependent)"),
                }
            )?;
        }
        if self.frees_of_unknown_pointers > 0 {
            writeln!(
                f,
                "frees of pointers not allocated in the trace: {}",
                self.frees_of_unknown_pointers
            )?;
        }
        writeln!(f, "largest allocations:")?;
        for (b, api, seq) in &self.largest {
            writeln!(f, "  {:>12}  {api} (record {seq})", size(*b))?;
        }
        if self.evicted_bytes + self.restored_bytes > 0 {
            writeln!(
                f,
                "memory moved: {} to host in {} evictions ({:.3} ms of eviction copies on the swap-out stream), {} back in {} restores",
                size(self.evicted_bytes),
                self.by_kind.get("evict").copied().unwrap_or(0),
                self.evict_ms,
                size(self.restored_bytes),
                self.by_kind.get("restore").copied().unwrap_or(0),
            )?;
        }
        if self.device_ms.is_empty() {
            writeln!(
                f,
                "device time: not measured (run with MARMOSET_TRACE_TIMING=1)"
            )?;
        } else {
            writeln!(f, "device time by kind:")?;
            for (k, ms) in &self.device_ms {
                writeln!(f, "  {k:<8} {ms:.3} ms")?;
            }
            if !self.top_kernels.is_empty() {
                writeln!(f, "kernels by device time:")?;
                for (name, n, ms) in &self.top_kernels {
                    writeln!(f, "  {ms:>10.3} ms {n:>7} x  {name}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::read;

    #[test]
    fn peak_load_and_counts() {
        let text = r#"
{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":1,"pid":1,"policy":"none","marmoset":"0"}
{"seq":1,"t_ns":10,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":1,"ptr":100,"size":1000,"result":0}
{"seq":2,"t_ns":20,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":2,"ptr":5000,"size":3000,"result":0}
{"seq":3,"t_ns":30,"tid":1,"kind":"free","api":"cudaFree","ptr":100,"alloc":1,"size":1000,"result":0}
{"seq":4,"t_ns":40,"tid":1,"kind":"alloc","api":"cuMemAlloc_v2","alloc":3,"ptr":100,"size":500,"result":0}
{"seq":5,"t_ns":50,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":0,"ptr":0,"size":99999,"result":2}
{"seq":12,"t_ns":55,"tid":1,"kind":"kernel","func":7,"name":"void scale<float>(float*, int)"}
{"seq":6,"t_ns":60,"tid":1,"kind":"launch","api":"cudaLaunchKernel","func":7,"grid":[1,1,1],"block":[1,1,1],"touches":[],"result":0}
{"seq":7,"t_ns":70,"tid":1,"kind":"timing","of":6,"device_ms":1.5}
{"seq":8,"t_ns":80,"tid":1,"kind":"free","api":"cudaFree","ptr":77,"result":1}
{"seq":9,"t_ns":90,"tid":1,"kind":"cublas","api":"cublasGemmEx","m":4,"n":4,"k":4,"batch":1,"kernels":1,"touches":[],"result":0}
{"seq":10,"t_ns":95,"tid":1,"kind":"cublas","api":"cublasGemmEx","m":0,"n":4,"k":4,"batch":1,"kernels":0,"touches":[],"result":0}
{"seq":11,"t_ns":99,"tid":1,"kind":"cublas","api":"cublasLtMatmul","m":4,"n":4,"k":4,"batch":1,"kernels":1,"touches":[],"result":7}
"#;
        let s = summarize(&read(text).unwrap());
        assert_eq!(s.peak_load, 4000);
        assert_eq!(s.peak_at, Some((2, 20)));
        assert_eq!(s.allocations, 3);
        assert_eq!(s.bytes_allocated, 4500);
        assert_eq!(s.by_kind["alloc"], 4);
        assert_eq!(s.by_api["cudaMalloc"], 3);
        assert_eq!(s.failed_calls, 3);
        assert_eq!((s.launches, s.library_kernels), (1, 1));
        assert_eq!(s.by_kind["cublas"], 3);
        assert_eq!(s.frees_of_unknown_pointers, 1);
        assert_eq!(s.largest[0], (3000, "cudaMalloc".to_string(), 2));
        assert_eq!(s.device_ms["launch"], 1.5);
        assert_eq!(s.top_kernels, [("scale<float>".to_string(), 1, 1.5)]);
        assert!(!s.by_kind.contains_key("kernel"), "a name is not a call");
        let text = s.to_string();
        assert!(
            text.contains("peak memory load: 3.91 KiB at record 2"),
            "{text}"
        );
        assert!(
            text.contains("kernels: 2 (1 launches, 1 in cuBLAS/cuBLASLt calls)"),
            "{text}"
        );
    }
}
