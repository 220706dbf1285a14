//! Kernels a program hands the driver as PTX text, computed by interpreting their PTX.
//!
//! TensorFlow compiles some element-wise kernels at run time (all named `main_kernel`) and
//! loads them as PTX: their name does not say what they compute, their instructions do. The
//! interpreter runs every thread of the grid one after another over the launch's parameter
//! block. It knows the integer, bitwise, comparison, conversion and IEEE float instructions such
//! kernels use, with PTX's semantics (`.ftz` flushes subnormals, 32-bit operations act on the
//! register's low half); `.approx` maths (rsqrt, rcp, sqrt, div, ex2, lg2, sin, cos, tanh) is
//! computed correctly rounded, which the GPU's approximations may miss by a few ulp; anything
//! else (shared memory, barriers, atomics, calls) leaves the kernel uncomputed, as does a load from memory that holds no bytes. Stores
//! are kept aside and written only once every thread has finished, so a kernel is computed
//! whole or not at all. Threads run in sequence, which is exact for kernels whose threads do
//! not communicate (none of the instructions that would let them is known here).

use super::{Mem, Skip};
use crate::fatbin::{KernelParams, PtxEntry};
use std::collections::{BTreeMap, HashMap};

mod decode;
use decode::*;

/// More steps than this (all threads together) and the kernel is left uncomputed.
const MAX_STEPS: u64 = 50_000_000;

fn layout(s: impl Into<String>) -> Skip {
    Skip::Layout(s.into())
}

fn mask(v: u64, w: u32) -> u64 {
    if w >= 64 { v } else { v & ((1u64 << w) - 1) }
}

fn sext(v: u64, w: u32) -> i64 {
    if w >= 64 {
        v as i64
    } else {
        ((v << (64 - w)) as i64) >> (64 - w)
    }
}

fn as_f(v: u64, w: u32, ftz: bool) -> f64 {
    let x = if w == 32 {
        f32::from_bits(v as u32) as f64
    } else {
        f64::from_bits(v)
    };
    if ftz && w == 32 && x != 0.0 && x.abs() < f32::MIN_POSITIVE as f64 {
        0.0f64.copysign(x)
    } else {
        x
    }
}

fn from_f(x: f64, w: u32, ftz: bool) -> u64 {
    if w == 32 {
        let mut y = x as f32;
        if ftz && y != 0.0 && y.abs() < f32::MIN_POSITIVE {
            y = 0.0f32.copysign(y);
        }
        y.to_bits() as u64
    } else {
        x.to_bits()
    }
}

/// One thread's state.
struct Thread<'a> {
    regs: Vec<u64>,
    tid: [u32; 3],
    ntid: [u32; 3],
    ctaid: [u32; 3],
    nctaid: [u32; 3],
    params: &'a KernelParams,
    pblock: &'a [u8],
}

/// Memory as the launch sees it: the device's bytes under the stores made so far. Reads go
/// through a cache of 4 KiB pages that hold bytes whole (other reads ask the memory directly).
struct Overlay<'a> {
    mem: &'a mut dyn Mem,
    /// (address, value, bytes), in program order.
    stores: Vec<(u64, u64, usize)>,
    /// The span the stores cover, to skip looking through them.
    stored: (u64, u64),
    pages: HashMap<u64, Option<Vec<u8>>>,
}

const PAGE: u64 = 4096;

