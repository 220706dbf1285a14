//! Plain inline SVG charts for `marmoset report`: a line chart (memory over time, with a budget
//! line and event markers), a residency chart (one row per tensor, coloured by state) and a bar
//! chart. No library, no network: the page must open anywhere, offline.

use std::fmt::Write;

pub const W: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 24.0;

/// HTML/SVG text escaping.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Bytes as people read them (binary units).
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b:.0} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// About five round tick values from 0 to `max`.
fn ticks(max: f64, binary: bool) -> Vec<f64> {
    if max <= 0.0 {
        return vec![0.0];
    }
    let base: f64 = if binary { 2.0 } else { 10.0 };
    let mut step = base.powf((max / 5.0).log(base).floor());
    while max / step > 8.0 {
        step *= if binary { 2.0 } else { 2.5 };
    }
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= max * 1.0001)
        .collect()
}

fn num(v: f64) -> String {
    if v == 0.0 || (v.abs() >= 0.01 && v.abs() < 1e6) {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.2e}")
    }
}

pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

pub struct Marker {
    pub x: f64,
    pub kind: &'static str,
    pub label: String,
}

/// Marker kinds and their colours, in legend order.
pub const MARKERS: &[(&str, &str)] = &[
    ("evict", "#d62728"),
    ("prefetch", "#2ca02c"),
    ("drop", "#9467bd"),
    ("recompute", "#ff7f0e"),
    ("stall", "#000000"),
];

/// At most `n` points: per column of the chart, the first, the lowest and the highest point, so
/// that peaks survive.
fn thin(points: &[(f64, f64)], x_max: f64, n: usize) -> Vec<(f64, f64)> {
    if points.len() <= n {
        return points.to_vec();
    }
    let cols = n / 3;
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(n);
    let mut i = 0;
    while i < points.len() {
        let col = ((points[i].0 / x_max) * cols as f64) as usize;
        let mut j = i;
        let (mut lo, mut hi) = (points[i], points[i]);
        while j < points.len() && ((points[j].0 / x_max) * cols as f64) as usize == col {
            if points[j].1 < lo.1 {
                lo = points[j];
            }
            if points[j].1 > hi.1 {
                hi = points[j];
            }
            j += 1;
        }
        let last = points[j - 1];
        let mut group = vec![points[i], lo, hi, last];
        group.sort_by(|a, b| a.0.total_cmp(&b.0));
        group.dedup();
        out.extend(group);
        i = j;
    }
    out
}

/// A stretch of the x axis shaded behind a chart's lines (a step a plan guided).
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub class: &'static str,
    pub color: &'static str,
    pub title: String,
}

