//! `marmoset report TRACE -o report.html`: one self-contained HTML page (inline SVG, a little
//! inline script, nothing fetched) showing a run's memory over time against the budget with the
//! policy's events marked, the largest tensors' residency, device time by operation kind, and the
//! plan's decisions (those the policy recorded in the trace; when it recorded none, what
//! `marmoset plan` would do under the budget, simulated).

use crate::svg::{self, Marker, Row, Series, State, bytes, esc};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

pub struct Options<'a> {
    pub trace: &'a Path,
    pub output: &'a Path,
    /// A size, or a fraction of the trace's peak.
    pub budget: Option<&'a str>,
    pub policy: &'a str,
    pub profile: &'a str,
    /// The trace was recorded on the simulated GPU: its device times are simulated.
    pub simulated: bool,
}

/// The most tensors the residency chart shows.
pub const MAX_ROWS: usize = 16;

/// Record kinds that are a policy's decisions (`evict`, `restore` today; the others as the
/// in-process planner writes them), and the marker each shows as.
fn decision_marker(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "evict" | "swap_out" => "evict",
        "restore" | "prefetch" | "swap_in" => "prefetch",
        "drop" => "drop",
        "recompute" => "recompute",
        "stall" => "stall",
        _ => return None,
    })
}

/// What the trace itself shows, on its host-time axis (milliseconds since the first record).
struct Measured {
    /// (ms, allocated bytes, bytes on the device).
    points: Vec<(f64, f64, f64)>,
    markers: Vec<Marker>,
    rows: Vec<(u64, Row, bool)>,
    end_ms: f64,
    peak: u64,
    /// (ms, kind, alloc, bytes) of every decision record.
    decisions: Vec<(f64, String, Option<u64>, u64)>,
    calls_by_kind: BTreeMap<String, u64>,
    device_ms_by_kind: BTreeMap<String, f64>,
    header: Option<Value>,
    records: usize,
    /// Why the trace ends before its program did, when its writer cut it.
    cut: Option<String>,
}

struct Track {
    row: usize,
    state: State,
    since: f64,
    size: u64,
}

pub fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

