//! The optimisers against brute force: WR and the desirable sets against every multiset of
//! micro-configurations, WD against an exhaustive search; and the table reader.

use super::wr::usable;
use super::*;

/// Deterministic pseudo-random numbers for the property tests.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_table(r: &mut Rng, n: u64, sizes: Sizes) -> Vec<Micro> {
    let mut v = Vec::new();
    for b in sizes.sizes(n) {
        for algo in 0..(1 + r.below(3) as i32) {
            if r.below(5) == 0 {
                continue;
            }
            let time_ms =
                0.1 + b as f64 * (0.5 + r.below(100) as f64 / 50.0) + r.below(10) as f64 * 0.05;
            let workspace = if algo == 0 {
                0
            } else {
                b * (1 + r.below(8)) * 1000
            };
            v.push(Micro {
                batch: b,
                algo,
                time_ms,
                workspace,
            });
        }
    }
    v
}

/// Every multiset of usable micro-configurations summing to n: (time, workspace).
fn brute(n: u64, micro: &[Micro]) -> Vec<(f64, u64)> {
    let mut out = Vec::new();
    fn go(left: u64, start: usize, micro: &[Micro], t: f64, w: u64, out: &mut Vec<(f64, u64)>) {
        if left == 0 {
            out.push((t, w));
            return;
        }
        for i in start..micro.len() {
            if micro[i].batch <= left {
                go(
                    left - micro[i].batch,
                    i,
                    micro,
                    t + micro[i].time_ms,
                    w.max(micro[i].workspace),
                    out,
                );
            }
        }
    }
    go(n, 0, micro, 0.0, 0, &mut out);
    out
}

#[test]
fn sizes_by_policy() {
    assert_eq!(Sizes::Pow2.sizes(12), vec![12, 8, 4, 2, 1]);
    assert_eq!(Sizes::Pow2.sizes(8), vec![8, 4, 2, 1]);
    assert_eq!(Sizes::All.sizes(3), vec![3, 2, 1]);
    assert_eq!(Sizes::Undivided.sizes(7), vec![7]);
    assert_eq!(Sizes::parse("powerOfTwo"), Some(Sizes::Pow2));
    assert_eq!(Sizes::parse("most"), None);
}

#[test]
fn the_papers_example_shape_fft_on_micro_batches() {
    // Undivided only GEMM fits 64; FFT fits at 32 and wins even eight times over.
    let t = vec![
        Micro {
            batch: 256,
            algo: 1,
            time_ms: 15.5,
            workspace: 4400,
        },
        Micro {
            batch: 256,
            algo: 4,
            time_ms: 2.5,
            workspace: 109 << 20,
        },
        Micro {
            batch: 32,
            algo: 4,
            time_ms: 0.37,
            workspace: 55 << 20,
        },
        Micro {
            batch: 32,
            algo: 1,
            time_ms: 2.0,
            workspace: 600,
        },
    ];
    let c = fastest(256, &t, 64 << 20, Sizes::Pow2).unwrap();
    assert_eq!(c.parts, vec![(32, 4); 8]);
    assert!((c.time_ms - 8.0 * 0.37).abs() < 1e-9);
    assert_eq!(c.workspace, 55 << 20);
    let u = fastest(256, &t, 64 << 20, Sizes::Undivided).unwrap();
    assert_eq!(u.parts, vec![(256, 1)]);
    let d = desirable(256, &t, 64 << 20, Sizes::Pow2);
    assert_eq!(d[0], c);
    // The small end of the front: eight GEMM micro-batches, slower but smaller than undivided.
    assert_eq!(d.last().unwrap().parts, vec![(32, 1); 8]);
    assert!(d.iter().any(|c| c.parts == vec![(256, 1)]));
    assert_eq!(fastest(256, &t, 1000, Sizes::Pow2).unwrap().workspace, 600);
    assert!(
        fastest(256, &t, 500, Sizes::Pow2).is_none(),
        "nothing fits 500 bytes"
    );
}

#[test]
fn wr_matches_brute_force() {
    let mut r = Rng(0x9e3779b97f4a7c15);
    for case in 0..300 {
        let n = 1 + r.below(12);
        let sizes = [Sizes::All, Sizes::Pow2, Sizes::Undivided][case % 3];
        let table = random_table(&mut r, n, sizes);
        let limit = [u64::MAX, 20_000, 5_000, 0][case % 4];
        let ok = usable(&table, n, limit, sizes);
        let all = brute(n, &ok);
        let dp = fastest(n, &table, limit, sizes);
        match all
            .iter()
            .map(|c| c.0)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))))
        {
            None => assert!(dp.is_none(), "case {case}"),
            Some(best) => {
                let dp = dp.unwrap();
                assert!(
                    (dp.time_ms - best).abs() < 1e-9,
                    "case {case}: {} vs {best}",
                    dp.time_ms
                );
                assert_eq!(dp.batch(), n);
                assert!(dp.workspace <= limit);
                let recomputed: f64 = dp
                    .parts
                    .iter()
                    .map(|&(b, a)| {
                        ok.iter()
                            .filter(|m| m.batch == b && m.algo == a)
                            .map(|m| m.time_ms)
                            .fold(f64::MAX, f64::min)
                    })
                    .sum();
                assert!((recomputed - dp.time_ms).abs() < 1e-9);
            }
        }
    }
}

