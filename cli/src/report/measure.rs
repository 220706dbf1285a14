//! What the trace itself shows: memory allocated and on the device over time, each tensor's
//! residency, the policy's decisions, calls and device time by kind. Times are on the rebuilt
//! device clock ([`super::clock`]) when the trace is timed, else on the host's (milliseconds
//! since the first record).
//!
//! On the device clock an eviction's memory leaves when its copy is done and a restore's
//! arrives when its copy starts (the shim maps it then); a drop leaves and a recomputation
//! arrives where they stand, and a tensor whose memory went comes back at the first call that
//! touches it without a restore (its overwrite maps it afresh). Allocations and frees stand where the compute engine is when the
//! program makes them.

use super::clock::{Cause, Clock};
use super::{MAX_ROWS, u};
use crate::svg::{Marker, Row, State, bytes};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Record kinds that are a policy's decisions, and the marker each shows as.
pub fn decision_marker(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "evict" | "swap_out" => "evict",
        "restore" | "prefetch" | "swap_in" => "prefetch",
        "drop" => "drop",
        "recompute" => "recompute",
        "stall" => "stall",
        _ => return None,
    })
}

/// One decision the run recorded.
pub struct Decision {
    pub seq: u64,
    pub ms: f64,
    pub kind: String,
    pub alloc: Option<u64>,
    pub bytes: u64,
}

pub struct Measured {
    /// (ms, allocated bytes, bytes on the device), in time order.
    pub points: Vec<(f64, f64, f64)>,
    pub markers: Vec<Marker>,
    /// (size, row, moved by the policy).
    pub rows: Vec<(u64, Row, bool)>,
    pub end_ms: f64,
    /// The most the program had allocated, and the most that was on the device.
    pub peak: u64,
    pub peak_on_device: u64,
    pub decisions: Vec<Decision>,
    pub calls_by_kind: BTreeMap<String, u64>,
    pub device_ms_by_kind: BTreeMap<String, f64>,
    pub header: Option<Value>,
    pub records: usize,
    /// Why the trace ends before its program did, when its writer cut it.
    pub cut: Option<String>,
    /// Whether times are on the device's clock (else the host's).
    pub device_clock: bool,
}

struct Track {
    row: usize,
    state: State,
    since: f64,
    size: u64,
}

