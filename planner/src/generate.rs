//! Traces from model descriptions, for the families DTR's four logs lack: encoder-decoders with
//! long skip connections (U-Net), multi-branch cells (Inception), two models trained together
//! (a GAN), recurrent chains, and attention at long sequence lengths.
//!
//! A model is layers over earlier layers (and model inputs), each with its output bytes, its
//! arithmetic and its weights (own, or shared with another layer). The trace is one training
//! iteration as a framework runs it: the forward pass, a loss per output, the backward pass in
//! reverse (each layer's backward reads its gradient, the activations it saved and its weights,
//! and makes its inputs' gradients; a gradient with several contributions is summed first),
//! then the optimizer updating every weight in place; every storage freed after its last use.
//! Times come from a device profile's roofline ([`Profile::kernel_time`]), float32.

use crate::model::{Op, Step, Storage, Trace};
use simgpu_model::Profile;

/// Where a layer's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A model input (bytes in [`Model::inputs`]).
    Input(usize),
    Layer(usize),
}

/// A layer's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    None,
    /// Its own, of these bytes.
    Own(u64),
    /// Those of an earlier layer (a recurrent cell, a discriminator applied twice).
    Shared(usize),
}

#[derive(Debug, Clone)]
pub struct Layer {
    pub name: String,
    pub inputs: Vec<Node>,
    pub out_bytes: u64,
    pub flops: f64,
    pub weight: Weight,
}

#[derive(Debug, Clone, Default)]
pub struct Model {
    pub inputs: Vec<u64>,
    pub layers: Vec<Layer>,
    /// The layers a loss reads.
    pub losses: Vec<usize>,
}

const F32: u64 = 4;
/// The fraction of peak arithmetic a layer reaches (the profiles' cuDNN efficiencies are
/// about this).
const EFF: f64 = 0.55;

impl Model {
    pub fn input(&mut self, bytes: u64) -> Node {
        self.inputs.push(bytes);
        Node::Input(self.inputs.len() - 1)
    }

    pub fn layer(
        &mut self,
        name: &str,
        inputs: &[Node],
        out_bytes: u64,
        flops: f64,
        weight: Weight,
    ) -> Node {
        self.layers.push(Layer {
            name: name.into(),
            inputs: inputs.to_vec(),
            out_bytes,
            flops,
            weight,
        });
        Node::Layer(self.layers.len() - 1)
    }