impl Overlay<'_> {
    fn device(&mut self, addr: u64, n: usize) -> Result<[u8; 8], Skip> {
        let mut b = [0u8; 8];
        let page = addr / PAGE;
        if page == (addr + n as u64 - 1) / PAGE {
            let mem = &mut *self.mem;
            let cached = self.pages.entry(page).or_insert_with(|| {
                mem.holds(page * PAGE, PAGE)
                    .then(|| mem.load(page * PAGE, PAGE as usize))
            });
            if let Some(bytes) = cached {
                let at = (addr - page * PAGE) as usize;
                b[..n].copy_from_slice(&bytes[at..at + n]);
                return Ok(b);
            }
        }
        if self.mem.holds(addr, n as u64) {
            b[..n].copy_from_slice(&self.mem.load(addr, n));
            return Ok(b);
        }
        Err(Skip::NoBytes)
    }

    fn load(&mut self, addr: u64, n: usize) -> Result<u64, Skip> {
        let end = addr + n as u64;
        if self.stores.is_empty() || end <= self.stored.0 || addr >= self.stored.1 {
            return Ok(u64::from_le_bytes(self.device(addr, n)?));
        }
        // Bytes stored by this launch win over the device's, the latest store first.
        let mut b = [0u8; 8];
        let mut have = [false; 8];
        for &(a, v, len) in self.stores.iter().rev() {
            for k in 0..len as u64 {
                let at = a + k;
                if at >= addr && at < end && !have[(at - addr) as usize] {
                    have[(at - addr) as usize] = true;
                    b[(at - addr) as usize] = v.to_le_bytes()[k as usize];
                }
            }
            if have[..n].iter().all(|h| *h) {
                return Ok(u64::from_le_bytes(b));
            }
        }
        let dev = self.device(addr, n)?;
        for k in 0..n {
            if !have[k] {
                b[k] = dev[k];
            }
        }
        Ok(u64::from_le_bytes(b))
    }

    fn store(&mut self, addr: u64, v: u64, n: usize) {
        if self.stores.is_empty() {
            self.stored = (addr, addr + n as u64);
        }
        self.stored = (self.stored.0.min(addr), self.stored.1.max(addr + n as u64));
        self.stores.push((addr, v, n));
    }

    /// Writes the stores, in runs of contiguous bytes, if every run holds bytes.
    fn commit(self) -> Result<(), Skip> {
        let mut order: Vec<usize> = (0..self.stores.len()).collect();
        order.sort_by_key(|&k| (self.stores[k].0, k));
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for k in order {
            let (a, v, n) = self.stores[k];
            let bytes = &v.to_le_bytes()[..n];
            match runs.last_mut() {
                Some((s, run)) if *s + run.len() as u64 == a => run.extend_from_slice(bytes),
                Some((s, run)) if a < *s + run.len() as u64 => {
                    // Overlapping stores: the bytes in program order.
                    return Self::commit_bytes(self.mem, &self.stores);
                }
                _ => runs.push((a, bytes.to_vec())),
            }
        }
        if !runs.iter().all(|(a, v)| self.mem.holds(*a, v.len() as u64)) {
            return Err(Skip::NoBytes);
        }
        for (a, v) in runs {
            self.mem.store(a, &v);
        }
        Ok(())
    }

    /// The general case: byte by byte, the last store of each byte winning.
    fn commit_bytes(mem: &mut dyn Mem, stores: &[(u64, u64, usize)]) -> Result<(), Skip> {
        let mut bytes: BTreeMap<u64, u8> = BTreeMap::new();
        for &(a, v, n) in stores {
            for (k, b) in v.to_le_bytes().iter().take(n).enumerate() {
                bytes.insert(a + k as u64, *b);
            }
        }
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for (&a, &b) in &bytes {
            match runs.last_mut() {
                Some((s, v)) if *s + v.len() as u64 == a => v.push(b),
                _ => runs.push((a, vec![b])),
            }
        }
        if !runs.iter().all(|(a, v)| mem.holds(*a, v.len() as u64)) {
            return Err(Skip::NoBytes);
        }
        for (a, v) in runs {
            mem.store(a, &v);
        }
        Ok(())
    }
}