/// Measures `recs` (sorted by `seq`) on `clock` when there is one; `names` labels the rows.
pub fn measure(
    recs: &[Value],
    cut: Option<String>,
    clock: Option<&Clock>,
    names: &HashMap<u64, String>,
) -> Measured {
    let t0 = recs.iter().filter_map(|r| u(r, "t_ns")).min().unwrap_or(0);
    let host_ms = |r: &Value| (u(r, "t_ns").unwrap_or(t0).saturating_sub(t0)) as f64 / 1e6;
    let mut timing: HashMap<u64, f64> = HashMap::new();
    for r in recs {
        if r["kind"] == "timing"
            && let (Some(of), Some(d)) = (u(r, "of"), r.get("device_ms").and_then(Value::as_f64))
        {
            timing.insert(of, d);
        }
    }
    let end_ms = match clock {
        Some(c) => c.end,
        None => recs.iter().map(host_ms).fold(0.0, f64::max),
    };
    let mut m = Measured {
        points: Vec::new(),
        markers: Vec::new(),
        rows: Vec::new(),
        end_ms,
        peak: 0,
        peak_on_device: 0,
        decisions: Vec::new(),
        calls_by_kind: BTreeMap::new(),
        device_ms_by_kind: BTreeMap::new(),
        header: None,
        records: recs.len(),
        cut,
        device_clock: clock.is_some(),
    };
    // Changes of (allocated, on the device) at a time, in record order; sorted by time below.
    let mut changes: Vec<(f64, i64, i64)> = Vec::new();
    let mut live: HashMap<u64, Track> = HashMap::new();
    let mut last_t = 0.0f64;
    let close = |rows: &mut Vec<(u64, Row, bool)>, tr: &Track, t: f64| {
        if t > tr.since || tr.state != State::Resident {
            rows[tr.row]
                .1
                .segments
                .push((tr.since, t.max(tr.since), tr.state));
        }
    };
    for r in recs {
        let kind = r["kind"].as_str().unwrap_or_default();
        let seq = u(r, "seq").unwrap_or(u64::MAX);
        let t = match clock {
            Some(c) => c.at.get(&seq).copied().unwrap_or(last_t),
            None => host_ms(r),
        };
        last_t = t;
        match kind {
            "header" => {
                m.header = Some(r.clone());
                continue;
            }
            "timing" => continue,
            _ => {}
        }
        *m.calls_by_kind.entry(kind.to_string()).or_default() += 1;
        if let Some(d) = timing.get(&seq) {
            *m.device_ms_by_kind.entry(kind.to_string()).or_default() += d;
        }
        let alloc = u(r, "alloc");
        match kind {
            "alloc" if u(r, "result") == Some(0) && alloc.is_some_and(|a| a != 0) => {
                let a = alloc.unwrap();
                let size = u(r, "size").unwrap_or(0);
                let label = names.get(&a).cloned().unwrap_or_else(|| {
                    format!(
                        "allocation {a} ({}, {})",
                        r["api"].as_str().unwrap_or("alloc"),
                        bytes(size as f64)
                    )
                });
                m.rows.push((
                    size,
                    Row {
                        label,
                        size,
                        segments: Vec::new(),
                    },
                    false,
                ));
                live.insert(
                    a,
                    Track {
                        row: m.rows.len() - 1,
                        state: State::Resident,
                        since: t,
                        size,
                    },
                );
                changes.push((t, size as i64, size as i64));
            }
            "free" if u(r, "result") == Some(0) => {
                if let Some(tr) = alloc.and_then(|a| live.remove(&a)) {
                    close(&mut m.rows, &tr, t);
                    let on = matches!(
                        tr.state,
                        State::Resident | State::MovingIn | State::MovingOut
                    );
                    changes.push((t, -(tr.size as i64), if on { -(tr.size as i64) } else { 0 }));
                }
            }
            _ => {}
        }
        // A call that touches a tensor whose memory went (dropped, or on the host with no
        // restore before the call: its next access overwrites it) maps it again.
        for a in r["touches"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .filter_map(|t| u(t, "alloc"))
        {
            if let Some(tr) = live.get_mut(&a)
                && matches!(tr.state, State::Dropped | State::OnHost)
            {
                let from = t.max(tr.since);
                close(&mut m.rows, tr, from);
                tr.state = State::Resident;
                tr.since = from;
                changes.push((from, 0, tr.size as i64));
            }
        }
        let Some(mk) = decision_marker(kind) else {
            continue;
        };
        let nbytes = u(r, "bytes")
            .or_else(|| alloc.and_then(|a| live.get(&a).map(|t| t.size)))
            .unwrap_or(0);
        m.decisions.push(Decision {
            seq,
            ms: t,
            kind: kind.to_string(),
            alloc,
            bytes: nbytes,
        });
        let name = alloc
            .and_then(|a| names.get(&a).cloned())
            .unwrap_or_else(|| bytes(nbytes as f64));
        m.markers.push(Marker {
            x: t,
            kind: mk,
            label: format!("{kind} {name} at {t:.3} ms"),
        });
        // The copy's span: on the clock, else from the record's time for its device time.
        let span = clock
            .and_then(|c| c.span.get(&seq).copied())
            .unwrap_or_else(|| {
                let d = r
                    .get("device_ms")
                    .and_then(Value::as_f64)
                    .or_else(|| timing.get(&seq).copied())
                    .unwrap_or(0.0);
                (t, t + d)
            });
        let Some(tr) = alloc.and_then(|a| live.get_mut(&a)) else {
            continue;
        };
        let was_on = matches!(
            tr.state,
            State::Resident | State::MovingIn | State::MovingOut
        );
        let (moving, then) = match mk {
            "evict" => (Some(State::MovingOut), State::OnHost),
            "prefetch" => (Some(State::MovingIn), State::Resident),
            "drop" => (None, State::Dropped),
            "recompute" => (None, State::Resident),
            _ => (None, tr.state),
        };
        if then == tr.state {
            continue;
        }
        let from = span.0.max(tr.since);
        close(&mut m.rows, tr, from);
        m.rows[tr.row].2 = true;
        let mut since = from;
        if let Some(st) = moving {
            let to = span.1.max(from);
            m.rows[tr.row].1.segments.push((from, to, st));
            since = to;
        }
        tr.state = then;
        tr.since = since;
        let size = tr.size as i64;
        match (was_on, then) {
            // Gone when the copy out is done (at once without a clock: the record is written
            // then).
            (true, State::OnHost) => {
                changes.push((if clock.is_some() { since } else { t }, 0, -size))
            }
            (true, State::Dropped) => changes.push((from, 0, -size)),
            (false, State::Resident) => changes.push((from, 0, size)),
            _ => {}
        }
    }
    if let Some(c) = clock {
        for &(seq, ms, cause) in &c.stalls {
            let at = c.at.get(&seq).copied().unwrap_or(0.0);
            m.markers.push(Marker {
                x: at - ms,
                kind: "stall",
                label: format!("stalled {ms:.3} ms, {} (until {at:.3} ms)", cause.name()),
            });
        }
    }
    let end = m.end_ms;
    for tr in live.values() {
        close(&mut m.rows, tr, end);
    }
    // In time order (stable: records at one time keep their order).
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut allocated, mut on_device) = (0i64, 0i64);
    m.points.push((0.0, 0.0, 0.0));
    for (t, da, dd) in changes {
        allocated += da;
        on_device += dd;
        m.peak = m.peak.max(allocated.max(0) as u64);
        m.peak_on_device = m.peak_on_device.max(on_device.max(0) as u64);
        let p = (t, allocated as f64, on_device as f64);
        match m.points.last_mut() {
            Some(last) if last.0 == t => *last = p,
            _ => m.points.push(p),
        }
    }
    m
}

