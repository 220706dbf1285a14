//! The report's sections that are text and tables: the summary, the steps (chart and table),
//! device time by kind and the decisions. Every figure carries its raw value in a `data-`
//! attribute, so tests (and scripts) read the page without parsing prose.

use super::Run;
use super::clock::Cause;
use super::planned::Planned;
use super::steps::{Mode, Step};
use crate::svg::{self, StepBar, bytes, esc};
use std::collections::BTreeMap;
use std::fmt::Write;

fn sim(run: &Run) -> &'static str {
    if run.simulated {
        r#" <span class="sim">simulated</span>"#
    } else {
        ""
    }
}

/// Whole-run totals, from the records and the clock.
struct Totals {
    time_ms: f64,
    compute_ms: f64,
    to_host: u64,
    to_device: u64,
    recomputations: usize,
    recompute_ms: f64,
    stalls: BTreeMap<Cause, f64>,
}

fn totals(run: &Run) -> Totals {
    let m = &run.measured;
    let mut t = Totals {
        time_ms: run.clock.as_ref().map_or(m.end_ms, |c| c.end),
        compute_ms: m
            .device_ms_by_kind
            .iter()
            .filter(|(k, _)| super::clock::is_call(k))
            .map(|(_, v)| v)
            .sum(),
        to_host: 0,
        to_device: 0,
        recomputations: 0,
        recompute_ms: 0.0,
        stalls: run
            .clock
            .as_ref()
            .map(super::measure::stalls_by_cause)
            .unwrap_or_default(),
    };
    for d in &m.decisions {
        match d.kind.as_str() {
            "evict" | "swap_out" => t.to_host += d.bytes,
            "restore" | "prefetch" | "swap_in" => t.to_device += d.bytes,
            "recompute" => t.recomputations += 1,
            _ => {}
        }
    }
    if let Some(c) = &run.clock {
        t.recompute_ms = m
            .decisions
            .iter()
            .filter(|d| d.kind == "recompute")
            .filter_map(|d| c.span.get(&d.seq))
            .map(|(a, b)| b - a)
            .sum();
    }
    t
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.3} ms")
    }
}

