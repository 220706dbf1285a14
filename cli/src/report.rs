//! `marmoset report TRACE -o report.html`: one self-contained HTML page (inline SVG, a little
//! inline script, nothing fetched) that reads like the run: a summary of what the policy cost
//! and saved, the run's steps (passive or guided, measured against the plan's prediction),
//! memory over time against the budget with the policy's events marked, the largest tensors'
//! residency (named by the call that made them), device time by operation kind, and the
//! decisions (those the policy recorded; when it recorded none, what `marmoset plan` would do
//! under the budget, simulated).
//!
//! Times are on the device's clock, rebuilt from the trace's device timings ([`clock`]), when
//! the trace has them; else on the host's. The page says which. An output named `*.json` gets
//! the summary and the steps as JSON instead, for scripts.

mod clock;
mod measure;
mod names;
mod page;
mod planned;
mod ranks;
mod steps;

use crate::svg::{self, Row, Series, State, esc};
use anyhow::{Context, Result, bail};
use serde_json::Value;
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

fn parse_budget(b: &str, peak: u64) -> Result<u64> {
    match b.parse::<f64>() {
        Ok(f) if b.contains('.') && f > 0.0 && f <= 1.0 => Ok((peak as f64 * f) as u64),
        _ => planner::parse_size(b)
            .map_err(|e| anyhow::anyhow!("--budget: {e} (or a fraction of the peak, 0.5)")),
    }
}

/// What the page is built from.
pub struct Run {
    pub measured: measure::Measured,
    pub clock: Option<clock::Clock>,
    pub steps: steps::Steps,
    pub budget: Option<u64>,
    pub policy: String,
    pub simulated: bool,
    /// Each allocation's name (what made it).
    pub names: std::collections::HashMap<u64, String>,
}

impl Run {
    /// Reads a trace's text: its steps, its device clock, what it shows.
    fn read(text: &str, budget: Option<&str>, simulated: bool) -> Result<Run> {
        let (recs, cut) = records(text)?;
        let mut steps = steps::find(text, &recs);
        let clock = clock::rebuild(&recs, &|seq, used| steps.planned_eviction(seq, used));
        if let Some(c) = &clock {
            steps::measure(&mut steps, &recs, c);
        }
        let names = names::names(&recs);
        let measured = measure::measure(&recs, cut, clock.as_ref(), &names);
        let header = measured.header.as_ref();
        let budget = match budget {
            Some(b) => Some(parse_budget(b, measured.peak)?),
            None => header
                .and_then(|h| u(h, "memory_limit").or_else(|| u(h, "budget_bytes")))
                .or_else(|| steps.plans.iter().rev().find_map(|p| p.budget)),
        };
        let policy = header
            .and_then(|h| h["policy"].as_str().map(String::from))
            .unwrap_or_else(|| "?".into());
        Ok(Run {
            measured,
            clock,
            steps,
            budget,
            policy,
            simulated,
            names,
        })
    }

    /// The axis label of the run's clock.
    fn clock_label(&self) -> String {
        if self.measured.device_clock {
            format!(
                "device time (ms{}, rebuilt from the trace's device timings)",
                if self.simulated { ", simulated" } else { "" }
            )
        } else {
            "host time (ms since the first record)".into()
        }
    }
}

const STYLE: &str = r#"body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sim{background:#fff3cd;border:1px solid #e0c060;padding:1px 6px;border-radius:4px;font-size:12px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
#summary-table{width:100%}#summary-table td.n{text-align:right;font-variant-numeric:tabular-nums}#summary-table th:first-child{width:44%}
#readout{font-size:12px;color:#555;min-height:16px}.scroll{max-height:440px;overflow:auto;display:inline-block}.note{color:#555;font-size:13px}"#;

/// Builds the legends from the charts themselves and adds a readout under the memory chart.
const SCRIPT: &str = r#"(function(){
function legend(id, items){var d=document.getElementById(id);if(!d)return;
 items.forEach(function(it){var s=document.createElement('span');var i=document.createElement('i');
 i.style.background=it[1];s.appendChild(i);s.appendChild(document.createTextNode(it[0]));d.appendChild(s);});}
function kinds(id){var e=document.getElementById(id);return e?JSON.parse(e.textContent):[];}
var mem=document.getElementById('memory');
if(mem){var items=[];mem.querySelectorAll('g.series').forEach(function(g){items.push([g.dataset.name,g.dataset.color]);});
 var b=document.getElementById('memory-budget');if(b)items.push(['budget','#d62728']);
 kinds('marker-kinds').forEach(function(k){items.push([k[0],k[1]]);});
 legend('memory-legend',items);
 var md=JSON.parse(document.getElementById('memory-data').textContent);var pts=md.points;var out=document.getElementById('readout');
 mem.addEventListener('mousemove',function(e){var r=mem.getBoundingClientRect();var vb=mem.viewBox.baseVal;
  var x=(e.clientX-r.left)/r.width*vb.width;var t=(x-80)/(vb.width-100)*parseFloat(mem.dataset.xMax);
  var lo=0,hi=pts.length-1;while(lo<hi){var m=(lo+hi+1)>>1;if(pts[m][0]<=t)lo=m;else hi=m-1;}
  var p=pts[lo];if(p)out.textContent='at '+t.toFixed(3)+' ms: '+p.slice(1).map(function(v,i){return md.names[i]+' '+(v/1048576).toFixed(1)+' MiB';}).join(', ');});}