/// A step chart of bytes over `x`, with an optional budget line, event markers and shaded
/// bands.
pub fn line_chart(
    id: &str,
    series: &[Series],
    x_max: f64,
    x_label: &str,
    budget: Option<u64>,
    markers: &[Marker],
    bands: &[Band],
) -> String {
    let h = 360.0;
    let bottom = 48.0;
    let pw = W - LEFT - RIGHT;
    let ph = h - TOP - bottom;
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let y_top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(budget.map(|b| b as f64))
        .fold(0.0, f64::max)
        * 1.08;
    let y_max = ticks(y_top.max(1.0), true)
        .last()
        .copied()
        .filter(|t| *t >= y_top)
        .unwrap_or(y_top.max(1.0));
    let sx = |x: f64| LEFT + x / x_max * pw;
    let sy = |y: f64| TOP + ph - y / y_max * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" data-x-max="{x_max}" data-y-max="{y_max}" role="img">"#
    );
    for t in ticks(y_max, true) {
        let y = sy(t);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            bytes(t)
        );
    }
    for t in ticks(x_max, false) {
        let x = sx(t);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            num(t)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text>"#,
        LEFT + pw / 2.0,
        h - 8.0,
        esc(x_label)
    );
    for b in bands {
        let (x0, x1) = (sx(b.from.clamp(0.0, x_max)), sx(b.to.clamp(0.0, x_max)));
        let _ = write!(
            s,
            r#"<rect class="band {}" x="{x0:.2}" y="{TOP}" width="{:.2}" height="{ph:.1}" fill="{}" fill-opacity="0.12"><title>{}</title></rect>"#,
            b.class,
            (x1 - x0).max(0.5),
            b.color,
            esc(&b.title)
        );
    }
    for m in markers {
        let color = MARKERS
            .iter()
            .find(|(k, _)| *k == m.kind)
            .map_or("#888", |(_, c)| c);
        let x = sx(m.x);
        let _ = write!(
            s,
            r#"<line class="marker {}" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="{color}" stroke-opacity="0.35"><title>{}</title></line>"#,
            m.kind,
            TOP + 10.0,
            esc(&m.label)
        );
    }
    for se in series {
        let pts = thin(&se.points, x_max, 6000);
        let mut path = String::new();
        let mut prev: Option<f64> = None;
        for (x, y) in &pts {
            // A step: the value holds until the next change.
            if let Some(py) = prev {
                let _ = write!(path, "{:.1},{:.1} ", sx(*x), sy(py));
            }
            let _ = write!(path, "{:.1},{:.1} ", sx(*x), sy(*y));
            prev = Some(*y);
        }
        if let Some(py) = prev {
            let _ = write!(path, "{:.1},{:.1}", sx(x_max), sy(py));
        }
        let _ = write!(
            s,
            r#"<g class="series" data-name="{}" data-color="{}"><polyline fill="none" stroke="{}" stroke-width="1.5" points="{path}"/></g>"#,
            esc(&se.name),
            se.color,
            se.color
        );
    }
    if let Some(b) = budget {
        let y = sy(b as f64);
        let _ = write!(
            s,
            r##"<line id="{id}-budget" class="budget" data-bytes="{b}" x1="{LEFT}" x2="{}" y1="{y:.2}" y2="{y:.2}" stroke="#d62728" stroke-dasharray="6 4" stroke-width="1.5"><title>budget {}</title></line><text x="{}" y="{:.1}" text-anchor="end" font-size="11" fill="#d62728">budget {}</text>"##,
            W - RIGHT,
            bytes(b as f64),
            W - RIGHT,
            y - 4.0,
            bytes(b as f64)
        );
    }
    let _ = write!(
        s,
        r##"<rect class="frame" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/></svg>"##
    );
    s
}

/// States of a tensor over time, with their colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Resident,
    MovingOut,
    OnHost,
    MovingIn,
    Dropped,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Resident,
        State::MovingOut,
        State::OnHost,
        State::MovingIn,
        State::Dropped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            State::Resident => "resident",
            State::MovingOut => "moving out",
            State::OnHost => "on host",
            State::MovingIn => "moving in",
            State::Dropped => "dropped",
        }
    }

    pub fn class(self) -> &'static str {
        match self {
            State::Resident => "resident",
            State::MovingOut => "moving-out",
            State::OnHost => "on-host",
            State::MovingIn => "moving-in",
            State::Dropped => "dropped",
        }
    }

    pub fn color(self) -> &'static str {
        match self {
            State::Resident => "#4c78a8",
            State::MovingOut => "#f58518",
            State::OnHost => "#bab0ac",
            State::MovingIn => "#54a24b",
            State::Dropped => "#e45756",
        }
    }
}

pub struct Row {
    pub label: String,
    pub size: u64,
    pub segments: Vec<(f64, f64, State)>,
}

/// `s` cut to `n` characters, with an ellipsis when cut.
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    s.chars().take(n - 1).collect::<String>() + "…"
}