/// The trace's records as JSON values, sorted by `seq`, read as every reader of traces reads
/// them (`planner::trace::read_lines`: a trace cut by its writer is read up to its last whole
/// record, and the second value says so): record kinds this version does not know (a newer
/// shim's) are kept, not refused; a line that is not a record is an error naming it.
pub fn records(text: &str) -> Result<(Vec<Value>, Option<String>)> {
    let (mut recs, cut) = planner::trace::read_lines(text, |line| {
        let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if u(&v, "seq").is_none() || v.get("kind").and_then(Value::as_str).is_none() {
            return Err("not a Marmoset trace record (no seq or kind)".into());
        }
        Ok(v)
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if recs.is_empty() {
        bail!("the trace is empty");
    }
    recs.sort_by_key(|r| u(r, "seq"));
    Ok((recs, cut))
}

fn measure(text: &str) -> Result<Measured> {
    let (recs, cut) = records(text)?;
    let t0 = recs.iter().filter_map(|r| u(r, "t_ns")).min().unwrap_or(0);
    let ms = |r: &Value| (u(r, "t_ns").unwrap_or(t0).saturating_sub(t0)) as f64 / 1e6;
    let mut timing: HashMap<u64, f64> = HashMap::new();
    for r in &recs {
        if r["kind"] == "timing"
            && let (Some(of), Some(d)) = (u(r, "of"), r.get("device_ms").and_then(Value::as_f64))
        {
            timing.insert(of, d);
        }
    }
    let mut m = Measured {
        points: vec![(0.0, 0.0, 0.0)],
        markers: Vec::new(),
        rows: Vec::new(),
        end_ms: recs.iter().map(&ms).fold(0.0, f64::max),
        peak: 0,
        decisions: Vec::new(),
        calls_by_kind: BTreeMap::new(),
        device_ms_by_kind: BTreeMap::new(),
        header: None,
        records: recs.len(),
        cut,
    };
    let mut live: HashMap<u64, Track> = HashMap::new();
    let (mut allocated, mut on_device) = (0u64, 0u64);
    let close = |rows: &mut Vec<(u64, Row, bool)>, tr: &Track, t: f64| {
        if t > tr.since || tr.state != State::Resident {
            rows[tr.row].1.segments.push((tr.since, t, tr.state));
        }
    };
    for r in &recs {
        let kind = r["kind"].as_str().unwrap_or_default();
        let t = ms(r);
        match kind {
            "header" => {
                m.header = Some(r.clone());
                continue;
            }
            "timing" => continue,
            _ => {}
        }
        *m.calls_by_kind.entry(kind.to_string()).or_default() += 1;
        if let Some(d) = timing.get(&u(r, "seq").unwrap_or(u64::MAX)) {
            *m.device_ms_by_kind.entry(kind.to_string()).or_default() += d;
        }
        let alloc = u(r, "alloc");
        match kind {
            "alloc" if u(r, "result") == Some(0) && alloc.is_some_and(|a| a != 0) => {
                let size = u(r, "size").unwrap_or(0);
                let api = r["api"].as_str().unwrap_or("alloc");
                m.rows.push((
                    size,
                    Row {
                        label: format!("#{} {} ({api})", alloc.unwrap(), bytes(size as f64)),
                        size,
                        segments: Vec::new(),
                    },
                    false,
                ));
                live.insert(
                    alloc.unwrap(),
                    Track {
                        row: m.rows.len() - 1,
                        state: State::Resident,
                        since: t,
                        size,
                    },
                );
                allocated += size;
                on_device += size;
            }
            "free" if u(r, "result") == Some(0) => {
                if let Some(tr) = alloc.and_then(|a| live.remove(&a)) {
                    close(&mut m.rows, &tr, t);
                    allocated -= tr.size;
                    if matches!(tr.state, State::Resident | State::MovingIn) {
                        on_device -= tr.size;
                    }
                }
            }
            _ => {}
        }
        if let Some(mk) = decision_marker(kind) {
            let nbytes = u(r, "bytes")
                .or_else(|| alloc.and_then(|a| live.get(&a).map(|t| t.size)))
                .unwrap_or(0);
            m.decisions.push((t, kind.to_string(), alloc, nbytes));
            m.markers.push(Marker {
                x: t,
                kind: mk,
                label: format!(
                    "{kind}{} {} at {t:.3} ms",
                    alloc.map(|a| format!(" #{a}")).unwrap_or_default(),
                    bytes(nbytes as f64)
                ),
            });
            let d = r
                .get("device_ms")
                .and_then(Value::as_f64)
                .or_else(|| timing.get(&u(r, "seq").unwrap_or(u64::MAX)).copied())
                .unwrap_or(0.0);
            if let Some(tr) = alloc.and_then(|a| live.get_mut(&a)) {
                let was_on_device = matches!(tr.state, State::Resident | State::MovingIn);
                let (moving, then) = match mk {
                    "evict" => (Some(State::MovingOut), State::OnHost),
                    "prefetch" => (Some(State::MovingIn), State::Resident),
                    "drop" => (None, State::Dropped),
                    "recompute" => (None, State::Resident),
                    _ => (None, tr.state),
                };
                if then != tr.state {
                    close(&mut m.rows, tr, t);
                    m.rows[tr.row].2 = true;
                    let mut since = t;
                    if let Some(st) = moving {
                        m.rows[tr.row].1.segments.push((t, t + d, st));
                        since = t + d;
                    }
                    tr.state = then;
                    tr.since = since;
                    let now_on_device = matches!(then, State::Resident);
                    if was_on_device && !now_on_device {
                        on_device -= tr.size;
                    } else if !was_on_device && now_on_device {
                        on_device += tr.size;
                    }
                }
            }
        }
        m.peak = m.peak.max(allocated);
        let last = *m.points.last().unwrap();
        if last.1 != allocated as f64 || last.2 != on_device as f64 {
            m.points.push((t, allocated as f64, on_device as f64));
        }
    }
    let end = m.end_ms;
    for tr in live.values() {
        close(&mut m.rows, tr, end);
    }
    Ok(m)
}

/// The tensors the residency chart shows: those the policy moved first, then the largest.
fn pick_rows(mut rows: Vec<(u64, Row, bool)>) -> Vec<Row> {
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(b.0.cmp(&a.0)));
    rows.truncate(MAX_ROWS);
    rows.into_iter().map(|r| r.1).collect()
}

/// What `marmoset plan` would do with the trace under the budget (simulated).
struct Planned {
    policy: String,
    profile: String,
    outcome: planner::timeline::Outcome,
    base_s: f64,
    peak: u64,
    /// (storage, size, what, when).
    table: Vec<(usize, u64, String, String)>,
    rows: Vec<Row>,
    ops: usize,
}

fn plan(text: &str, budget: u64, policy: &str, profile: &str) -> Result<Planned, String> {
    use planner::timeline::Decision;
    let records = planner::trace::read(text)?;
    let t = planner::shimtrace::convert(&records).map(|c| c.trace)?;
    if t.ops.is_empty() {
        return Err("no timed operations: record the trace with MARMOSET_TRACE_TIMING=1".into());
    }
    let (prof, _) = simgpu_model::Profile::load(profile).map_err(|e| format!("--profile: {e}"))?;
    let link = planner::timeline::Link::from_profile(&prof);
    let (p, o) = planner::policy::run(policy, &t, budget, link).ok_or_else(|| {
        format!(
            "unknown policy {policy:?}: accepted are {}",
            planner::policy::POLICIES.join(", ")
        )
    })?;
    let n = t.ops.len();
    let op = |i: usize| format!("op {i} ({})", t.ops[i].name);
    let mut table = Vec::new();
    // Each storage's life in operation order: from its producer (or the start) to the step
    // after its last use.
    let mut first = vec![usize::MAX; t.storages.len()];
    let mut last = vec![0usize; t.storages.len()];
    for (i, o) in t.ops.iter().enumerate() {
        for &s in o.inputs.iter().chain(&o.outputs).chain(&o.mutates) {
            first[s] = first[s].min(i);
            last[s] = last[s].max(i + 1);
        }
    }
    let mut per: BTreeMap<usize, Vec<(f64, f64, State)>> = BTreeMap::new();
    for (s, d) in &p {
        let size = t.storages[*s].size;
        let segs = per.entry(*s).or_default();
        match *d {
            Decision::Swap {
                after,
                trigger,
                back,
            } => {
                table.push((
                    *s,
                    size,
                    "swap".into(),
                    format!(
                        "out after {}, in from op {trigger}, back at {}",
                        op(after),
                        op(back)
                    ),
                ));
                let a = after as f64 + 1.0;
                segs.push((a, a + 1.0, State::MovingOut));
                segs.push((a + 1.0, trigger as f64, State::OnHost));
                segs.push((trigger as f64, back as f64, State::MovingIn));
            }
            Decision::Recompute { after, back } if back == usize::MAX => {
                table.push((
                    *s,
                    size,
                    "drop".into(),
                    format!("after {}, its last use", op(after)),
                ));
                segs.push((after as f64 + 1.0, last[*s] as f64, State::Dropped));
            }
            Decision::Recompute { after, back } => {
                table.push((
                    *s,
                    size,
                    "recompute".into(),
                    format!(
                        "drop after {}, recompute with {} before {}",
                        op(after),
                        t.storages[*s]
                            .producer
                            .map(|q| t.ops[q].name.clone())
                            .unwrap_or_default(),
                        op(back)
                    ),
                ));
                segs.push((after as f64 + 1.0, back as f64, State::Dropped));
            }
            Decision::Extend { until } => {
                table.push((
                    *s,
                    size,
                    "keep".into(),
                    format!("past the program's free until {}", op(until)),
                ));
                last[*s] = last[*s].max(until + 1);
            }
        }
    }
    // Rows: storages the plan moves, largest first; else the largest.
    let mut chosen: Vec<usize> = per.keys().copied().collect();
    if chosen.is_empty() {
        chosen = (0..t.storages.len())
            .filter(|&s| first[s] != usize::MAX)
            .collect();
    }
    chosen.sort_by(|a, b| t.storages[*b].size.cmp(&t.storages[*a].size).then(a.cmp(b)));
    chosen.truncate(MAX_ROWS);
    let rows = chosen
        .into_iter()
        .map(|s| {
            let start = if t.storages[s].constant {
                0.0
            } else {
                first[s].min(n) as f64
            };
            let end = (last[s] as f64).max(start);
            let mut moves: Vec<(f64, f64, State)> = per.get(&s).cloned().unwrap_or_default();
            moves.retain(|m| m.1 > m.0);
            moves.sort_by(|a, b| a.0.total_cmp(&b.0));
            // Resident wherever no move is.
            let mut segs = Vec::new();
            let mut at = start;
            for mv in moves {
                if mv.0 > at {
                    segs.push((at, mv.0, State::Resident));
                }
                segs.push(mv);
                at = at.max(mv.1);
            }
            if end > at {
                segs.push((at, end, State::Resident));
            }
            Row {
                label: format!("storage {s} ({})", bytes(t.storages[s].size as f64)),
                size: t.storages[s].size,
                segments: segs,
            }
        })
        .collect();
    Ok(Planned {
        policy: policy.into(),
        profile: prof.name.clone(),
        outcome: o,
        base_s: t.compute_time(),
        peak: t.peak(),
        table,
        rows,
        ops: n,
    })
}

fn parse_budget(b: &str, peak: u64) -> Result<u64> {
    match b.parse::<f64>() {
        Ok(f) if b.contains('.') && f > 0.0 && f <= 1.0 => Ok((peak as f64 * f) as u64),
        _ => planner::parse_size(b)
            .map_err(|e| anyhow::anyhow!("--budget: {e} (or a fraction of the peak, 0.5)")),
    }
}

const STYLE: &str = r#"body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sim{background:#fff3cd;border:1px solid #e0c060;padding:1px 6px;border-radius:4px;font-size:12px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
#readout{font-size:12px;color:#555;min-height:16px}.scroll{max-height:440px;overflow:auto;display:inline-block}.note{color:#555;font-size:13px}"#;

/// Builds the legends from the charts themselves and adds a readout under the memory chart.
const SCRIPT: &str = r#"(function(){
function legend(id, items){var d=document.getElementById(id);if(!d)return;
 items.forEach(function(it){var s=document.createElement('span');var i=document.createElement('i');
 i.style.background=it[1];s.appendChild(i);s.appendChild(document.createTextNode(it[0]));d.appendChild(s);});}
var mem=document.getElementById('memory');
if(mem){var items=[];mem.querySelectorAll('g.series').forEach(function(g){items.push([g.dataset.name,g.dataset.color]);});
 var b=document.getElementById('memory-budget');if(b)items.push(['budget','#d62728']);
 JSON.parse(document.getElementById('marker-kinds').textContent).forEach(function(k){items.push([k[0],k[1]]);});
 legend('memory-legend',items);
 var md=JSON.parse(document.getElementById('memory-data').textContent);var pts=md.points;var out=document.getElementById('readout');
 mem.addEventListener('mousemove',function(e){var r=mem.getBoundingClientRect();var vb=mem.viewBox.baseVal;
  var x=(e.clientX-r.left)/r.width*vb.width;var t=(x-80)/(vb.width-100)*parseFloat(mem.dataset.xMax);
  var lo=0,hi=pts.length-1;while(lo<hi){var m=(lo+hi+1)>>1;if(pts[m][0]<=t)lo=m;else hi=m-1;}
  var p=pts[lo];if(p)out.textContent='at '+t.toFixed(3)+': '+p.slice(1).map(function(v,i){return md.names[i]+' '+(v/1048576).toFixed(1)+' MiB';}).join(', ');});}
legend('residency-legend',JSON.parse(document.getElementById('state-kinds').textContent));
document.body.dataset.rendered='ok';
})();"#;