/// A table cell with its raw value.
fn cell(text: &str, attr: &str, value: f64) -> String {
    format!(r#"<td class="n" {attr}="{value}">{}</td>"#, esc(text))
}

/// The summary: what the steps took against their compute alone and the plan's prediction,
/// bytes moved each way, recomputation, stalls by cause, memory saved against the peak.
pub fn summary(h: &mut String, run: &Run) {
    let m = &run.measured;
    let t = totals(run);
    let last: Option<(usize, &Step)> = run.steps.steps.iter().enumerate().next_back();
    let timed = m.device_clock;
    let _ = write!(h, "<h2>Summary{}</h2>", sim(run));
    let _ = write!(
        h,
        r#"<table id="summary-table"><tr><th></th><th>whole run</th>{}</tr>"#,
        last.map(|(i, s)| format!(
            r#"<th data-step="{}">last step ({}, {})</th>"#,
            i + 1,
            i + 1,
            s.mode.name()
        ))
        .unwrap_or_default()
    );
    let row = |h: &mut String, key: &str, what: &str, whole: String, step: Option<String>| {
        let _ = write!(
            h,
            r#"<tr data-key="{key}"><th>{}</th>{whole}{}</tr>"#,
            esc(what),
            step.unwrap_or_default()
        );
    };
    let steps = &run.steps.steps;
    let count = |mode: Mode| steps.iter().filter(|s| s.mode == mode).count();
    let _ = write!(
        h,
        r#"<tr data-key="steps"><th>steps</th><td colspan="2" data-steps="{}" data-guided="{}" data-passive="{}" data-left="{}">{}</td></tr>"#,
        steps.len(),
        count(Mode::Guided),
        count(Mode::Passive),
        count(Mode::Left),
        if steps.is_empty() {
            "no repeating iteration found".to_string()
        } else {
            format!(
                "{}: {} passive, {} guided, {} left the plan (iterations of {} calls, as {} cut them)",
                steps.len(),
                count(Mode::Passive),
                count(Mode::Guided),
                count(Mode::Left),
                run.steps.period,
                run.steps.source
            )
        }
    );
    if timed {
        row(
            h,
            "time",
            "device time",
            cell(&ms(t.time_ms), "data-ms", t.time_ms),
            last.map(|(_, s)| cell(&ms(s.measured_ms), "data-ms", s.measured_ms)),
        );
        row(
            h,
            "compute",
            "compute alone (the calls' device times)",
            cell(&ms(t.compute_ms), "data-ms", t.compute_ms),
            last.map(|(_, s)| cell(&ms(s.compute_ms), "data-ms", s.compute_ms)),
        );
        let x = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        row(
            h,
            "slowdown",
            "slowdown against compute alone",
            cell(
                &format!("{:.2}x", x(t.time_ms, t.compute_ms)),
                "data-x",
                x(t.time_ms, t.compute_ms),
            ),
            last.map(|(_, s)| {
                let v = x(s.measured_ms, s.compute_ms);
                cell(&format!("{v:.2}x"), "data-x", v)
            }),
        );
        if let Some((_, s)) = last
            && let Some(p) = s.predicted_ms(&run.steps.plans)
        {
            row(
                h,
                "predicted",
                "the plan's prediction (measured / predicted)",
                "<td></td>".into(),
                Some(format!(
                    r#"<td class="n" data-ms="{p}">{} ({:.3}x)</td>"#,
                    ms(p),
                    s.measured_ms / p
                )),
            );
        }
    }
    row(
        h,
        "to-host",
        "moved to the host (evictions)",
        cell(&bytes(t.to_host as f64), "data-bytes", t.to_host as f64),
        last.map(|(_, s)| cell(&bytes(s.to_host as f64), "data-bytes", s.to_host as f64)),
    );
    row(
        h,
        "to-device",
        "moved back to the device (restores)",
        cell(&bytes(t.to_device as f64), "data-bytes", t.to_device as f64),
        last.map(|(_, s)| cell(&bytes(s.to_device as f64), "data-bytes", s.to_device as f64)),
    );
    let rec = |n: usize, v: f64| {
        format!(
            r#"<td class="n" data-count="{n}" data-ms="{v}">{n} calls{}</td>"#,
            if timed {
                format!(", {}", ms(v))
            } else {
                String::new()
            }
        )
    };
    row(
        h,
        "recompute",
        "recomputation (the replayed calls' device times)",
        rec(t.recomputations, t.recompute_ms),
        last.map(|(_, s)| rec(s.recomputations, s.recompute_ms)),
    );
    if timed {
        for c in Cause::ALL {
            let whole = t.stalls.get(&c).copied().unwrap_or(0.0);
            row(
                h,
                &format!("stall-{}", c.key()),
                &format!("stalled {}", c.name()),
                cell(&ms(whole), "data-ms", whole),
                last.map(|(_, s)| {
                    let v = s.stalls.get(&c).copied().unwrap_or(0.0);
                    cell(&ms(v), "data-ms", v)
                }),
            );
        }
    }
    h.push_str("</table>");
    // Memory against the peak.
    let saved = m.peak.saturating_sub(m.peak_on_device);
    let _ = write!(
        h,
        r#"<p id="memory-summary" class="note" data-peak="{}" data-peak-on-device="{}" data-saved="{saved}"{}>Memory: the program allocated at most <b>{}</b>; at most <b>{}</b> of it was on the device at once ({} kept off it, {:.0}% of the peak){}.</p>"#,
        m.peak,
        m.peak_on_device,
        run.budget
            .map(|b| format!(r#" data-budget="{b}""#))
            .unwrap_or_default(),
        bytes(m.peak as f64),
        bytes(m.peak_on_device as f64),
        bytes(saved as f64),
        if m.peak > 0 {
            saved as f64 * 100.0 / m.peak as f64
        } else {
            0.0
        },
        run.budget
            .map(|b| format!("; the budget is {}", bytes(b as f64)))
            .unwrap_or_default()
    );
    if let Some(p) = run.steps.plans.last() {
        let _ = write!(
            h,
            r#"<p id="plan-summary" class="note" data-swaps="{}" data-recomputes="{}">The plan{}: <b>{}</b>{}, {} swaps and {} recomputations per step, {}{}.</p>"#,
            p.swaps,
            p.recomputes,
            if run.steps.plans.len() > 1 {
                format!(" (the last of {})", run.steps.plans.len())
            } else {
                String::new()
            },
            esc(&p.policy),
            p.budget
                .map(|b| format!(" within {}", bytes(b as f64)))
                .unwrap_or_default(),
            p.swaps,
            p.recomputes,
            if p.feasible {
                "feasible"
            } else {
                "not feasible alone (the passive mechanism makes up the rest)"
            },
            p.predicted_ms
                .map(|v| format!(", predicted {} per step on the planner's timeline", ms(v)))
                .unwrap_or_default()
        );
        // The plan cache: plans made, plans kept for an iteration kind and used again.
        let plans = &run.steps.plans;
        let reused = plans.iter().filter(|p| p.reused).count();
        let made = plans.len() - reused;
        let planning: f64 = plans
            .iter()
            .filter(|p| !p.reused)
            .map(|p| p.planning_ms)
            .sum();
        let _ = write!(
            h,
            r#"<p id="plan-cache" class="note" data-made="{made}" data-reused="{reused}" data-planning-ms="{planning:.1}">Plans: {made} made ({planning:.1} ms of host time planning), {reused} reused from the cache of iteration kinds ({:.0}% hits).</p>"#,
            100.0 * reused as f64 / plans.len() as f64
        );
    }
}

/// The per-step chart and table.
pub fn steps(h: &mut String, run: &Run) {
    let steps = &run.steps.steps;
    let _ = write!(h, "<h2>Steps{}</h2>", sim(run));
    if steps.is_empty() {
        let _ = write!(
            h,
            "<p class=\"note\">No steps: the trace's calls do not repeat (two iterations or more are needed).</p>"
        );
        return;
    }
    if !run.measured.device_clock {
        let _ = write!(
            h,
            "<p class=\"note\">{} steps, but no device timings to measure them (record with MARMOSET_TRACE_TIMING=1).</p>",
            steps.len()
        );
        return;
    }
    let plans = &run.steps.plans;
    let _ = write!(
        h,
        "<p class=\"note\">Each step's device time: <b>passive</b> (the passive mechanism, while the iteration is measured and planned), <b>guided</b> by the plan, or <b>left the plan</b> (a divergence: the rest of it ran passively). The black tick is the plan's prediction for a guided step; the dashed line the last step's compute alone.</p>"
    );
    let bars: Vec<StepBar> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let p = s.predicted_ms(plans).filter(|_| s.mode != Mode::Passive);
            StepBar {
                index: i + 1,
                mode: s.mode.key(),
                color: s.mode.color(),
                measured_ms: s.measured_ms,
                predicted_ms: p,
                title: format!(
                    "step {}: {}, {:.3} ms{}",
                    i + 1,
                    s.mode.name(),
                    s.measured_ms,
                    p.map(|p| format!(" (predicted {p:.3} ms)"))
                        .unwrap_or_default()
                ),
            }
        })
        .collect();
    h.push_str(&svg::step_chart(
        "steps",
        &bars,
        steps.last().map(|s| s.compute_ms),
        &format!("ms{}", if run.simulated { " (simulated)" } else { "" }),
    ));
    let kinds: Vec<String> = [Mode::Passive, Mode::Guided, Mode::Left]
        .iter()
        .filter(|k| steps.iter().any(|s| s.mode == **k))
        .map(|k| format!("[{:?},{:?}]", k.name(), k.color()))
        .chain(
            steps
                .iter()
                .any(|s| s.mode != Mode::Passive)
                .then(|| r##"["predicted","#000"]"##.to_string()),
        )
        .chain([r##"["compute alone","#2ca02c"]"##.to_string()])
        .collect();
    let _ = write!(
        h,
        "<div id=\"steps-legend\" class=\"legend\"></div><script type=\"application/json\" id=\"step-kinds\">[{}]</script>",
        kinds.join(",")
    );
    let _ = write!(
        h,
        "<div class=\"scroll\"><table id=\"steps-table\"><tr><th>step</th><th>how</th><th>measured</th><th>predicted</th><th>compute alone</th><th>to host</th><th>back</th><th>recomputed</th><th>stalled</th></tr>"
    );
    for (i, s) in steps.iter().enumerate().take(500) {
        let p = s.predicted_ms(plans).filter(|_| s.mode != Mode::Passive);
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            s.mode.name(),
            ms(s.measured_ms),
            p.map(|p| format!("{} ({:.3}x)", ms(p), s.measured_ms / p))
                .unwrap_or_default(),
            ms(s.compute_ms),
            bytes(s.to_host as f64),
            bytes(s.to_device as f64),
            s.recomputations,
            ms(s.stalls.values().sum())
        );
    }
    h.push_str("</table></div>");
}

/// Device time (or calls) by operation kind.
pub fn kinds(h: &mut String, run: &Run) {
    let m = &run.measured;
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
        let _ = write!(h, "<h2>Device time by operation kind{}</h2>", sim(run));
        let bars: Vec<(String, f64)> = m
            .device_ms_by_kind
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let label = if run.simulated { " (simulated)" } else { "" };
        h.push_str(&svg::bar_chart("kinds", &bars, &|v| {
            format!("{v:.3} ms{label}")
        }));
    }
}

/// The decisions the run recorded, or what a policy would do.
pub fn decisions(h: &mut String, run: &Run, planned: Option<&Result<Planned, String>>) {
    let m = &run.measured;
    let _ = write!(h, "<h2>The plan's decisions</h2>");
    if !m.decisions.is_empty() {
        let _ = write!(
            h,
            "<p class=\"note\">{} decisions recorded by the <b>{}</b> policy during the run.</p><div class=\"scroll\"><table id=\"decisions\"><tr><th>{}</th><th>decision</th><th>tensor</th><th>bytes</th></tr>",
            m.decisions.len(),
            esc(&run.policy),
            if m.device_clock {
                "device ms"
            } else {
                "host ms"
            }
        );
        for d in m.decisions.iter().take(500) {
            let _ = write!(
                h,
                "<tr><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                d.ms,
                esc(&d.kind),
                d.alloc
                    .map(|a| esc(run.names.get(&a).map_or("?", String::as_str)))
                    .unwrap_or_default(),
                bytes(d.bytes as f64)
            );
        }
        h.push_str("</table></div>");
        if m.decisions.len() > 500 {
            let _ = write!(h, "<p class=\"note\">(the first 500 shown)</p>");
        }
        return;
    }
    match planned {
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
                "<p class=\"note\">The run recorded no decisions; this is what <code>marmoset plan --policy {} --budget {}</code> would do <span class=\"sim\">simulated</span>: {}, {:.6} s against {:.6} s of compute ({:.3}x) on the {} profile's PCIe links, planned peak {} of {} ({} swapped out, {} recomputations, {:.6} s stalled).</p>",
                esc(&p.policy),
                run.budget.unwrap_or(0),
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

/// Stalls by cause, as JSON (ms).
fn stalls_json(stalls: &BTreeMap<Cause, f64>) -> serde_json::Value {
    Cause::ALL
        .iter()
        .map(|c| {
            (
                c.key().to_string(),
                serde_json::json!(stalls.get(c).copied().unwrap_or(0.0)),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The summary and the steps as JSON, for scripts (`-o FILE.json`): the figures the page
/// shows, by the same names.
pub fn json(run: &Run) -> serde_json::Value {
    use serde_json::json;
    let m = &run.measured;
    let t = totals(run);
    let plans = &run.steps.plans;
    json!({
        "clock": if m.device_clock { "device (rebuilt from the trace's device timings)" } else { "host" },
        "simulated": run.simulated,
        "policy": run.policy,
        "budget": run.budget,
        "peak_bytes": m.peak,
        "peak_on_device_bytes": m.peak_on_device,
        "whole_run": {
            "time_ms": t.time_ms,
            "compute_ms": t.compute_ms,
            "to_host_bytes": t.to_host,
            "to_device_bytes": t.to_device,
            "recomputations": t.recomputations,
            "recompute_ms": t.recompute_ms,
            "stalls_ms": stalls_json(&t.stalls),
        },
        "steps": run.steps.steps.iter().enumerate().map(|(i, s)| json!({
            "step": i + 1,
            "mode": s.mode.key(),
            "measured_ms": m.device_clock.then_some(s.measured_ms),
            "predicted_ms": s.predicted_ms(plans).filter(|_| s.mode != Mode::Passive),
            "compute_ms": s.compute_ms,
            "recompute_ms": s.recompute_ms,
            "to_host_bytes": s.to_host,
            "to_device_bytes": s.to_device,
            "evictions": s.evictions,
            "restores": s.restores,
            "drops": s.drops,
            "recomputations": s.recomputations,
            "stalls_ms": stalls_json(&s.stalls),
        })).collect::<Vec<_>>(),
        "plans": plans.iter().map(|p| json!({
            "policy": p.policy,
            "budget": p.budget,
            "swaps": p.swaps,
            "recomputes": p.recomputes,
            "feasible": p.feasible,
            "predicted_ms": p.predicted_ms,
        })).collect::<Vec<_>>(),
    })
}