/// The tensors the residency chart shows: those the policy moved first, then the largest.
pub fn pick_rows(mut rows: Vec<(u64, Row, bool)>) -> Vec<Row> {
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(b.0.cmp(&a.0)));
    rows.truncate(MAX_ROWS);
    rows.into_iter().map(|r| r.1).collect()
}

/// The rows within `from .. to`, shifted to start at 0: those with an interval there, the ones
/// the policy moved there first, then the largest.
pub fn window_rows(rows: &[(u64, Row, bool)], from: f64, to: f64) -> Vec<Row> {
    let mut out: Vec<(u64, Row, bool)> = Vec::new();
    for (size, row, _) in rows {
        let segments: Vec<(f64, f64, State)> = row
            .segments
            .iter()
            .filter(|s| s.1 >= from && s.0 <= to)
            .map(|s| (s.0.max(from) - from, s.1.min(to) - from, s.2))
            .collect();
        if segments.is_empty() {
            continue;
        }
        let moved = segments.iter().any(|s| s.2 != State::Resident);
        out.push((
            *size,
            Row {
                label: row.label.clone(),
                size: row.size,
                segments,
            },
            moved,
        ));
    }
    pick_rows(out)
}

/// The points within `from .. to`, shifted to start at 0, starting with the value at `from`.
pub fn window_points(points: &[(f64, f64, f64)], from: f64, to: f64) -> Vec<(f64, f64, f64)> {
    let before = points
        .iter()
        .take_while(|p| p.0 <= from)
        .last()
        .copied()
        .unwrap_or((0.0, 0.0, 0.0));
    let mut out = vec![(0.0, before.1, before.2)];
    out.extend(
        points
            .iter()
            .filter(|p| p.0 > from && p.0 <= to)
            .map(|p| (p.0 - from, p.1, p.2)),
    );
    out
}

