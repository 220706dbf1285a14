//! `marmoset export --chrome TRACE -o trace.json`: the Chrome trace event format (JSON object
//! form) that Perfetto and chrome://tracing open. Tracks: one per compute stream, the two copy
//! engines (host to device, device to host), the host threads (allocations, frees and
//! synchronisations as instants); memory in use as a counter track.
//!
//! A trace has host times for calls and device durations (with MARMOSET_TRACE_TIMING=1), not
//! device start times: each operation is placed at its call's host time or when its track's
//! previous operation ends, whichever is later, as a stream runs its queue in order.

use crate::report::{records, u};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const PID: u64 = 1;
/// Track ids: copy engines, then compute streams, then host threads.
const H2D_TID: u64 = 1;
const D2H_TID: u64 = 2;
const STREAM_TID0: u64 = 100;
const HOST_TID0: u64 = 10_000;

pub fn export(trace: &Path, output: &Path, simulated: bool) -> Result<std::process::ExitCode> {
    let text = std::fs::read_to_string(trace)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    let (recs, cut) = records(&text).map_err(|e| anyhow::anyhow!("{}: {e:#}", trace.display()))?;
    crate::note_cut(trace, cut.as_deref());
    crate::note_siblings(trace);
    let v = chrome(&recs, simulated);
    let n = v["traceEvents"].as_array().map_or(0, Vec::len);
    std::fs::write(output, serde_json::to_string(&v)?)
        .with_context(|| format!("cannot write {}", output.display()))?;
    eprintln!(
        "{}: {n} events (open it in Perfetto: ui.perfetto.dev, or chrome://tracing)",
        output.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// The Chrome trace of a run's records (sorted by `seq`).
pub fn chrome(recs: &[Value], simulated: bool) -> Value {
    let t0 = recs.iter().filter_map(|r| u(r, "t_ns")).min().unwrap_or(0);
    let us = |r: &Value| (u(r, "t_ns").unwrap_or(t0).saturating_sub(t0)) as f64 / 1e3;
    let mut timing: HashMap<u64, f64> = HashMap::new();
    for r in recs {
        if r["kind"] == "timing"
            && let (Some(of), Some(d)) = (u(r, "of"), r.get("device_ms").and_then(Value::as_f64))
        {
            timing.insert(of, d * 1e3);
        }
    }
    let mut streams: BTreeMap<u64, u64> = BTreeMap::new();
    let mut hosts: BTreeMap<u64, u64> = BTreeMap::new();
    // Where each track is free again (µs).
    let mut free_at: HashMap<u64, f64> = HashMap::new();
    let mut ev: Vec<Value> = Vec::new();
    let mut live: HashMap<u64, (u64, bool)> = HashMap::new();
    let (mut allocated, mut on_device) = (0u64, 0u64);
    for r in recs {
        let kind = r["kind"].as_str().unwrap_or_default();
        if matches!(kind, "header" | "timing") {
            continue;
        }
        let t = us(r);
        let seq = u(r, "seq").unwrap_or(0);
        let name = r["api"].as_str().unwrap_or(kind).to_string();
        let ok = u(r, "result").is_none_or(|c| c == 0);
        let dur = timing
            .get(&seq)
            .copied()
            .or_else(|| r.get("device_ms").and_then(Value::as_f64).map(|d| d * 1e3));
        // The device track of an operation, if it is one.
        let track = match (kind, r["dir"].as_str()) {
            ("copy", Some("h2d")) | ("restore" | "prefetch", _) => Some(H2D_TID),
            ("copy", Some("d2h")) | ("evict", _) => Some(D2H_TID),
            ("copy" | "memset" | "launch" | "cudnn", _) => {
                let s = u(r, "stream").unwrap_or(0);
                let n = streams.len() as u64;
                Some(*streams.entry(s).or_insert(STREAM_TID0 + n))
            }
            _ => None,
        };
        match (track, dur) {
            (Some(tid), Some(d)) if ok => {
                let start = t.max(free_at.get(&tid).copied().unwrap_or(0.0));
                free_at.insert(tid, start + d);
                let mut args = json!({"seq": seq});
                for k in ["size", "bytes", "alloc", "algo", "workspace", "stream"] {
                    if let Some(x) = r.get(k).filter(|x| !x.is_null()) {
                        args[k] = x.clone();
                    }
                }
                ev.push(
                    json!({"name": name, "cat": kind, "ph": "X", "ts": start, "dur": d,
                               "pid": PID, "tid": tid, "args": args}),
                );
            }
            _ => {
                let tid_os = u(r, "tid").unwrap_or(0);
                let n = hosts.len() as u64;
                let tid = *hosts.entry(tid_os).or_insert(HOST_TID0 + n);
                ev.push(json!({"name": name, "cat": kind, "ph": "i", "s": "t", "ts": t,
                               "pid": PID, "tid": tid, "args": {"seq": seq, "result": r.get("result").cloned().unwrap_or(Value::Null)}}));
            }
        }
        // Memory in use: allocated, and on the device (less what a policy moved out).
        let before = (allocated, on_device);
        let alloc = u(r, "alloc");
        match kind {
            "alloc" if ok && alloc.is_some_and(|a| a != 0) => {
                let size = u(r, "size").unwrap_or(0);
                live.insert(alloc.unwrap(), (size, true));
                allocated += size;
                on_device += size;
            }
            "free" if ok => {
                if let Some((size, here)) = alloc.and_then(|a| live.remove(&a)) {
                    allocated -= size;
                    if here {
                        on_device -= size;
                    }
                }
            }
            "evict" | "drop" | "restore" | "prefetch" | "recompute" => {
                let coming = matches!(kind, "restore" | "prefetch" | "recompute");
                if let Some(e) = alloc.and_then(|a| live.get_mut(&a))
                    && e.1 != coming
                {
                    e.1 = coming;
                    if coming {
                        on_device += e.0;
                    } else {
                        on_device -= e.0;
                    }
                }
            }
            _ => {}
        }
        if (allocated, on_device) != before {
            ev.push(
                json!({"name": "memory", "ph": "C", "ts": t, "pid": PID, "tid": 0,
                           "args": {"allocated": allocated, "on_device": on_device}}),
            );
        }
    }
    // Chrome trace readers sort by time; the rules ask for order within a track.
    ev.sort_by(|a, b| {
        a["ts"]
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&b["ts"].as_f64().unwrap_or(0.0))
    });
    let mut meta = vec![
        json!({"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
               "args": {"name": if simulated { "marmoset trace (simulated GPU)" } else { "marmoset trace" }}}),
        json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": H2D_TID, "args": {"name": "copy engine: host to device"}}),
        json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": D2H_TID, "args": {"name": "copy engine: device to host"}}),
    ];
    for (s, tid) in &streams {
        meta.push(
            json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                         "args": {"name": format!("stream {s:#x}")}}),
        );
    }
    for (os, tid) in &hosts {
        meta.push(
            json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                         "args": {"name": format!("host thread {os}")}}),
        );
    }
    for (i, tid) in [H2D_TID, D2H_TID]
        .into_iter()
        .chain(streams.values().copied())
        .chain(hosts.values().copied())
        .enumerate()
    {
        meta.push(
            json!({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                         "args": {"sort_index": i}}),
        );
    }
    meta.extend(ev);
    json!({
        "traceEvents": meta,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": "marmoset export --chrome",
            "device_times": if simulated { "simulated" } else { "measured" },
            "placement": "host call time or the track's previous end, whichever is later",
        },
    })
}
