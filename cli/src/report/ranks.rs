//! The ranks of a distributed run: the traces of the same run whose headers name a rank (as
//! torchrun's `RANK`), each read for its steps on its device clock. A step is as slow as its
//! slowest rank: the report says which rank that is, step by step.

use super::Run;
use crate::svg::esc;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One rank's steps.
pub struct RankSteps {
    pub rank: u32,
    pub path: PathBuf,
    /// Each step's measured device time (ms), in order.
    pub steps_ms: Vec<f64>,
}

/// The rank a trace's header names (None: not a rank of a distributed job).
fn rank_of(text: &str) -> Option<u32> {
    let first = text.lines().next()?;
    let v: serde_json::Value = serde_json::from_str(first).ok()?;
    (v["kind"] == "header")
        .then(|| v["rank"].as_u64())
        .flatten()
        .and_then(|r| u32::try_from(r).ok())
}

fn steps_ms(run: &Run) -> Vec<f64> {
    if run.clock.is_none() {
        return Vec::new();
    }
    run.steps.steps.iter().map(|s| s.measured_ms).collect()
}

/// The ranks of the run `path` belongs to, this trace's (`own`, read from `text`) among them,
/// in rank order; empty when the trace is no rank's or its run has no other rank.
pub fn read(path: &Path, text: &str, own: &Run) -> Vec<RankSteps> {
    let Some(own_rank) = rank_of(text) else {
        return Vec::new();
    };
    let Some(run) = planner::trace::run_of(path) else {
        return Vec::new();
    };
    let mut out = vec![RankSteps {
        rank: own_rank,
        path: path.to_path_buf(),
        steps_ms: steps_ms(own),
    }];
    for p in planner::trace::traces_of_run(path, &run) {
        if p == path {
            continue;
        }
        let Ok(t) = std::fs::read_to_string(&p) else {
            continue;
        };
        let Some(rank) = rank_of(&t) else { continue };
        if let Ok(r) = Run::read(&t, None, own.simulated) {
            out.push(RankSteps {
                rank,
                path: p,
                steps_ms: steps_ms(&r),
            });
        }
    }
    if out.len() < 2 {
        return Vec::new();
    }
    out.sort_by_key(|r| r.rank);
    out
}

/// For each step every rank measured: its slowest rank and that rank's time.
pub fn slowest(ranks: &[RankSteps]) -> Vec<(u32, f64)> {
    let n = ranks.iter().map(|r| r.steps_ms.len()).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            ranks
                .iter()
                .map(|r| (r.rank, r.steps_ms[i]))
                .fold((0, f64::MIN), |a, b| if b.1 > a.1 { b } else { a })
        })
        .collect()
}

/// The ranks' section of the page.
pub fn html(h: &mut String, ranks: &[RankSteps], simulated: bool) {
    if ranks.is_empty() {
        return;
    }
    let slow = slowest(ranks);
    let _ = write!(
        h,
        "<h2>Ranks</h2><p class=\"note\">{} ranks of one run; a step is as slow as its slowest rank. Device time per step (ms{}), the slowest in bold.</p><table><tr><th>step</th>",
        ranks.len(),
        if simulated { ", simulated" } else { "" }
    );
    for r in ranks {
        let _ = write!(
            h,
            "<th title=\"{}\">rank {}</th>",
            esc(&r.path.display().to_string()),
            r.rank
        );
    }
    let _ = write!(h, "<th>slowest</th></tr>");
    for (i, (rank, _)) in slow.iter().enumerate() {
        let _ = write!(h, "<tr><td>{}</td>", i + 1);
        for r in ranks {
            let ms = r.steps_ms[i];
            if r.rank == *rank {
                let _ = write!(h, "<td><b>{ms:.3}</b></td>");
            } else {
                let _ = write!(h, "<td>{ms:.3}</td>");
            }
        }
        let _ = write!(h, "<td>rank {rank}</td></tr>");
    }
    h.push_str("</table>");
}

/// The ranks for the report's JSON.
pub fn json(ranks: &[RankSteps]) -> serde_json::Value {
    let slow = slowest(ranks);
    serde_json::json!({
        "ranks": ranks.iter().map(|r| serde_json::json!({
            "rank": r.rank,
            "trace": r.path.display().to_string(),
            "steps_ms": r.steps_ms,
        })).collect::<Vec<_>>(),
        "slowest": slow.iter().enumerate().map(|(i, (rank, ms))| serde_json::json!({
            "step": i + 1,
            "rank": rank,
            "measured_ms": ms,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_rank_of_each_step_is_named() {
        let r = |rank, steps_ms: Vec<f64>| RankSteps {
            rank,
            path: PathBuf::new(),
            steps_ms,
        };
        let ranks = [r(0, vec![5.0, 3.0, 4.0]), r(1, vec![4.0, 6.0])];
        assert_eq!(slowest(&ranks), vec![(0, 5.0), (1, 6.0)]);
        assert!(slowest(&[]).is_empty());
    }

    #[test]
    fn a_header_names_its_rank() {
        assert_eq!(
            rank_of("{\"seq\":0,\"kind\":\"header\",\"rank\":3}\n{}"),
            Some(3)
        );
        assert_eq!(rank_of("{\"seq\":0,\"kind\":\"header\"}\n"), None);
        assert_eq!(rank_of("{\"seq\":1,\"kind\":\"alloc\",\"rank\":3}"), None);
        assert_eq!(rank_of(""), None);
    }
}