/// One row per tensor, each interval coloured by its state.
pub fn residency_chart(id: &str, rows: &[Row], x_max: f64, x_label: &str) -> String {
    let row_h = 18.0;
    // Room for a tensor's name (its call, shape, type and size), cut at 62 characters.
    let left = 370.0;
    let bottom = 44.0;
    let ph = rows.len().max(1) as f64 * row_h;
    let h = TOP + ph + bottom;
    let pw = W - left - RIGHT;
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let sx = |x: f64| left + x.clamp(0.0, x_max) / x_max * pw;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" data-x-max="{x_max}" role="img">"#
    );
    for t in ticks(x_max, false) {
        let x = sx(t);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            num(t)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text>"#,
        left + pw / 2.0,
        h - 8.0,
        esc(x_label)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = TOP + i as f64 * row_h;
        let _ = write!(
            s,
            r#"<g class="tensor" data-size="{}"><text class="name" x="{:.1}" y="{:.1}" text-anchor="end" font-size="11"><title>{}</title>{}</text>"#,
            r.size,
            left - 6.0,
            y + row_h * 0.7,
            esc(&r.label),
            esc(&short(&r.label, 62))
        );
        for &(a, b, st) in &r.segments {
            let (x0, x1) = (sx(a), sx(b));
            let _ = write!(
                s,
                r#"<rect class="state {}" x="{x0:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{}"><title>{}: {} from {} to {}</title></rect>"#,
                st.class(),
                y + 2.0,
                (x1 - x0).max(0.8),
                row_h - 4.0,
                st.color(),
                esc(&r.label),
                st.name(),
                num(a),
                num(b)
            );
        }
        s.push_str("</g>");
    }
    let _ = write!(
        s,
        r##"<rect class="frame" x="{left}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/></svg>"##
    );
    s
}

/// Horizontal bars, one per (label, value), with the value printed as `fmt` makes it.
pub fn bar_chart(id: &str, bars: &[(String, f64)], fmt: &dyn Fn(f64) -> String) -> String {
    let row_h = 22.0;
    let left = 160.0;
    let h = TOP + bars.len().max(1) as f64 * row_h + 10.0;
    let pw = W - left - RIGHT - 140.0;
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-12);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img">"#
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = TOP + i as f64 * row_h;
        let w = v / max * pw;
        let _ = write!(
            s,
            r##"<g class="bar"><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="12">{}</text><rect x="{left}" y="{:.1}" width="{w:.2}" height="{:.1}" fill="#4c78a8"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text></g>"##,
            left - 6.0,
            y + 15.0,
            esc(label),
            y + 3.0,
            row_h - 6.0,
            left + w + 6.0,
            y + 15.0,
            esc(&fmt(*v))
        );
    }
    s.push_str("</svg>");
    s
}

/// One step of the per-step chart.
pub struct StepBar {
    /// The step's number, as the page counts them.
    pub index: usize,
    /// `passive`, `guided` or `left` (a class), and its colour.
    pub mode: &'static str,
    pub color: &'static str,
    pub measured_ms: f64,
    pub predicted_ms: Option<f64>,
    /// The tooltip.
    pub title: String,
}