legend('steps-legend',kinds('step-kinds'));
legend('residency-legend',kinds('state-kinds'));
document.body.dataset.rendered='ok';
})();"#;

/// The memory chart's data for the readout, and the marker kinds shown, as inline JSON.
fn memory_data(
    h: &mut String,
    points: &[(f64, f64, f64)],
    series: &[Series],
    markers: &[svg::Marker],
) {
    let moves = series.len() > 1;
    let mut data = String::from("[");
    for (i, p) in points.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        if moves {
            let _ = write!(data, "[{:.4},{},{}]", p.0, p.1, p.2);
        } else {
            let _ = write!(data, "[{:.4},{}]", p.0, p.1);
        }
    }
    data.push(']');
    let names: Vec<String> = series.iter().map(|s| format!("{:?}", s.name)).collect();
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"memory-data\">{{\"names\":[{}],\"points\":{data}}}</script>",
        names.join(",")
    );
    let kinds: Vec<String> = svg::MARKERS
        .iter()
        .filter(|(k, _)| markers.iter().any(|mk| mk.kind == *k))
        .map(|(k, c)| format!("[{k:?},{c:?}]"))
        .collect();
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"marker-kinds\">[{}]</script>",
        kinds.join(",")
    );
}

/// The allocated and on-device series of `points`.
fn series_of(points: &[(f64, f64, f64)]) -> Vec<Series> {
    let mut series = vec![Series {
        name: "allocated".into(),
        color: "#4c78a8",
        points: points.iter().map(|p| (p.0, p.1)).collect(),
    }];
    if points.iter().any(|p| p.1 != p.2) {
        series.push(Series {
            name: "on the device".into(),
            color: "#f58518",
            points: points.iter().map(|p| (p.0, p.2)).collect(),
        });
    }
    series
}

