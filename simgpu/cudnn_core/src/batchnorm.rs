//! Batch normalisation arithmetic on dense float32 arrays in logical (N, C, spatial) order.
//! Statistics are accumulated in f64 and rounded to float32 once, so they do not depend on the
//! order of the sum. As cuDNN does: the batch variance normalises with the biased estimate (over
//! M values), the running variance is updated with the unbiased one (M / (M - 1)), and the saved
//! statistics are the mean and 1 / sqrt(var + epsilon).

/// cudnnBatchNormMode_t
pub const PER_ACTIVATION: i32 = 0;
pub const SPATIAL: i32 = 1;
pub const SPATIAL_PERSISTENT: i32 = 2;

/// The shape of a normalisation: N images of C channels of S spatial positions; statistics per
/// channel (SPATIAL, over N * S values) or per activation (over N values).
#[derive(Debug, Clone, Copy)]
pub struct BnShape {
    pub n: usize,
    pub c: usize,
    pub s: usize,
    pub per_activation: bool,
}

impl BnShape {
    /// How many scale / bias / mean / variance values there are.
    pub fn params(&self) -> usize {
        if self.per_activation {
            self.c * self.s
        } else {
            self.c
        }
    }

    /// The values each statistic is over.
    pub fn m(&self) -> usize {
        if self.per_activation {
            self.n
        } else {
            self.n * self.s
        }
    }

    fn param_of(&self, i: usize) -> usize {
        let within = i % (self.c * self.s);
        if self.per_activation {
            within
        } else {
            within / self.s
        }
    }
}

/// Batch mean and biased variance of each parameter slot.
pub fn stats(sh: &BnShape, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let p = sh.params();
    let m = sh.m() as f64;
    let mut sum = vec![0f64; p];
    for (i, &v) in x.iter().enumerate() {
        sum[sh.param_of(i)] += v as f64;
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / m).collect();
    let mut sq = vec![0f64; p];
    for (i, &v) in x.iter().enumerate() {
        let d = v as f64 - mean[sh.param_of(i)];
        sq[sh.param_of(i)] += d * d;
    }
    (mean, sq.iter().map(|s| s / m).collect())
}

/// `scale * (x - mean) * inv_std + bias` for each element.
pub fn normalize(
    sh: &BnShape,
    x: &[f32],
    scale: &[f32],
    bias: &[f32],
    mean: &[f64],
    inv_std: &[f64],
) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = sh.param_of(i);
            (scale[k] as f64 * (v as f64 - mean[k]) * inv_std[k] + bias[k] as f64) as f32
        })
        .collect()
}

pub fn inv_std(var: &[f64], epsilon: f64) -> Vec<f64> {
    var.iter().map(|v| 1.0 / (v + epsilon).sqrt()).collect()
}

/// The running averages after one training step: `(1 - f) * old + f * batch`, the variance
/// with the unbiased batch estimate.
pub fn update_running(
    sh: &BnShape,
    running_mean: &mut [f32],
    running_var: &mut [f32],
    mean: &[f64],
    var: &[f64],
    factor: f64,
) {
    let m = sh.m() as f64;
    let unbias = if m > 1.0 { m / (m - 1.0) } else { 1.0 };
    for k in 0..sh.params() {
        running_mean[k] = ((1.0 - factor) * running_mean[k] as f64 + factor * mean[k]) as f32;
        running_var[k] = ((1.0 - factor) * running_var[k] as f64 + factor * var[k] * unbias) as f32;
    }
}

/// Gradients (dx, dscale, dbias) from the saved mean and inverse standard deviation.
pub fn backward(
    sh: &BnShape,
    x: &[f32],
    dy: &[f32],
    scale: &[f32],
    mean: &[f64],
    inv_std: &[f64],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let p = sh.params();
    let m = sh.m() as f64;
    let (mut dbias, mut dscale) = (vec![0f64; p], vec![0f64; p]);
    for (i, (&v, &g)) in x.iter().zip(dy).enumerate() {
        let k = sh.param_of(i);
        dbias[k] += g as f64;
        dscale[k] += g as f64 * (v as f64 - mean[k]) * inv_std[k];
    }
    let dx = x
        .iter()
        .zip(dy)
        .enumerate()
        .map(|(i, (&v, &g))| {
            let k = sh.param_of(i);
            let xhat = (v as f64 - mean[k]) * inv_std[k];
            (scale[k] as f64 * inv_std[k] / m * (m * g as f64 - dbias[k] - xhat * dscale[k])) as f32
        })
        .collect();
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    (dx, f(dscale), f(dbias))
}