#[test]
fn desirable_sets_match_the_brute_force_pareto_front() {
    let mut r = Rng(42);
    for case in 0..200 {
        let n = 1 + r.below(9);
        let sizes = [Sizes::All, Sizes::Pow2][case % 2];
        let table = random_table(&mut r, n, sizes);
        let ok = usable(&table, n, u64::MAX, sizes);
        let all = brute(n, &ok);
        // The front: for each configuration, nothing is at least as good in both and better in one.
        let mut front: Vec<(f64, u64)> = all
            .iter()
            .copied()
            .filter(|a| {
                !all.iter()
                    .any(|b| (b.0 < a.0 - 1e-12 && b.1 <= a.1) || (b.0 <= a.0 + 1e-12 && b.1 < a.1))
            })
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        front.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-12 && a.1 == b.1);
        let got: Vec<(f64, u64)> = desirable(n, &table, u64::MAX, sizes)
            .iter()
            .map(|c| (c.time_ms, c.workspace))
            .collect();
        assert_eq!(got.len(), front.len(), "case {case}: {got:?} vs {front:?}");
        for (g, f) in got.iter().zip(&front) {
            assert!(
                (g.0 - f.0).abs() < 1e-9 && g.1 == f.1,
                "case {case}: {got:?} vs {front:?}"
            );
        }
    }
}

fn exhaustive(kernels: &[Vec<(f64, u64)>], total: u64) -> Option<f64> {
    fn go(k: usize, t: f64, w: u64, ks: &[Vec<(f64, u64)>], total: u64, best: &mut Option<f64>) {
        if w > total {
            return;
        }
        if k == ks.len() {
            if best.is_none_or(|b| t < b) {
                *best = Some(t);
            }
            return;
        }
        for o in &ks[k] {
            go(k + 1, t + o.0, w + o.1, ks, total, best);
        }
    }
    let mut best = None;
    go(0, 0.0, 0, kernels, total, &mut best);
    best
}

fn random_kernels(r: &mut Rng, count: usize, options: u64) -> Vec<Vec<(f64, u64)>> {
    (0..count)
        .map(|_| {
            (0..1 + r.below(options))
                .map(|_| (1.0 + r.below(1000) as f64 / 10.0, r.below(50) * 1000))
                .collect()
        })
        .collect()
}

#[test]
fn wd_matches_exhaustive_search() {
    let mut r = Rng(7);
    for case in 0..300 {
        let count = 1 + r.below(6) as usize;
        let kernels = random_kernels(&mut r, count, 5);
        let total = r.below(150) * 1000;
        let got = wd(&kernels, total, 1_000_000);
        match exhaustive(&kernels, total) {
            None => assert!(got.is_none(), "case {case}"),
            Some(best) => {
                let s = got.unwrap();
                assert!(s.exact, "case {case}");
                assert!(
                    (s.time_ms - best).abs() < 1e-9,
                    "case {case}: {} vs {best}",
                    s.time_ms
                );
                assert!(s.workspace <= total);
                assert!(s.lower_bound_ms <= s.time_ms + 1e-9);
                let t: f64 = s
                    .choice
                    .iter()
                    .enumerate()
                    .map(|(k, &j)| kernels[k][j].0)
                    .sum();
                let w: u64 = s
                    .choice
                    .iter()
                    .enumerate()
                    .map(|(k, &j)| kernels[k][j].1)
                    .sum();
                assert!((t - s.time_ms).abs() < 1e-9 && w == s.workspace);
            }
        }
    }
}

#[test]
fn wd_past_its_budget_stays_feasible_and_within_its_bound() {
    let mut r = Rng(99);
    let kernels = random_kernels(&mut r, 60, 12);
    let total = 600_000;
    let tight = wd(&kernels, total, 50).unwrap();
    let full = wd(&kernels, total, 5_000_000).unwrap();
    assert!(!tight.exact);
    assert!(tight.workspace <= total);
    assert!(tight.lower_bound_ms <= full.time_ms + 1e-9);
    assert!(full.time_ms <= tight.time_ms + 1e-9);
    assert!(tight.time_ms >= tight.lower_bound_ms);
}

#[test]
fn tables_parse_and_errors_name_the_line() {
    let t = read_table("batch,algo,time_ms,workspace_bytes\n8,1,0.5,4096\n4,4,0.2,1000\n").unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(
        t[1],
        Micro {
            batch: 4,
            algo: 4,
            time_ms: 0.2,
            workspace: 1000
        }
    );
    let e =
        read_table("batch,algo,time_ms,workspace_bytes\n8,1,0.5,4096\n4,x,0.2,1000\n").unwrap_err();
    assert!(e.starts_with("line 3:"), "{e}");
    assert!(
        read_table("batch,algo,time\n")
            .unwrap_err()
            .contains("time_ms")
    );
}