/// One bar per step (its measured time), with the prediction marked on the steps a plan
/// guided and a dashed line at `baseline` (the step's compute alone). Every bar is a
/// `g.step` with `data-step`, `data-mode`, `data-measured-ms` and `data-predicted-ms`.
pub fn step_chart(id: &str, steps: &[StepBar], baseline: Option<f64>, y_label: &str) -> String {
    let h = 300.0;
    let bottom = 44.0;
    let pw = W - LEFT - RIGHT;
    let ph = h - TOP - bottom;
    let y_top = steps
        .iter()
        .flat_map(|s| [Some(s.measured_ms), s.predicted_ms])
        .flatten()
        .chain(baseline)
        .fold(0.0, f64::max)
        * 1.12;
    let y_max = ticks(y_top.max(1e-9), false)
        .last()
        .copied()
        .filter(|t| *t >= y_top)
        .unwrap_or(y_top.max(1e-9));
    let sy = |y: f64| TOP + ph - y / y_max * ph;
    let slot = pw / steps.len().max(1) as f64;
    let bw = (slot * 0.7).min(60.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" data-y-max="{y_max}" role="img">"#
    );
    for t in ticks(y_max, false) {
        let y = sy(t);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            num(t)
        );
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{:.1}" font-size="12" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(y_label)
    );
    let labels = steps.len() <= 30;
    for (i, st) in steps.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let y = sy(st.measured_ms);
        let _ = write!(
            s,
            r#"<g class="step {}" data-step="{}" data-mode="{}" data-measured-ms="{:.6}"{}><title>{}</title><rect class="measured" x="{:.1}" y="{y:.1}" width="{bw:.1}" height="{:.1}" fill="{}"/>"#,
            st.mode,
            st.index,
            st.mode,
            st.measured_ms,
            st.predicted_ms
                .map(|p| format!(r#" data-predicted-ms="{p:.6}""#))
                .unwrap_or_default(),
            esc(&st.title),
            cx - bw / 2.0,
            (TOP + ph - y).max(0.5),
            st.color
        );
        if let Some(p) = st.predicted_ms {
            let py = sy(p);
            let _ = write!(
                s,
                r##"<line class="predicted" x1="{:.1}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}" stroke="#000" stroke-width="2.5"/>"##,
                cx - bw / 2.0 - 4.0,
                cx + bw / 2.0 + 4.0
            );
        }
        if labels {
            let _ = write!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                y - 4.0,
                num(st.measured_ms)
            );
        }
        if labels || i % (steps.len() / 20 + 1) == 0 {
            let _ = write!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                TOP + ph + 16.0,
                st.index
            );
        }
        s.push_str("</g>");
    }
    if let Some(b) = baseline {
        let y = sy(b);
        let _ = write!(
            s,
            r##"<line id="{id}-baseline" class="baseline" data-ms="{b:.6}" x1="{LEFT}" x2="{}" y1="{y:.2}" y2="{y:.2}" stroke="#2ca02c" stroke-dasharray="6 4" stroke-width="1.5"><title>compute alone: {} ms</title></line>"##,
            W - RIGHT,
            num(b)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">step</text>"#,
        LEFT + pw / 2.0,
        h - 8.0
    );
    let _ = write!(
        s,
        r##"<rect class="frame" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/></svg>"##
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mark_per_step_and_the_prediction_on_guided_ones() {
        let bar = |i, mode, p| StepBar {
            index: i,
            mode,
            color: "#000",
            measured_ms: 10.0 * i as f64,
            predicted_ms: p,
            title: String::new(),
        };
        let svg = step_chart(
            "steps",
            &[
                bar(1, "passive", None),
                bar(2, "guided", Some(12.0)),
                bar(3, "guided", Some(12.0)),
            ],
            Some(5.0),
            "ms",
        );
        assert_eq!(svg.matches(r#"<g class="step "#).count(), 3);
        assert_eq!(svg.matches(r#"class="predicted""#).count(), 2);
        assert!(svg.contains(r#"data-mode="passive" data-measured-ms="10.000000""#));
        assert!(svg.contains(r#"data-predicted-ms="12.000000""#));
        assert!(svg.contains(r#"class="baseline" data-ms="5.000000""#));
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(10.0, false), [0.0, 2.5, 5.0, 7.5, 10.0]);
        let t = ticks(3.0 * 1024.0 * 1024.0 * 1024.0, true);
        assert_eq!(t[1], 512.0 * 1024.0 * 1024.0);
        assert!(*t.last().unwrap() <= 3.0 * 1024.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn thinning_keeps_the_peak() {
        let pts: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64, if i == 54_321 { 9.0 } else { 1.0 }))
            .collect();
        let t = thin(&pts, 100_000.0, 600);
        assert!(t.len() <= 800, "{}", t.len());
        assert!(t.contains(&(54_321.0, 9.0)));
    }

    #[test]
    fn the_budget_line_sits_at_its_value() {
        let s = Series {
            name: "a".into(),
            color: "#000",
            points: vec![(0.0, 0.0), (1.0, 1000.0)],
        };
        let svg = line_chart("m", &[s], 2.0, "t", Some(500), &[], &[]);
        assert!(svg.contains(r#"data-bytes="500""#));
        assert_eq!(svg.matches(r#"class="series""#).count(), 1);
    }
}