impl Thread<'_> {
    fn get(&self, o: &Opd) -> Result<u64, Skip> {
        Ok(match o {
            Opd::Reg(r) => self.regs[*r],
            Opd::Imm(v) => *v,
            Opd::Special(w, a) => {
                [self.tid, self.ntid, self.ctaid, self.nctaid][*w as usize][*a] as u64
            }
            _ => return Err(layout(format!("operand {o:?} as a value"))),
        })
    }
    fn set(&mut self, o: &Opd, v: u64) -> Result<(), Skip> {
        match o {
            Opd::Reg(r) => {
                self.regs[*r] = v;
                Ok(())
            }
            _ => Err(layout(format!("destination {o:?}"))),
        }
    }
    fn addr(&self, o: &Opd) -> Result<(Base, u64), Skip> {
        match o {
            Opd::Addr(b @ Base::Reg(r), off) => Ok((*b, self.regs[*r].wrapping_add(*off as u64))),
            Opd::Addr(b @ Base::Param(_), off) => Ok((*b, *off as u64)),
            _ => Err(layout(format!("address {o:?}"))),
        }
    }
    fn param(&self, i: usize, off: u64, n: usize) -> Result<u64, Skip> {
        let (start, size) = *self
            .params
            .params
            .get(i)
            .ok_or_else(|| layout("parameter ordinal"))?;
        let at = start + off as usize;
        if off as usize + n > size || at + n > self.pblock.len() {
            return Err(layout("load past a parameter"));
        }
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&self.pblock[at..at + n]);
        Ok(u64::from_le_bytes(b))
    }
}

/// Runs one thread to its end; the number of instructions it took.
fn run_thread(p: &Program, t: &mut Thread, mem: &mut Overlay, budget: u64) -> Result<u64, Skip> {
    let mut pc = 0usize;
    let mut steps = 0u64;
    while pc < p.insts.len() {
        steps += 1;
        if steps > budget {
            return Err(layout("too many steps for the host"));
        }
        let i = &p.insts[pc];
        pc += 1;
        if let Some((g, neg)) = i.guard
            && ((t.regs[g] != 0) == neg)
        {
            continue;
        }
        let (ty, ftz) = (i.ty, i.flags & FTZ != 0);
        let o = &i.opds;
        let need = |n: usize| -> Result<(), Skip> {
            if o.len() == n {
                Ok(())
            } else {
                Err(layout(format!("{} with {} operands", i.op, o.len())))
            }
        };
        let unsupported = || layout(format!("PTX instruction {}.{}", i.op, i.mods.join(".")));
        match i.code {
            Op::Ret => break,
            Op::Bra => match o.first() {
                Some(Opd::Label(l)) => pc = *l,
                _ => return Err(unsupported()),
            },
            Op::Ld | Op::St => {
                let ty = ty.ok_or_else(unsupported)?;
                let w = (bits(ty) / 8) as usize;
                let global = i.flags & GLOBAL != 0;
                let space_ok = global || i.flags & PARAM != 0;
                if !space_ok || w == 0 || i.flags & VOLATILE_OR_SHARED != 0 {
                    return Err(unsupported());
                }
                need(2)?;
                let load = i.code == Op::Ld;
                let (data, at) = if load { (&o[0], &o[1]) } else { (&o[1], &o[0]) };
                let n = match data {
                    Opd::Vector(v) => v.len(),
                    _ => 1,
                };
                let (base, a) = t.addr(at)?;
                for k in 0..n {
                    let r = match data {
                        Opd::Vector(v) => Opd::Reg(v[k]),
                        d => d.clone(),
                    };
                    let a = a + (k * w) as u64;
                    if load {
                        let v = match base {
                            Base::Param(pi) => t.param(pi, a, w)?,
                            Base::Reg(_) if global => mem.load(a, w)?,
                            _ => return Err(unsupported()),
                        };
                        let v = match ty {
                            Ty::S(bw) => sext(v, bw) as u64,
                            _ => v,
                        };
                        t.set(&r, v)?;
                    } else {
                        if !global {
                            return Err(unsupported());
                        }
                        let v = t.get(&r)?;
                        mem.store(a, v, w);
                    }
                }
            }
            Op::Mov => {
                need(2)?;
                let v = t.get(&o[1])?;
                t.set(&o[0], v)?;
            }
            Op::Setp => {
                need(3)?;
                let ty = ty.ok_or_else(unsupported)?;
                let cmp = i.mods.first().map(String::as_str).unwrap_or("");
                let (a, b) = (t.get(&o[1])?, t.get(&o[2])?);
                let r = compare(cmp, ty, a, b, ftz).ok_or_else(unsupported)?;
                t.set(&o[0], r as u64)?;
            }
            Op::Selp => {
                need(4)?;
                let c = t.get(&o[3])? != 0;
                let v = if c { t.get(&o[1])? } else { t.get(&o[2])? };
                t.set(&o[0], v)?;
            }
            Op::Cvt => {
                need(2)?;
                let (dt, st) = i.cvt.ok_or_else(unsupported)?;
                let rnd = i.mods.first().map(String::as_str).unwrap_or("");
                let v = convert(t.get(&o[1])?, dt, st, rnd, ftz).ok_or_else(unsupported)?;
                t.set(&o[0], v)?;
            }
            _ => {
                let ty = ty.ok_or_else(unsupported)?;
                let v = arith(i, ty, t, ftz).ok_or_else(unsupported)?;
                t.set(&o[0], v)?;
            }
        }
    }
    Ok(steps)
}