    /// A 2-D convolution (`r` x `r`, `stride`) of `n` x `c` x `hw` x `hw` into `k` channels.
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &mut self,
        name: &str,
        x: Node,
        n: u64,
        c: u64,
        k: u64,
        hw: u64,
        r: u64,
        stride: u64,
    ) -> Node {
        let o = (hw / stride).max(1);
        let flops = 2.0 * (n * k * c * r * r * o * o) as f64;
        self.layer(
            name,
            &[x],
            n * k * o * o * F32,
            flops,
            Weight::Own(k * c * r * r * F32),
        )
    }

    /// A dense layer of `rows` x `d_in` into `d_out`.
    pub fn dense(&mut self, name: &str, x: &[Node], rows: u64, d_in: u64, d_out: u64) -> Node {
        let flops = 2.0 * (rows * d_in * d_out) as f64;
        self.layer(
            name,
            x,
            rows * d_out * F32,
            flops,
            Weight::Own(d_in * d_out * F32),
        )
    }

    /// An element-wise or data-movement layer (pooling, concatenation, softmax, sum).
    pub fn memory_bound(&mut self, name: &str, x: &[Node], out_bytes: u64) -> Node {
        self.layer(name, x, out_bytes, 0.0, Weight::None)
    }

    /// The training iteration's trace on profile `p`.
    pub fn trace(&self, p: &Profile) -> Trace {
        let mut t = Trace::default();
        let new = |t: &mut Trace, size: u64, constant: bool, producer: Option<usize>| {
            t.storages.push(Storage {
                size,
                constant,
                producer,
            });
            t.storages.len() - 1
        };
        let inputs: Vec<usize> = self
            .inputs
            .iter()
            .map(|&b| new(&mut t, b, true, None))
            .collect();
        // Weights: each layer's own, or the one it shares.
        let mut weight: Vec<Option<usize>> = Vec::new();
        for l in &self.layers {
            let w = match l.weight {
                Weight::None => None,
                Weight::Own(b) => Some(new(&mut t, b, true, None)),
                Weight::Shared(j) => weight[j],
            };
            weight.push(w);
        }
        let bytes = |t: &Trace, v: &[usize]| v.iter().map(|&s| t.storages[s].size).sum::<u64>();
        let time = |flops: f64, moved: u64| p.kernel_time(flops, moved as f64, EFF, false);
        let mut act: Vec<usize> = Vec::new();
        let of = |act: &[usize], n: Node| match n {
            Node::Input(i) => inputs[i],
            Node::Layer(j) => act[j],
        };
        let push = |t: &mut Trace, op: Op| {
            t.ops.push(op);
            t.ops.len() - 1
        };
        for l in &self.layers {
            let mut ins: Vec<usize> = l.inputs.iter().map(|&n| of(&act, n)).collect();
            ins.extend(weight[act.len()]);
            uniq(&mut ins);
            let i = t.ops.len();
            let out = new(&mut t, l.out_bytes, false, Some(i));
            let secs = time(l.flops, bytes(&t, &ins) + l.out_bytes);
            push(&mut t, Op::new(&l.name, secs, ins, vec![out]));
            act.push(out);
        }
        // Gradients flowing into each layer's output.
        let mut grads: Vec<Vec<usize>> = vec![Vec::new(); self.layers.len()];
        for &l in &self.losses {
            let i = t.ops.len();
            let g = new(&mut t, self.layers[l].out_bytes, false, Some(i));
            let secs = time(0.0, 2 * self.layers[l].out_bytes);
            let op = Op {
                backward: true,
                ..Op::new("loss", secs, vec![act[l]], vec![g])
            };
            push(&mut t, op);
            grads[l].push(g);
        }
        let mut wgrads: Vec<(usize, usize)> = Vec::new();
        for (j, l) in self.layers.iter().enumerate().rev() {
            let g = match grads[j].len() {
                0 => continue,
                1 => grads[j][0],
                _ => {
                    let i = t.ops.len();
                    let sum = new(&mut t, l.out_bytes, false, Some(i));
                    let secs = time(0.0, bytes(&t, &grads[j]) + l.out_bytes);
                    let op = Op {
                        backward: true,
                        ..Op::new(
                            &format!("{}_gradsum", l.name),
                            secs,
                            grads[j].clone(),
                            vec![sum],
                        )
                    };
                    push(&mut t, op);
                    sum
                }
            };
            let i = t.ops.len();
            let mut outs = Vec::new();
            for &n in &l.inputs {
                if let Node::Layer(k) = n {
                    let gk = new(&mut t, self.layers[k].out_bytes, false, Some(i));
                    grads[k].push(gk);
                    outs.push(gk);
                }
            }
            if let Some(w) = weight[j] {
                let size = t.storages[w].size;
                let gw = new(&mut t, size, false, Some(i));
                wgrads.push((w, gw));
                outs.push(gw);
            }
            let mut ins = vec![g, act[j]];
            ins.extend(l.inputs.iter().map(|&n| of(&act, n)));
            ins.extend(weight[j]);
            uniq(&mut ins);
            let secs = time(2.0 * l.flops, bytes(&t, &ins) + bytes(&t, &outs));
            let op = Op {
                backward: true,
                ..Op::new(&format!("{}_bwd", l.name), secs, ins, outs)
            };
            push(&mut t, op);
        }
        for (w, gw) in wgrads {
            let size = t.storages[w].size;
            let op = Op {
                backward: true,
                mutates: vec![w],
                ..Op::new(
                    "sgd",
                    time(2.0 * size as f64 / 4.0, 3 * size),
                    vec![gw],
                    vec![],
                )
            };
            push(&mut t, op);
        }
        // Program order, each storage freed after its last use.
        let mut last = vec![None; t.storages.len()];
        for (i, op) in t.ops.iter().enumerate() {
            for &s in op.inputs.iter().chain(&op.outputs).chain(&op.mutates) {
                last[s] = Some(i);
            }
        }
        let mut frees: Vec<Vec<usize>> = vec![Vec::new(); t.ops.len()];
        for (s, l) in last.iter().enumerate() {
            if let Some(i) = l
                && !t.storages[s].constant
            {
                frees[*i].push(s);
            }
        }
        for (i, f) in frees.into_iter().enumerate() {
            t.steps.push(Step::Op(i));
            t.steps.extend(f.into_iter().map(Step::Free));
        }
        t
    }
}