/// Stalls by cause over the whole run, in ms.
pub fn stalls_by_cause(clock: &Clock) -> BTreeMap<Cause, f64> {
    let mut out = BTreeMap::new();
    for &(_, ms, cause) in &clock.stalls {
        *out.entry(cause).or_default() += ms;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":1,"pid":1,"policy":"lru","marmoset":"0.1.0"}
{"seq":1,"t_ns":1000000,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":1,"ptr":4096,"size":1000,"result":0}
{"seq":2,"t_ns":2000000,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":2,"ptr":8192,"size":500,"result":0}
{"seq":3,"t_ns":3000000,"tid":1,"kind":"evict","alloc":1,"bytes":1000,"stream":9,"device_ms":0.5}
{"seq":4,"t_ns":5000000,"tid":1,"kind":"restore","alloc":1,"bytes":1000,"stream":9}
{"seq":5,"t_ns":6000000,"tid":1,"kind":"free","api":"cudaFree","ptr":4096,"alloc":1,"size":1000,"result":0}
"#;

    fn measured(text: &str) -> Measured {
        let (recs, cut) = super::super::records(text).unwrap();
        let clock = super::super::clock::rebuild(&recs, &|_, _| false);
        measure(&recs, cut, clock.as_ref(), &HashMap::new())
    }

    #[test]
    fn memory_and_residency_follow_the_records_on_the_host_clock_without_timings() {
        let m = measured(TRACE);
        assert!(!m.device_clock);
        assert_eq!(m.peak, 1500);
        assert_eq!(m.peak_on_device, 1500);
        let pts: Vec<(f64, f64)> = m.points.iter().map(|p| (p.1, p.2)).collect();
        assert_eq!(
            pts,
            [
                (0., 0.),
                (1000., 1000.),
                (1500., 1500.),
                (1500., 500.),
                (1500., 1500.),
                (500., 500.)
            ]
        );
        assert_eq!(m.decisions.len(), 2);
        let row = &m.rows.iter().find(|r| r.0 == 1000).unwrap().1;
        let states: Vec<State> = row.segments.iter().map(|s| s.2).collect();
        assert_eq!(
            states,
            [
                State::Resident,
                State::MovingOut,
                State::OnHost,
                State::MovingIn,
                State::Resident
            ]
        );
        assert_eq!(row.segments[1], (3.0, 3.5, State::MovingOut));
    }

    #[test]
    fn on_the_device_clock_memory_leaves_when_the_copy_out_is_done() {
        let text = r#"{"seq":1,"t_ns":0,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":1,"ptr":4096,"size":1000,"result":0}
{"seq":2,"t_ns":1,"tid":1,"kind":"cudnn","api":"cudnnActivationForward","touches":[{"alloc":1,"access":"w"}],"result":0}
{"seq":3,"t_ns":2,"tid":1,"kind":"timing","of":2,"device_ms":2.0}
{"seq":4,"t_ns":3,"tid":1,"kind":"evict","alloc":1,"bytes":1000,"device_ms":3.0}
{"seq":5,"t_ns":4,"tid":1,"kind":"restore","alloc":1,"bytes":1000}
{"seq":6,"t_ns":5,"tid":1,"kind":"timing","of":5,"device_ms":1.0}
"#;
        let m = measured(text);
        assert!(m.device_clock);
        // Evicted from 2 to 5 ms (after the call that wrote it), back from 5 to 6.
        let pts: Vec<(f64, f64)> = m.points.iter().map(|p| (p.0, p.2)).collect();
        assert_eq!(pts, [(0.0, 1000.0), (5.0, 1000.0)]);
        let row = &m.rows[0].1;
        assert_eq!(
            row.segments,
            [
                (0.0, 2.0, State::Resident),
                (2.0, 5.0, State::MovingOut),
                (5.0, 5.0, State::OnHost),
                (5.0, 6.0, State::MovingIn)
            ]
        );
        assert_eq!(m.end_ms, 6.0);
    }

    #[test]
    fn a_window_shifts_and_clips() {
        let rows = vec![(
            10,
            Row {
                label: "t".into(),
                size: 10,
                segments: vec![(0.0, 5.0, State::Resident), (5.0, 9.0, State::OnHost)],
            },
            true,
        )];
        let w = window_rows(&rows, 4.0, 6.0);
        assert_eq!(
            w[0].segments,
            [(0.0, 1.0, State::Resident), (1.0, 2.0, State::OnHost)]
        );
        let p = window_points(
            &[(0.0, 0.0, 0.0), (1.0, 5.0, 5.0), (5.0, 7.0, 3.0)],
            2.0,
            6.0,
        );
        assert_eq!(p, [(0.0, 5.0, 5.0), (3.0, 7.0, 3.0)]);
    }
}