fn compare(cmp: &str, ty: Ty, a: u64, b: u64, ftz: bool) -> Option<bool> {
    use std::cmp::Ordering::*;
    let ord = match ty {
        Ty::S(w) => Some(sext(a, w).cmp(&sext(b, w))),
        Ty::U(w) => Some(mask(a, w).cmp(&mask(b, w))),
        Ty::Pred => Some((a != 0).cmp(&(b != 0))),
        Ty::F(w) => as_f(a, w, ftz).partial_cmp(&as_f(b, w, ftz)),
    };
    let float = matches!(ty, Ty::F(_));
    // Float comparisons are ordered (false on NaN) unless suffixed `u` (true on NaN).
    let (base, unordered_true) = match cmp {
        "equ" | "neu" | "ltu" | "leu" | "gtu" | "geu" if float => (&cmp[..2], true),
        _ => (cmp, false),
    };
    let Some(o) = ord else {
        return Some(match cmp {
            "nan" => true,
            "num" => false,
            _ => unordered_true,
        });
    };
    Some(match (base, float) {
        ("eq", _) => o == Equal,
        ("ne", _) => o != Equal,
        ("lt", _) | ("lo", false) => o == Less,
        ("le", _) | ("ls", false) => o != Greater,
        ("gt", _) | ("hi", false) => o == Greater,
        ("ge", _) | ("hs", false) => o != Less,
        ("num", true) => true,
        ("nan", true) => false,
        _ => return None,
    })
}

fn convert(v: u64, dt: Ty, st: Ty, rnd: &str, ftz: bool) -> Option<u64> {
    Some(match (dt, st) {
        (Ty::F(dw), Ty::F(sw)) => {
            let x = as_f(v, sw, ftz);
            // The integer roundings keep the type: round to an integral value.
            let x = match rnd {
                "rzi" => x.trunc(),
                "rni" => x.round_ties_even(),
                "rmi" => x.floor(),
                "rpi" => x.ceil(),
                _ => x,
            };
            from_f(x, dw, ftz)
        }
        (Ty::F(dw), Ty::S(sw)) => {
            let x = sext(v, sw);
            if dw == 32 {
                (x as f32).to_bits() as u64
            } else {
                (x as f64).to_bits()
            }
        }
        (Ty::F(dw), Ty::U(sw)) => {
            let x = mask(v, sw);
            if dw == 32 {
                (x as f32).to_bits() as u64
            } else {
                (x as f64).to_bits()
            }
        }
        (Ty::S(dw) | Ty::U(dw), Ty::F(sw)) => {
            let x = as_f(v, sw, ftz);
            let r = match rnd {
                "rzi" => x.trunc(),
                "rni" => x.round_ties_even(),
                "rmi" => x.floor(),
                "rpi" => x.ceil(),
                _ => return None,
            };
            // Out of range saturates, NaN is 0 (PTX's rule, Rust's `as` too).
            let i = match dt {
                Ty::S(64) => r as i64 as u64,
                Ty::S(32) => r as i32 as u32 as u64,
                Ty::U(64) => r as u64,
                Ty::U(32) => r as u32 as u64,
                _ => return None,
            };
            mask(i, dw)
        }
        (Ty::S(dw) | Ty::U(dw), Ty::S(sw)) => mask(sext(v, sw) as u64, dw),
        (Ty::S(dw) | Ty::U(dw), Ty::U(sw)) => mask(mask(v, sw), dw),
        _ => return None,
    })
}

