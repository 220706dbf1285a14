//! The arithmetic of the simulated cuDNN, on dense float32 arrays in logical (N, C, D, H, W)
//! order. Accumulation is float32 in a fixed order, as cuDNN's FLOAT compute type does; every
//! algorithm of a direction computes the same sums (algorithms differ in time and workspace,
//! see `simgpu_model::conv`), so results are deterministic.

use simgpu_model::conv::Geom;

/// Cross-correlation (cuDNN's CROSS_CORRELATION) or true convolution (filter flipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvSpec {
    pub geom: Geom,
    pub flip: bool,
}

impl ConvSpec {
    fn out(&self) -> [usize; 3] {
        let o = self.geom.output().expect("checked by the caller");
        [o[0] as usize, o[1] as usize, o[2] as usize]
    }

    fn dims(&self) -> (usize, usize, usize, usize, usize) {
        let g = &self.geom;
        let groups = g.groups as usize;
        (
            g.n as usize,
            g.c as usize,
            g.k as usize,
            groups,
            g.c as usize / groups,
        )
    }

    /// Calls `f(x_index, w_index, y_index)` for every multiply-add of the convolution.
    fn for_each_tap(&self, mut f: impl FnMut(usize, usize, usize)) {
        let g = &self.geom;
        let (n, c, k, groups, cg) = self.dims();
        let kg = k / groups;
        let inp = g.input.map(|v| v as usize);
        let flt = g.filter.map(|v| v as usize);
        let out = self.out();
        let in_vol = inp[0] * inp[1] * inp[2];
        let out_vol = out[0] * out[1] * out[2];
        let f_vol = flt[0] * flt[1] * flt[2];
        for b in 0..n {
            for ko in 0..k {
                let grp = ko / kg;
                for od in 0..out[0] {
                    for oh in 0..out[1] {
                        for ow in 0..out[2] {
                            let yi = (b * k + ko) * out_vol + (od * out[1] + oh) * out[2] + ow;
                            for ci in 0..cg {
                                let cx = grp * cg + ci;
                                for t in 0..flt[0] {
                                    let Some(id) = pos(od, t, 0, g) else { continue };
                                    if id >= inp[0] {
                                        continue;
                                    }
                                    for r in 0..flt[1] {
                                        let Some(ih) = pos(oh, r, 1, g) else { continue };
                                        if ih >= inp[1] {
                                            continue;
                                        }
                                        for s in 0..flt[2] {
                                            let Some(iw) = pos(ow, s, 2, g) else { continue };
                                            if iw >= inp[2] {
                                                continue;
                                            }
                                            let xi = (b * c + cx) * in_vol
                                                + (id * inp[1] + ih) * inp[2]
                                                + iw;
                                            let (ft, fr, fs) = if self.flip {
                                                (flt[0] - 1 - t, flt[1] - 1 - r, flt[2] - 1 - s)
                                            } else {
                                                (t, r, s)
                                            };
                                            let wi = (ko * cg + ci) * f_vol
                                                + (ft * flt[1] + fr) * flt[2]
                                                + fs;
                                            f(xi, wi, yi);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Input position of output `o`, filter tap `t` in spatial dimension `i`, if not in the padding.
fn pos(o: usize, t: usize, i: usize, g: &Geom) -> Option<usize> {
    let p = (o as u64 * g.stride[i] + t as u64 * g.dilation[i]).checked_sub(g.pad[i])?;
    Some(p as usize)
}

/// `out = alpha * acc + beta * out`; `out` is not read when beta is 0 (cuDNN's rule).
pub fn blend(out: &mut [f32], acc: &[f32], alpha: f32, beta: f32) {
    for (o, a) in out.iter_mut().zip(acc) {
        *o = if beta == 0.0 {
            alpha * a
        } else {
            alpha * a + beta * *o
        };
    }
}

pub fn conv_forward(spec: &ConvSpec, x: &[f32], w: &[f32], y: &mut [f32], alpha: f32, beta: f32) {
    let mut acc = vec![0f32; y.len()];
    spec.for_each_tap(|xi, wi, yi| acc[yi] += x[xi] * w[wi]);
    blend(y, &acc, alpha, beta);
}

pub fn conv_backward_data(
    spec: &ConvSpec,
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    alpha: f32,
    beta: f32,
) {
    let mut acc = vec![0f32; dx.len()];
    spec.for_each_tap(|xi, wi, yi| acc[xi] += dy[yi] * w[wi]);
    blend(dx, &acc, alpha, beta);
}

pub fn conv_backward_filter(
    spec: &ConvSpec,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    alpha: f32,
    beta: f32,
) {
    let mut acc = vec![0f32; dw.len()];
    spec.for_each_tap(|xi, wi, yi| acc[wi] += x[xi] * dy[yi]);
    blend(dw, &acc, alpha, beta);
}

/// db[k] = alpha * sum over n and space of dy[n, k, ...] + beta * db[k].
pub fn conv_backward_bias(dy: &[f32], n: usize, k: usize, db: &mut [f32], alpha: f32, beta: f32) {
    let vol = dy.len() / (n * k).max(1);
    let mut acc = vec![0f32; k];
    for b in 0..n {
        for (ko, a) in acc.iter_mut().enumerate() {
            let start = (b * k + ko) * vol;
            *a += dy[start..start + vol].iter().sum::<f32>();
        }
    }
    blend(db, &acc, alpha, beta);
}

/// cudnnActivationMode_t values.
pub mod act {
    pub const SIGMOID: i32 = 0;
    pub const RELU: i32 = 1;
    pub const TANH: i32 = 2;
    pub const CLIPPED_RELU: i32 = 3;
    pub const ELU: i32 = 4;
    pub const IDENTITY: i32 = 5;
    pub const SWISH: i32 = 6;
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

pub fn activation_forward(mode: i32, coef: f32, x: &[f32]) -> Option<Vec<f32>> {
    let f = |v: f32| match mode {
        act::SIGMOID => Some(sigmoid(v)),
        act::RELU => Some(v.max(0.0)),
        act::TANH => Some(v.tanh()),
        act::CLIPPED_RELU => Some(v.max(0.0).min(coef)),
        act::ELU => Some(if v > 0.0 { v } else { coef * (v.exp() - 1.0) }),
        act::IDENTITY => Some(v),
        act::SWISH => Some(v * sigmoid(coef * v)),
        _ => None,
    };
    x.iter().map(|&v| f(v)).collect()
}

pub fn activation_backward(
    mode: i32,
    coef: f32,
    y: &[f32],
    dy: &[f32],
    x: &[f32],
) -> Option<Vec<f32>> {
    let mut out = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let (xv, yv, g) = (x[i], y[i], dy[i]);
        out.push(match mode {
            act::SIGMOID => g * yv * (1.0 - yv),
            act::RELU => {
                if xv > 0.0 {
                    g
                } else {
                    0.0
                }
            }
            act::TANH => g * (1.0 - yv * yv),
            act::CLIPPED_RELU => {
                if xv > 0.0 && xv < coef {
                    g
                } else {
                    0.0
                }
            }
            act::ELU => {
                if xv > 0.0 {
                    g
                } else {
                    g * (yv + coef)
                }
            }
            act::IDENTITY => g,
            act::SWISH => {
                let s = sigmoid(coef * xv);
                g * (s + coef * xv * s * (1.0 - s))
            }
            _ => return None,
        });
    }
    Some(out)
}

/// cudnnPoolingMode_t values.
pub const POOL_MAX: i32 = 0;
pub const POOL_AVG_INCLUDE_PAD: i32 = 1;
pub const POOL_AVG_EXCLUDE_PAD: i32 = 2;
pub const POOL_MAX_DETERMINISTIC: i32 = 3;

/// A pooling window over (D, H, W); 2-d pooling has window depth 1.
#[derive(Debug, Clone, Copy)]
pub struct Pool {
    pub mode: i32,
    pub window: [usize; 3],
    pub pad: [usize; 3],
    pub stride: [usize; 3],
}

impl Pool {
    pub fn output(&self, input: [usize; 3]) -> Option<[usize; 3]> {
        let mut o = [0; 3];
        for i in 0..3 {
            let padded = input[i] + 2 * self.pad[i];
            if self.window[i] == 0 || self.stride[i] == 0 || self.window[i] > padded {
                return None;
            }
            o[i] = (padded - self.window[i]) / self.stride[i] + 1;
        }
        Some(o)
    }

    /// For every output element: the input indices of its window inside the image, and the
    /// window size counting the padding.
    fn windows(&self, nc: usize, input: [usize; 3], mut f: impl FnMut(usize, &[usize], usize)) {
        let out = self.output(input).expect("checked by the caller");
        let in_vol = input.iter().product::<usize>();
        let out_vol = out.iter().product::<usize>();
        let mut idx = Vec::new();
        for p in 0..nc {
            for od in 0..out[0] {
                for oh in 0..out[1] {
                    for ow in 0..out[2] {
                        idx.clear();
                        let o = [od, oh, ow];
                        let mut full = 1;
                        let mut lo = [0isize; 3];
                        for i in 0..3 {
                            lo[i] = (o[i] * self.stride[i]) as isize - self.pad[i] as isize;
                            full *= self.window[i];
                        }
                        for t in 0..self.window[0] {
                            for r in 0..self.window[1] {
                                for s in 0..self.window[2] {
                                    let (d, h, w) = (
                                        lo[0] + t as isize,
                                        lo[1] + r as isize,
                                        lo[2] + s as isize,
                                    );
                                    if d < 0 || h < 0 || w < 0 {
                                        continue;
                                    }
                                    let (d, h, w) = (d as usize, h as usize, w as usize);
                                    if d >= input[0] || h >= input[1] || w >= input[2] {
                                        continue;
                                    }
                                    idx.push(p * in_vol + (d * input[1] + h) * input[2] + w);
                                }
                            }
                        }
                        let oi = p * out_vol + (od * out[1] + oh) * out[2] + ow;
                        f(oi, &idx, full);
                    }
                }
            }
        }
    }

    pub fn forward(
        &self,
        nc: usize,
        input: [usize; 3],
        x: &[f32],
        y_len: usize,
    ) -> Option<Vec<f32>> {
        let mut y = vec![0f32; y_len];
        let mode = self.mode;
        self.windows(nc, input, |oi, idx, full| {
            y[oi] = match mode {
                POOL_MAX | POOL_MAX_DETERMINISTIC => {
                    idx.iter().map(|&i| x[i]).fold(f32::NEG_INFINITY, f32::max)
                }
                POOL_AVG_INCLUDE_PAD => idx.iter().map(|&i| x[i]).sum::<f32>() / full as f32,
                _ => idx.iter().map(|&i| x[i]).sum::<f32>() / idx.len().max(1) as f32,
            };
        });
        matches!(
            mode,
            POOL_MAX | POOL_AVG_INCLUDE_PAD | POOL_AVG_EXCLUDE_PAD | POOL_MAX_DETERMINISTIC
        )
        .then_some(y)
    }

    /// dx for dy; max pooling routes each gradient to the first maximum of its window.
    pub fn backward(&self, nc: usize, input: [usize; 3], x: &[f32], dy: &[f32]) -> Vec<f32> {
        let mut dx = vec![0f32; x.len()];
        let mode = self.mode;
        self.windows(nc, input, |oi, idx, full| match mode {
            POOL_MAX | POOL_MAX_DETERMINISTIC => {
                let mut best: Option<usize> = None;
                for &i in idx {
                    if best.is_none_or(|b| x[i] > x[b]) {
                        best = Some(i);
                    }
                }
                if let Some(b) = best {
                    dx[b] += dy[oi];
                }
            }
            POOL_AVG_INCLUDE_PAD => idx.iter().for_each(|&i| dx[i] += dy[oi] / full as f32),
            _ => idx
                .iter()
                .for_each(|&i| dx[i] += dy[oi] / idx.len().max(1) as f32),
        });
        dx
    }
}

/// cudnnSoftmaxAlgorithm_t / cudnnSoftmaxMode_t values.
pub const SOFTMAX_FAST: i32 = 0;
#[allow(dead_code)] // named for the tests and for readers
pub const SOFTMAX_ACCURATE: i32 = 1;
pub const SOFTMAX_LOG: i32 = 2;
pub const SOFTMAX_MODE_INSTANCE: i32 = 0;
#[allow(dead_code)] // named for the tests and for readers
pub const SOFTMAX_MODE_CHANNEL: i32 = 1;

/// Index groups softmax normalises over: per image (INSTANCE) or per pixel across C (CHANNEL).
fn softmax_groups(mode: i32, n: usize, c: usize, vol: usize) -> Vec<Vec<usize>> {
    if mode == SOFTMAX_MODE_INSTANCE {
        (0..n)
            .map(|b| (b * c * vol..(b + 1) * c * vol).collect())
            .collect()
    } else {
        let mut g = Vec::new();
        for b in 0..n {
            for p in 0..vol {
                g.push((0..c).map(|ch| (b * c + ch) * vol + p).collect());
            }
        }
        g
    }
}

pub fn softmax_forward(
    algo: i32,
    mode: i32,
    n: usize,
    c: usize,
    vol: usize,
    x: &[f32],
) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for g in softmax_groups(mode, n, c, vol) {
        let m = if algo == SOFTMAX_FAST {
            0.0
        } else {
            g.iter().map(|&i| x[i]).fold(f32::NEG_INFINITY, f32::max)
        };
        let sum: f32 = g.iter().map(|&i| (x[i] - m).exp()).sum();
        for &i in &g {
            y[i] = if algo == SOFTMAX_LOG {
                x[i] - m - sum.ln()
            } else {
                (x[i] - m).exp() / sum
            };
        }
    }
    y
}

pub fn softmax_backward(
    algo: i32,
    mode: i32,
    n: usize,
    c: usize,
    vol: usize,
    y: &[f32],
    dy: &[f32],
) -> Vec<f32> {
    let mut dx = vec![0f32; y.len()];
    for g in softmax_groups(mode, n, c, vol) {
        if algo == SOFTMAX_LOG {
            let s: f32 = g.iter().map(|&i| dy[i]).sum();
            for &i in &g {
                dx[i] = dy[i] - y[i].exp() * s;
            }
        } else {
            let s: f32 = g.iter().map(|&i| dy[i] * y[i]).sum();
            for &i in &g {
                dx[i] = y[i] * (dy[i] - s);
            }
        }
    }
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_convolution_flips_the_filter() {
        // 1-d signal [1, 2, 3], filter [1, 0, -1], no padding: cross-correlation 1 - 3 = -2,
        // convolution 3 - 1 = 2.
        let geom = Geom::conv2d(1, 1, 1, 3, 1, 1, 3, (0, 0), (1, 1), (1, 1), 1);
        let x = [1.0, 2.0, 3.0];
        let w = [1.0, 0.0, -1.0];
        let mut y = [0.0];
        conv_forward(&ConvSpec { geom, flip: false }, &x, &w, &mut y, 1.0, 0.0);
        assert_eq!(y, [-2.0]);
        conv_forward(&ConvSpec { geom, flip: true }, &x, &w, &mut y, 1.0, 0.0);
        assert_eq!(y, [2.0]);
    }

    #[test]
    fn beta_zero_does_not_read_the_output() {
        let mut out = [f32::NAN, 1.0];
        blend(&mut out, &[2.0, 2.0], 0.5, 0.0);
        assert_eq!(out, [1.0, 1.0]);
        let mut out = [4.0];
        blend(&mut out, &[2.0], 0.5, 0.25);
        assert_eq!(out, [2.0]);
    }

    #[test]
    fn max_pool_and_its_gradient() {
        let p = Pool {
            mode: POOL_MAX,
            window: [1, 2, 2],
            pad: [0; 3],
            stride: [1, 2, 2],
        };
        let x = [1.0, 5.0, 2.0, 3.0];
        let y = p.forward(1, [1, 2, 2], &x, 1).unwrap();
        assert_eq!(y, vec![5.0]);
        assert_eq!(
            p.backward(1, [1, 2, 2], &x, &[7.0]),
            vec![0.0, 7.0, 0.0, 0.0]
        );
    }

    #[test]
    fn softmax_sums_to_one_and_log_matches() {
        let x = [1.0, 2.0, 3.0, -1.0];
        let y = softmax_forward(SOFTMAX_ACCURATE, SOFTMAX_MODE_CHANNEL, 1, 4, 1, &x);
        assert!((y.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let l = softmax_forward(SOFTMAX_LOG, SOFTMAX_MODE_CHANNEL, 1, 4, 1, &x);
        for (a, b) in y.iter().zip(&l) {
            assert!((a.ln() - b).abs() < 1e-5);
        }
    }
}