/// The families, by name; `scale` multiplies their depth or length (1: a few hundred
/// operations).
pub const FAMILIES: &[&str] = &["unet", "inception", "gan", "rnn", "attention"];

/// Family `name` at `scale`, with batch `n`; `None` for an unknown name.
pub fn family(name: &str, scale: usize, n: u64) -> Option<Model> {
    let scale = scale.max(1) as u64;
    let mut m = Model::default();
    match name {
        // An encoder-decoder whose decoder concatenates each encoder level (long skips).
        "unet" => {
            let (mut hw, mut c) = (128u64, 3u64);
            let mut x = m.input(n * c * hw * hw * F32);
            let mut skips = Vec::new();
            let depth = 3 + scale;
            for d in 0..depth {
                let k = 32 << d.min(4);
                x = m.conv(&format!("enc{d}a"), x, n, c, k, hw, 3, 1);
                x = m.conv(&format!("enc{d}b"), x, n, k, k, hw, 3, 1);
                skips.push((x, k, hw));
                hw = (hw / 2).max(1);
                x = m.memory_bound(&format!("pool{d}"), &[x], n * k * hw * hw * F32);
                c = k;
            }
            for (d, &(skip, k, shw)) in skips.iter().enumerate().rev() {
                let up = m.conv(&format!("up{d}"), x, n, c, k, shw, 2, 1);
                let cat =
                    m.memory_bound(&format!("cat{d}"), &[up, skip], 2 * n * k * shw * shw * F32);
                x = m.conv(&format!("dec{d}"), cat, n, 2 * k, k, shw, 3, 1);
                c = k;
            }
            let out = m.conv("head", x, n, c, 2, 128, 1, 1);
            m.losses.push(layer_of(out));
        }
        // Inception-style cells: four branches from one input, concatenated.
        "inception" => {
            let hw = 35;
            let c = 192;
            let x0 = m.input(n * 3 * 299 * 299 * F32);
            let mut x = m.conv("stem", x0, n, 3, c, 299 / 8, 3, 1);
            for cell in 0..4 * scale {
                let b1 = m.conv(&format!("c{cell}_1x1"), x, n, c, 64, hw, 1, 1);
                let b2a = m.conv(&format!("c{cell}_3x3r"), x, n, c, 48, hw, 1, 1);
                let b2 = m.conv(&format!("c{cell}_3x3"), b2a, n, 48, 64, hw, 3, 1);
                let b3a = m.conv(&format!("c{cell}_5x5r"), x, n, c, 64, hw, 1, 1);
                let b3b = m.conv(&format!("c{cell}_5x5a"), b3a, n, 64, 96, hw, 3, 1);
                let b3 = m.conv(&format!("c{cell}_5x5b"), b3b, n, 96, 32, hw, 3, 1);
                let b4a = m.memory_bound(&format!("c{cell}_pool"), &[x], n * c * hw * hw * F32);
                let b4 = m.conv(&format!("c{cell}_poolproj"), b4a, n, c, 32, hw, 1, 1);
                x = m.memory_bound(
                    &format!("c{cell}_cat"),
                    &[b1, b2, b3, b4],
                    n * c * hw * hw * F32,
                );
            }
            let pooled = m.memory_bound("avgpool", &[x], n * c * F32);
            let y = m.dense("fc", &[pooled], n, c, 1000);
            m.losses.push(layer_of(y));
        }
        // A generator and a discriminator trained together: D reads G's images and real ones
        // (its weights shared), both losses in one iteration.
        "gan" => {
            let z = m.input(n * 128 * F32);
            let real = m.input(n * 3 * 64 * 64 * F32);
            let mut g = m.dense("g_fc", &[z], n, 128, 512 * 4 * 4);
            let (mut c, mut hw) = (512u64, 4u64);
            for d in 0..3 + scale.min(2) {
                hw *= 2;
                let k = (c / 2).max(3);
                g = m.conv(&format!("g_up{d}"), g, n, c, k, hw, 3, 1);
                c = k;
            }
            let fake = m.conv("g_out", g, n, c, 3, hw, 3, 1);
            let mut first: Vec<usize> = Vec::new();
            for (pass, img) in [("fake", fake), ("real", real)] {
                let (mut c, mut h, mut x) = (3u64, hw, img);
                for d in 0..3 + scale.min(2) as usize {
                    let k = 64 << d.min(3);
                    x = if pass == "fake" {
                        let y = m.conv(&format!("d_{pass}{d}"), x, n, c, k, h, 4, 2);
                        first.push(layer_of(y));
                        y
                    } else {
                        let o = (h / 2).max(1);
                        let flops = 2.0 * (n * k * c * 16 * o * o) as f64;
                        m.layer(
                            &format!("d_{pass}{d}"),
                            &[x],
                            n * k * o * o * F32,
                            flops,
                            Weight::Shared(first[d]),
                        )
                    };
                    c = k;
                    h = (h / 2).max(1);
                }
                let y = m.dense(&format!("d_{pass}_fc"), &[x], n, c * h * h, 1);
                m.losses.push(layer_of(y));
            }
        }
        // A recurrent chain: one cell, its weights shared, over a long sequence; the head
        // reads every step's state.
        "rnn" => {
            let (hid, steps) = (1024u64, 64 * scale);
            let mut h = m.input(n * hid * F32);
            let mut states = Vec::new();
            let mut cell0 = None;
            for s in 0..steps {
                let x = m.input(n * hid * F32);
                let flops = 2.0 * (n * 2 * hid * 4 * hid) as f64;
                let w = cell0.map_or(Weight::Own(8 * hid * hid * F32), Weight::Shared);
                h = m.layer(&format!("cell{s}"), &[h, x], n * hid * F32 * 4, flops, w);
                cell0.get_or_insert(layer_of(h));
                states.push(h);
            }
            let cat = m.memory_bound("states", &states, steps * n * hid * F32);
            let y = m.dense("head", &[cat], n * steps, hid, 256);
            m.losses.push(layer_of(y));
        }
        // Transformer layers at a long sequence length: the n x n scores dominate memory.
        "attention" => {
            let (seq, d, heads) = (4096u64, 512u64, 8u64);
            let rows = n * seq;
            let mut x = m.input(rows * d * F32);
            for l in 0..2 * scale {
                let qkv = m.dense(&format!("l{l}_qkv"), &[x], rows, d, 3 * d);
                let sbytes = n * heads * seq * seq * F32;
                let scores = m.layer(
                    &format!("l{l}_scores"),
                    &[qkv],
                    sbytes,
                    2.0 * (n * seq * seq * d) as f64,
                    Weight::None,
                );
                let probs = m.memory_bound(&format!("l{l}_softmax"), &[scores], sbytes);
                let ctx = m.layer(
                    &format!("l{l}_ctx"),
                    &[probs, qkv],
                    rows * d * F32,
                    2.0 * (n * seq * seq * d) as f64,
                    Weight::None,
                );
                let o = m.dense(&format!("l{l}_proj"), &[ctx, x], rows, d, d);
                let h = m.dense(&format!("l{l}_mlp1"), &[o], rows, d, 4 * d);
                x = m.dense(&format!("l{l}_mlp2"), &[h, o], rows, 4 * d, d);
            }
            let y = m.dense("head", &[x], rows, d, 256);
            m.losses.push(layer_of(y));
        }
        _ => return None,
    }
    Some(m)
}

/// Drops repeats, keeping the first of each.
fn uniq(v: &mut Vec<usize>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(*x));
}

fn layer_of(n: Node) -> usize {
    match n {
        Node::Layer(j) => j,
        Node::Input(_) => unreachable!("a layer's own output"),
    }
}