fn arith(i: &Inst, ty: Ty, t: &Thread, ftz: bool) -> Option<u64> {
    let o = &i.opds;
    let val = |k: usize| o.get(k).and_then(|x| t.get(x).ok());
    let has = |flag: u16| i.flags & flag != 0;
    if let Ty::F(w) = ty {
        // `.approx` and `.full` results are computed correctly rounded (in f64, rounded once
        // to the type): the GPU's approximations may differ from them by a few ulp, so results
        // of such kernels agree with a CPU's within a tolerance, not bit for bit.
        let approx = has(APPROX);
        let f = |k: usize| val(k).map(|v| as_f(v, w, ftz));
        let r = match (i.code, o.len()) {
            (Op::Rsqrt, 2) if approx => 1.0 / f(1)?.sqrt(),
            (Op::Rcp, 2) if approx => 1.0 / f(1)?,
            (Op::Sqrt, 2) if approx => f(1)?.sqrt(),
            (Op::Div, 3) if approx => f(1)? / f(2)?,
            (Op::Ex2, 2) if approx => f(1)?.exp2(),
            (Op::Lg2, 2) if approx => f(1)?.log2(),
            (Op::Sin, 2) if approx => f(1)?.sin(),
            (Op::Cos, 2) if approx => f(1)?.cos(),
            (Op::Tanh, 2) if approx => f(1)?.tanh(),
            _ if approx => return None,
            (Op::Add, 3) => f(1)? + f(2)?,
            (Op::Sub, 3) => f(1)? - f(2)?,
            (Op::Mul, 3) => f(1)? * f(2)?,
            (Op::Div, 3) if has(RN) => f(1)? / f(2)?,
            (Op::Fma, 4) if w == 32 => (f(1)? as f32).mul_add(f(2)? as f32, f(3)? as f32) as f64,
            (Op::Fma, 4) => f(1)?.mul_add(f(2)?, f(3)?),
            (Op::Neg, 2) => -f(1)?,
            // Correctly rounded in f64, then rounded once to f32: f32's own correct rounding.
            (Op::Sqrt, 2) if has(RN) => f(1)?.sqrt(),
            (Op::Rcp, 2) if has(RN) => 1.0 / f(1)?,
            (Op::Abs, 2) => f(1)?.abs(),
            (Op::Min, 3) | (Op::Max, 3) => {
                let (a, b) = (f(1)?, f(2)?);
                match (a.is_nan(), b.is_nan()) {
                    (true, true) => f64::NAN,
                    (true, false) => b,
                    (false, true) => a,
                    _ if i.code == Op::Min => a.min(b),
                    _ => a.max(b),
                }
            }
            _ => return None,
        };
        // `.sat` clamps to [0, 1], NaN to 0.
        let r = if has(SAT) {
            if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) }
        } else {
            r
        };
        return Some(from_f(r, w, ftz));
    }
    let w = bits(ty);
    let signed = matches!(ty, Ty::S(_));
    let a = val(1)?;
    let pred = ty == Ty::Pred;
    let r: u64 = match (i.code, o.len()) {
        (Op::And, 3) if pred => ((a != 0) && (val(2)? != 0)) as u64,
        (Op::Or, 3) if pred => ((a != 0) || (val(2)? != 0)) as u64,
        (Op::Xor, 3) if pred => ((a != 0) ^ (val(2)? != 0)) as u64,
        (Op::Not, 2) if pred => (a == 0) as u64,
        _ if pred => return None,
        (Op::Add, 3) => a.wrapping_add(val(2)?),
        (Op::Sub, 3) => a.wrapping_sub(val(2)?),
        (Op::And, 3) => a & val(2)?,
        (Op::Or, 3) => a | val(2)?,
        (Op::Xor, 3) => a ^ val(2)?,
        (Op::Not, 2) => !a,
        (Op::Neg, 2) => a.wrapping_neg(),
        (Op::Abs, 2) => sext(a, w).unsigned_abs(),
        (Op::Shl, 3) => {
            let s = mask(val(2)?, 32);
            if s >= w as u64 { 0 } else { a << s }
        }
        (Op::Shr, 3) => {
            let s = mask(val(2)?, 32).min(w as u64 - 1 + (!signed) as u64);
            if signed {
                (sext(a, w) >> s.min(63)) as u64
            } else if s >= w as u64 {
                0
            } else {
                mask(a, w) >> s
            }
        }
        (Op::Min, 3) | (Op::Max, 3) => {
            let b = val(2)?;
            let less = if signed {
                sext(a, w) < sext(b, w)
            } else {
                mask(a, w) < mask(b, w)
            };
            if (i.code == Op::Min) == less { a } else { b }
        }
        (Op::Mul, 3) | (Op::Mad, 4) => {
            let b = val(2)?;
            let (x, y) = if signed {
                (sext(a, w) as i128, sext(b, w) as i128)
            } else {
                (mask(a, w) as i128, mask(b, w) as i128)
            };
            let p = x.wrapping_mul(y);
            let r = if has(WIDE) {
                p as u64
            } else if has(HI) {
                (p >> w) as u64
            } else if has(LO) || w == 64 {
                p as u64
            } else {
                return None;
            };
            match i.code {
                Op::Mad => r.wrapping_add(val(3)?),
                _ => r,
            }
        }
        (Op::Div, 3) | (Op::Rem, 3) => {
            let b = val(2)?;
            if mask(b, w) == 0 {
                return None;
            }
            if signed {
                let (x, y) = (sext(a, w) as i128, sext(b, w) as i128);
                (if i.code == Op::Div { x / y } else { x % y }) as u64
            } else {
                let (x, y) = (mask(a, w), mask(b, w));
                if i.code == Op::Div { x / y } else { x % y }
            }
        }
        _ => return None,
    };
    // `.wide` doubles the destination's width.
    let dw = if has(WIDE) { w * 2 } else { w };
    Some(mask(r, dw))
}

/// Computes one launch of a PTX kernel over its whole grid.
pub fn run(
    e: &PtxEntry,
    params: &KernelParams,
    pblock: &[u8],
    grid: [u32; 3],
    block: [u32; 3],
    mem: &mut dyn Mem,
) -> Result<(), Skip> {
    let p = Program::parse(e)?;
    let mut overlay = Overlay {
        mem,
        stores: Vec::new(),
        stored: (0, 0),
        pages: HashMap::new(),
    };
    let mut budget = MAX_STEPS;
    let mut t = Thread {
        regs: vec![0; p.nregs],
        tid: [0; 3],
        ntid: block,
        ctaid: [0; 3],
        nctaid: grid,
        params,
        pblock,
    };
    for cz in 0..grid[2] {
        for cy in 0..grid[1] {
            for cx in 0..grid[0] {
                for tz in 0..block[2] {
                    for ty in 0..block[1] {
                        for tx in 0..block[0] {
                            t.regs.fill(0);
                            t.tid = [tx, ty, tz];
                            t.ctaid = [cx, cy, cz];
                            budget -= run_thread(&p, &mut t, &mut overlay, budget)?;
                        }
                    }
                }
            }
        }
    }
    overlay.commit()
}

#[cfg(test)]
mod tests;
