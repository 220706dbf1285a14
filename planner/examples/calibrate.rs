//! Calibrates a device profile's cuDNN algorithm model (its `algo_efficiency` and
//! `half_util_flops`, both assumptions) against the figures the μ-cuDNN paper measured on a real
//! P100-SXM2 ([`planner::calibration`]), so that the simulator does not flatter micro-batching.
//!
//! `cargo run --release -p planner --example calibrate -- PROFILE [--fit]`
//!
//! Without `--fit` it prints each figure of the paper beside the profile's; with `--fit` it
//! searches the constants (coordinate descent on the log error, pulled toward the profile's
//! present values so that only what the figures demand moves) and prints the fitted constants.
//! Every model time is simulated.

use planner::calibration::{Layer, alexnet, figures, resnet18};
use simgpu_model::Profile;
use simgpu_model::conv;

fn loss(p: &Profile, prior: &Profile, alexnet: &[Layer], resnet: &[Layer]) -> f64 {
    let fit: f64 = figures(p, alexnet, resnet)
        .iter()
        .map(|(_, paper, model, w)| w * (model / paper).ln().powi(2))
        .sum();
    // Pull toward the prior, so constants no figure speaks to stay where they were.
    let pull: f64 = params(p)
        .iter()
        .zip(params(prior))
        .filter(|(v, _)| **v > 0.0)
        .map(|(v, v0)| (v / v0).ln().powi(2))
        .sum();
    fit + 0.01 * pull
}

fn params(p: &Profile) -> Vec<f64> {
    let e = &p.algo_efficiency;
    let mut v = e.fwd.clone();
    v.extend(&e.bwd_data);
    v.extend(&e.bwd_filter);
    v.push(p.half_util_flops);
    v
}

fn set_params(p: &mut Profile, v: &[f64]) {
    let (f, rest) = v.split_at(conv::FWD_ALGOS);
    let (d, rest) = rest.split_at(conv::BWD_DATA_ALGOS);
    let (w, rest) = rest.split_at(conv::BWD_FILTER_ALGOS);
    p.algo_efficiency.fwd = f.to_vec();
    p.algo_efficiency.bwd_data = d.to_vec();
    p.algo_efficiency.bwd_filter = w.to_vec();
    p.half_util_flops = rest[0];
}

fn show(p: &Profile, alexnet: &[Layer], resnet: &[Layer]) {
    println!(
        "{:<96} {:>7} {:>7}",
        "figure (model times simulated)", "paper", "model"
    );
    for (what, paper, model, _) in figures(p, alexnet, resnet) {
        let off = (model / paper - 1.0) * 100.0;
        println!("{what:<96} {paper:>6.2}x {model:>6.2}x  ({off:+.0}%)");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(profile) = args.first() else {
        eprintln!("usage: calibrate PROFILE [--fit]");
        std::process::exit(2);
    };
    let (prior, _) = Profile::load(profile).unwrap_or_else(|e| panic!("{e}"));
    let (alexnet, resnet) = (alexnet(), resnet18());
    show(&prior, &alexnet, &resnet);
    if !args.iter().any(|a| a == "--fit") {
        return;
    }
    let mut best = prior.clone();
    let mut best_loss = loss(&best, &prior, &alexnet, &resnet);
    for step in [1.3f64, 1.12, 1.04] {
        loop {
            let mut improved = false;
            for i in 0..params(&best).len() {
                for f in [step, 1.0 / step] {
                    let mut v = params(&best);
                    if v[i] <= 0.0 {
                        continue; // an algorithm cuDNN does not implement stays so
                    }
                    v[i] *= f;
                    if i < v.len() - 1 && v[i] > 0.95 {
                        continue;
                    }
                    let mut cand = best.clone();
                    set_params(&mut cand, &v);
                    let l = loss(&cand, &prior, &alexnet, &resnet);
                    if l < best_loss - 1e-9 {
                        best = cand;
                        best_loss = l;
                        improved = true;
                    }
                }
            }
            if !improved {
                break;
            }
        }
    }
    println!("\nfitted (loss {best_loss:.4}):");
    show(&best, &alexnet, &resnet);
    let r = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let e = &best.algo_efficiency;
    println!("\"half_util_flops\": {:.3e},", best.half_util_flops);
    println!(
        "\"algo_efficiency\": {{\n  \"fwd\": [{}],\n  \"bwd_data\": [{}],\n  \"bwd_filter\": [{}]\n}}",
        r(&e.fwd),
        r(&e.bwd_data),
        r(&e.bwd_filter)
    );
}