pub fn report(o: &Options) -> Result<std::process::ExitCode> {
    let text = std::fs::read_to_string(o.trace)
        .with_context(|| format!("cannot read {}", o.trace.display()))?;
    let m = measure(&text).map_err(|e| anyhow::anyhow!("{}: {e:#}", o.trace.display()))?;
    crate::note_cut(o.trace, m.cut.as_deref());
    crate::note_siblings(o.trace);
    let budget = match o.budget {
        Some(b) => Some(parse_budget(b, m.peak)?),
        None => m
            .header
            .as_ref()
            .and_then(|h| u(h, "memory_limit").or_else(|| u(h, "budget_bytes"))),
    };
    let sim_tag = |simulated: bool| {
        if simulated {
            r#" <span class="sim">simulated</span>"#
        } else {
            ""
        }
    };
    let policy_in_trace = m
        .header
        .as_ref()
        .and_then(|h| h["policy"].as_str().map(String::from))
        .unwrap_or_else(|| "?".into());
    let recorded = !m.decisions.is_empty();
    let planned = match (recorded, budget) {
        (false, Some(b)) => Some(plan(&text, b, o.policy, o.profile)),
        _ => None,
    };

    let mut h = String::new();
    let title = format!(
        "Marmoset report: {}",
        o.trace
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <script>window.addEventListener('error',function(){{var e=document.documentElement;e.dataset.errors=(+(e.dataset.errors||0))+1;}});</script>\
         <style>{STYLE}</style></head><body>",
        esc(&title)
    );
    let _ = write!(h, "<h1>{}</h1>", esc(&title));
    let _ = write!(
        h,
        "<p class=\"note\">{} records; policy <b>{}</b>; peak allocated {}{}{}. Times are host milliseconds since the first record{}.</p>",
        m.records,
        esc(&policy_in_trace),
        bytes(m.peak as f64),
        budget
            .map(|b| format!("; budget {}", bytes(b as f64)))
            .unwrap_or_default(),
        if o.simulated {
            "; recorded on the simulated GPU"
        } else {
            ""
        },
        if o.simulated {
            " (the program's host time; device times are simulated)"
        } else {
            ""
        }
    );

    // Memory over time.
    let has_moves = m.points.iter().any(|p| p.1 != p.2);
    let mut series = vec![Series {
        name: "allocated".into(),
        color: "#4c78a8",
        points: m.points.iter().map(|p| (p.0, p.1)).collect(),
    }];
    if has_moves {
        series.push(Series {
            name: "on the device".into(),
            color: "#f58518",
            points: m.points.iter().map(|p| (p.0, p.2)).collect(),
        });
    }
    let _ = write!(h, "<h2>Memory in use over time</h2>");
    h.push_str(&svg::line_chart(
        "memory",
        &series,
        m.end_ms,
        "host time (ms)",
        budget,
        &m.markers,
    ));
    let _ = write!(
        h,
        "<div id=\"memory-legend\" class=\"legend\"></div><div id=\"readout\"></div>"
    );
    let mut data = String::from("[");
    for (i, p) in m.points.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        if has_moves {
            let _ = write!(data, "[{:.4},{},{}]", p.0, p.1, p.2);
        } else {
            let _ = write!(data, "[{:.4},{}]", p.0, p.1);
        }
    }
    data.push(']');
    // The readout's data, and the series names it prints.
    let names: Vec<String> = series.iter().map(|s| format!("{:?}", s.name)).collect();
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"memory-data\">{{\"names\":[{}],\"points\":{data}}}</script>",
        names.join(",")
    );
    let kinds: Vec<String> = svg::MARKERS
        .iter()
        .filter(|(k, _)| m.markers.iter().any(|mk| mk.kind == *k))
        .map(|(k, c)| format!("[{k:?},{c:?}]"))
        .collect();
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"marker-kinds\">[{}]</script>",
        kinds.join(",")
    );

    // Residency.
    let (rows, x_max, x_label, what) = match &planned {
        Some(Ok(p)) if !recorded => (
            p.rows
                .iter()
                .map(|r| Row {
                    label: r.label.clone(),
                    size: r.size,
                    segments: r.segments.clone(),
                })
                .collect::<Vec<_>>(),
            p.ops as f64,
            "operation (program order)".to_string(),
            format!(
                "as the <b>{}</b> plan would keep them under the budget{}",
                esc(&p.policy),
                sim_tag(true)
            ),
        ),
        _ => (
            pick_rows(m.rows),
            m.end_ms,
            "host time (ms)".to_string(),
            if recorded {
                "as the policy moved them during the run".to_string()
            } else {
                "as the run kept them (no policy decisions recorded; give --budget and record with MARMOSET_TRACE_TIMING=1 to see a plan)".to_string()
            },
        ),
    };
    let _ = write!(
        h,
        "<h2>Residency of the largest tensors</h2><p class=\"note\">{} tensors, {what}.</p>",
        rows.len()
    );
    h.push_str(&svg::residency_chart("residency", &rows, x_max, &x_label));
    let states: Vec<String> = State::ALL
        .iter()
        .map(|s| format!("[{:?},{:?}]", s.name(), s.color()))
        .collect();
    let _ = write!(
        h,
        "<div id=\"residency-legend\" class=\"legend\"></div><script type=\"application/json\" id=\"state-kinds\">[{}]</script>",
        states.join(",")
    );

    // Time by kind.
    let sim_device = sim_tag(o.simulated);
    if m.device_ms_by_kind.is_empty() {
        let _ = write!(
            h,
            "<h2>Calls by operation kind</h2><p class=\"note\">No device times in this trace (record with MARMOSET_TRACE_TIMING=1); calls counted instead.</p>"
        );
        let bars: Vec<(String, f64)> = m
            .calls_by_kind
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64))
            .collect();
        h.push_str(&svg::bar_chart("kinds", &bars, &|v| {
            format!("{v:.0} calls")
        }));
    } else {
        let _ = write!(h, "<h2>Device time by operation kind{sim_device}</h2>");
        let bars: Vec<(String, f64)> = m
            .device_ms_by_kind
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let label = if o.simulated { " (simulated)" } else { "" };
        h.push_str(&svg::bar_chart("kinds", &bars, &|v| {
            format!("{v:.3} ms{label}")
        }));
    }

    // Decisions.
    let _ = write!(h, "<h2>The plan's decisions</h2>");
    if recorded {
        let _ = write!(
            h,
            "<p class=\"note\">{} decisions recorded by the <b>{}</b> policy during the run.</p><div class=\"scroll\"><table id=\"decisions\"><tr><th>time (ms)</th><th>decision</th><th>tensor</th><th>bytes</th></tr>",
            m.decisions.len(),
            esc(&policy_in_trace)
        );
        for (t, k, a, b) in m.decisions.iter().take(500) {
            let _ = write!(
                h,
                "<tr><td>{t:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(k),
                a.map(|a| format!("#{a}")).unwrap_or_default(),
                bytes(*b as f64)
            );
        }
        h.push_str("</table></div>");
        if m.decisions.len() > 500 {
            let _ = write!(h, "<p class=\"note\">(the first 500 shown)</p>");
        }
    } else {
        match &planned {
            None => {
                let _ = write!(
                    h,
                    "<p class=\"note\">The run recorded no decisions. Give <code>--budget SIZE</code> (or a fraction of the peak) to see what a policy would do.</p>"
                );
            }
            Some(Err(e)) => {
                let _ = write!(h, "<p class=\"note\">No plan: {}.</p>", esc(e));
            }
            Some(Ok(p)) => {
                let oc = &p.outcome;
                let _ = write!(
                    h,
                    "<p class=\"note\">The run recorded no decisions; this is what <code>marmoset plan --policy {} --budget {}</code> would do{}: {}, {:.6} s against {:.6} s of compute ({:.3}x) on the {} profile's PCIe links, planned peak {} of {} ({} swapped out, {} recomputations, {:.6} s stalled).</p>",
                    esc(&p.policy),
                    budget.unwrap_or(0),
                    sim_tag(true),
                    if oc.feasible {
                        "feasible"
                    } else {
                        "NOT feasible"
                    },
                    oc.makespan,
                    p.base_s,
                    oc.makespan / p.base_s,
                    esc(&p.profile),
                    bytes(oc.peak as f64),
                    bytes(p.peak as f64),
                    bytes(oc.swapped_out as f64),
                    oc.recomputed_ops,
                    oc.stall_s
                );
                let _ = write!(
                    h,
                    "<div class=\"scroll\"><table id=\"decisions\"><tr><th>storage</th><th>size</th><th>decision</th><th>when</th></tr>"
                );
                for (s, size, what, when) in &p.table {
                    let _ = write!(
                        h,
                        "<tr><td>{s}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        bytes(*size as f64),
                        esc(what),
                        esc(when)
                    );
                }
                h.push_str("</table></div>");
                if p.table.is_empty() {
                    let _ = write!(h, "<p class=\"note\">Nothing to move: the trace fits.</p>");
                }
            }
        }
    }
    let _ = writeln!(h, "<script>{SCRIPT}</script></body></html>");
    std::fs::write(o.output, h).with_context(|| format!("cannot write {}", o.output.display()))?;
    eprintln!(
        "{}: {} tensors charted, {} decisions{}",
        o.output.display(),
        rows.len(),
        if recorded {
            m.decisions.len()
        } else {
            match &planned {
                Some(Ok(p)) => p.table.len(),
                _ => 0,
            }
        },
        if recorded {
            " recorded"
        } else {
            " planned (simulated)"
        }
    );
    Ok(std::process::ExitCode::SUCCESS)
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

    #[test]
    fn memory_and_residency_follow_the_records() {
        let m = measure(TRACE).unwrap();
        assert_eq!(m.peak, 1500);
        // allocated / on the device after each change.
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
    fn bad_lines_are_named() {
        let e = measure("{\"seq\":1}\n").err().unwrap().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(measure("").is_err());
        assert!(
            measure("nonsense")
                .err()
                .unwrap()
                .to_string()
                .contains("line 1")
        );
    }
}