pub fn report(o: &Options) -> Result<std::process::ExitCode> {
    let text = std::fs::read_to_string(o.trace)
        .with_context(|| format!("cannot read {}", o.trace.display()))?;
    let run = Run::read(&text, o.budget, o.simulated)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", o.trace.display()))?;
    crate::note_cut(o.trace, run.measured.cut.as_deref());
    crate::note_siblings(o.trace);
    let ranks = ranks::read(o.trace, &text, &run);
    if let Some((i, (rank, ms))) = ranks::slowest(&ranks).into_iter().enumerate().next_back() {
        eprintln!(
            "marmoset: {} ranks of one run; step {} took {ms:.3} ms on its slowest rank, rank {rank}",
            ranks.len(),
            i + 1
        );
    }
    // A `.json` output is the summary and the steps, for scripts.
    if o.output.extension().is_some_and(|e| e == "json") {
        let mut v = page::json(&run);
        if !ranks.is_empty() {
            v["ranks"] = ranks::json(&ranks);
        }
        let text = serde_json::to_string_pretty(&v)?;
        std::fs::write(o.output, text + "\n")
            .with_context(|| format!("cannot write {}", o.output.display()))?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let m = &run.measured;
    let recorded = !m.decisions.is_empty();
    let planned = match (recorded, run.budget) {
        (false, Some(b)) => Some(planned::plan(&text, b, o.policy, o.profile)),
        _ => None,
    };
    let sim_tag = |simulated: bool| {
        if simulated {
            r#" <span class="sim">simulated</span>"#
        } else {
            ""
        }
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
        "<p class=\"note\">{} records; policy <b>{}</b>{}. Times are {}{}.</p>",
        m.records,
        esc(&run.policy),
        if o.simulated {
            "; recorded on the simulated GPU"
        } else {
            ""
        },
        if m.device_clock {
            "on the device's clock, rebuilt from the trace's device timings (one compute engine in program order, the copy engines, the waits the records show)"
        } else {
            "the program's host milliseconds since the first record (the trace has no device timings: record with MARMOSET_TRACE_TIMING=1)"
        },
        if o.simulated && m.device_clock {
            ": the simulated GPU's virtual time"
        } else {
            ""
        }
    );

    page::summary(&mut h, &run);
    page::steps(&mut h, &run);
    ranks::html(&mut h, &ranks, o.simulated && m.device_clock);

    // Memory over the run.
    let x_label = run.clock_label();
    let series = series_of(&m.points);
    let _ = write!(
        h,
        "<h2>Memory over the run{}</h2>",
        sim_tag(o.simulated && m.device_clock)
    );
    // The steps a plan guided, shaded.
    let bands: Vec<svg::Band> = match &run.clock {
        Some(c) => run
            .steps
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.mode != steps::Mode::Passive)
            .filter_map(|(i, s)| {
                let from = *c.before.get(&s.first)?;
                Some(svg::Band {
                    from,
                    to: from + s.measured_ms,
                    class: s.mode.key(),
                    color: s.mode.color(),
                    title: format!("step {} ({})", i + 1, s.mode.name()),
                })
            })
            .collect(),
        None => Vec::new(),
    };
    if !bands.is_empty() {
        let _ = write!(h, "<p class=\"note\">Shaded: the steps a plan guided.</p>");
    }
    h.push_str(&svg::line_chart(
        "memory", &series, m.end_ms, &x_label, run.budget, &m.markers, &bands,
    ));
    let _ = write!(
        h,
        "<div id=\"memory-legend\" class=\"legend\"></div><div id=\"readout\"></div>"
    );
    memory_data(&mut h, &m.points, &series, &m.markers);

    // One step up close: the last guided one, else the last.
    let focus = run
        .steps
        .steps
        .iter()
        .enumerate()
        .rev()
        .find(|(_, s)| s.mode == steps::Mode::Guided)
        .or_else(|| run.steps.steps.iter().enumerate().next_back())
        .filter(|_| m.device_clock);
    let window = focus.and_then(|(i, s)| {
        let c = run.clock.as_ref()?;
        let from = *c.before.get(&s.first)?;
        let to = from + s.measured_ms;
        (to > from).then_some((i, s, from, to))
    });
    if let Some((i, s, from, to)) = window {
        let pts = measure::window_points(&m.points, from, to);
        let series = series_of(&pts);
        let markers: Vec<svg::Marker> = m
            .markers
            .iter()
            .filter(|mk| mk.x >= from && mk.x <= to)
            .map(|mk| svg::Marker {
                x: mk.x - from,
                kind: mk.kind,
                label: mk.label.clone(),
            })
            .collect();
        let _ = write!(
            h,
            "<h2>Step {} up close ({}){}</h2><p class=\"note\">Memory in step {} alone, from its first call: {:.3} ms.</p>",
            i + 1,
            s.mode.name(),
            sim_tag(o.simulated),
            i + 1,
            s.measured_ms
        );
        h.push_str(&svg::line_chart(
            "memory-step",
            &series,
            to - from,
            &format!("{x_label}, from the step's start"),
            run.budget,
            &markers,
            &[],
        ));
    }

    // Residency.
    let (rows, x_max, res_label, what) = match (&planned, window) {
        (Some(Ok(p)), _) if !recorded => (
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
        (_, Some((i, _, from, to))) => (
            measure::window_rows(&m.rows, from, to),
            to - from,
            format!("{x_label}, from the step's start"),
            format!(
                "in step {} (named by the call that made them, with shape, type and size), {}",
                i + 1,
                if recorded {
                    "as the policy moved them"
                } else {
                    "as the run kept them"
                }
            ),
        ),
        _ => (
            measure::pick_rows(
                m.rows
                    .iter()
                    .map(|(s, r, moved)| {
                        (
                            *s,
                            Row {
                                label: r.label.clone(),
                                size: r.size,
                                segments: r.segments.clone(),
                            },
                            *moved,
                        )
                    })
                    .collect(),
            ),
            m.end_ms,
            x_label.clone(),
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
    h.push_str(&svg::residency_chart("residency", &rows, x_max, &res_label));
    let states: Vec<String> = State::ALL
        .iter()
        .map(|s| format!("[{:?},{:?}]", s.name(), s.color()))
        .collect();
    let _ = write!(
        h,
        "<div id=\"residency-legend\" class=\"legend\"></div><script type=\"application/json\" id=\"state-kinds\">[{}]</script>",
        states.join(",")
    );

    page::kinds(&mut h, &run);
    page::decisions(&mut h, &run, planned.as_ref());
    let _ = writeln!(h, "<script>{SCRIPT}</script></body></html>");
    std::fs::write(o.output, h).with_context(|| format!("cannot write {}", o.output.display()))?;
    eprintln!(
        "{}: {} steps ({} guided), {} tensors charted, {} decisions{}",
        o.output.display(),
        run.steps.steps.len(),
        run.steps
            .steps
            .iter()
            .filter(|s| s.mode == steps::Mode::Guided)
            .count(),
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

    #[test]
    fn bad_lines_are_named() {
        let e = records("{\"seq\":1}\n").err().unwrap().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(records("").is_err());
        assert!(
            records("nonsense")
                .err()
                .unwrap()
                .to_string()
                .contains("line 1")
        );
    }
}
