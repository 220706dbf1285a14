//! A PTX kernel's text decoded once, before any thread runs: instructions with their opcode,
//! modifiers, type and operands resolved to registers, immediates, addresses and labels.

use super::layout;
use crate::fatbin::PtxEntry;
use crate::host_kernels::Skip;
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub(super) enum Opd {
    Reg(usize),
    Imm(u64),
    /// `%tid.x` and friends: (which, axis).
    Special(u8, usize),
    /// `[reg + off]` or `[param + off]`.
    Addr(Base, i64),
    Vector(Vec<usize>),
    Label(usize),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Base {
    Reg(usize),
    Param(usize),
}

/// An opcode, read once when the kernel is parsed (`Other` for those not known here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Ret,
    Bra,
    Ld,
    St,
    Mov,
    Setp,
    Selp,
    Cvt,
    Add,
    Sub,
    Mul,
    Mad,
    Div,
    Rem,
    Fma,
    Neg,
    Abs,
    Min,
    Max,
    Sqrt,
    Rcp,
    Rsqrt,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Other,
}

impl Op {
    pub(super) fn of(base: &str) -> Op {
        use Op::*;
        match base {
            "ret" | "exit" => Ret,
            "bra" => Bra,
            "ld" => Ld,
            "st" => St,
            "mov" | "cvta" => Mov,
            "setp" => Setp,
            "selp" => Selp,
            "cvt" => Cvt,
            "add" => Add,
            "sub" => Sub,
            "mul" => Mul,
            "mad" => Mad,
            "div" => Div,
            "rem" => Rem,
            "fma" => Fma,
            "neg" => Neg,
            "abs" => Abs,
            "min" => Min,
            "max" => Max,
            "sqrt" => Sqrt,
            "rcp" => Rcp,
            "rsqrt" => Rsqrt,
            "ex2" => Ex2,
            "lg2" => Lg2,
            "sin" => Sin,
            "cos" => Cos,
            "tanh" => Tanh,
            "and" => And,
            "or" => Or,
            "xor" => Xor,
            "not" => Not,
            "shl" => Shl,
            "shr" => Shr,
            _ => Other,
        }
    }
}

/// Modifiers the interpreter acts on, as bits of `Inst::flags`.
pub(super) const APPROX: u16 = 1; // .approx or .full
pub(super) const RN: u16 = 1 << 1;
pub(super) const SAT: u16 = 1 << 2;
pub(super) const WIDE: u16 = 1 << 3;
pub(super) const HI: u16 = 1 << 4;
pub(super) const LO: u16 = 1 << 5;
pub(super) const FTZ: u16 = 1 << 6;
/// The first modifier is `.global` / `.param` (a load's or store's state space).
pub(super) const GLOBAL: u16 = 1 << 7;
pub(super) const PARAM: u16 = 1 << 8;
/// `.volatile` or `.shared` anywhere.
pub(super) const VOLATILE_OR_SHARED: u16 = 1 << 9;

pub(super) fn flags_of(mods: &[String]) -> u16 {
    let mut f = 0;
    for m in mods {
        f |= match m.as_str() {
            "approx" | "full" => APPROX,
            "rn" => RN,
            "sat" => SAT,
            "wide" => WIDE,
            "hi" => HI,
            "lo" => LO,
            "ftz" => FTZ,
            "volatile" | "shared" => VOLATILE_OR_SHARED,
            _ => 0,
        };
    }
    match mods.first().map(String::as_str) {
        Some("global") => f | GLOBAL,
        Some("param") => f | PARAM,
        _ => f,
    }
}

#[derive(Debug)]
pub(super) struct Inst {
    pub(super) guard: Option<(usize, bool)>,
    /// The opcode as written (for messages) and as decoded.
    pub(super) op: String,
    pub(super) code: Op,
    pub(super) mods: Vec<String>,
    pub(super) opds: Vec<Opd>,
    /// The type suffix (the last one), the modifier bits, and a conversion's (destination,
    /// source) types, read once.
    pub(super) ty: Option<Ty>,
    pub(super) flags: u16,
    pub(super) cvt: Option<(Ty, Ty)>,
}

/// An instruction as written: its guard (register, negated), opcode and operands.
pub(super) type RawInst = (Option<(String, bool)>, String, Vec<String>);

/// A parsed kernel.
pub(super) struct Program {
    pub(super) insts: Vec<Inst>,
    pub(super) nregs: usize,
}

pub(super) fn parse_imm(t: &str) -> Option<u64> {
    if let Some(h) = t.strip_prefix("0f").or_else(|| t.strip_prefix("0F")) {
        return u32::from_str_radix(h, 16).ok().map(|v| v as u64);
    }
    if let Some(h) = t.strip_prefix("0d").or_else(|| t.strip_prefix("0D")) {
        return u64::from_str_radix(h, 16).ok();
    }
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h.trim_end_matches('U'), 16).ok()?
    } else {
        t.trim_end_matches('U').parse::<u64>().ok()?
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Splits at commas outside brackets and braces.
pub(super) fn split_operands(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

impl Program {
    pub(super) fn parse(e: &PtxEntry) -> Result<Program, Skip> {
        let mut regs: HashMap<String, usize> = HashMap::new();
        let mut labels: HashMap<String, usize> = HashMap::new();
        let mut raw: Vec<RawInst> = Vec::new();
        for chunk in e.body.split(';') {
            let mut s = chunk.trim();
            loop {
                s = s.trim_start_matches(['{', '}']).trim();
                // A label: `$L__BB0_5:` before the statement.
                match s.split_once(':') {
                    Some((l, rest))
                        if !l.is_empty()
                            && l.chars().all(|c| c.is_alphanumeric() || "_$.".contains(c)) =>
                    {
                        labels.insert(l.to_string(), raw.len());
                        s = rest.trim();
                    }
                    _ => break,
                }
            }
            if s.is_empty() {
                continue;
            }
            if s.starts_with('.') {
                let d = s.split_whitespace().next().unwrap_or("");
                if d != ".reg" {
                    return Err(layout(format!("PTX directive {d}")));
                }
                continue;
            }
            let (guard, s) = match s.strip_prefix('@') {
                Some(r) => {
                    let (g, rest) = r
                        .split_once(char::is_whitespace)
                        .ok_or_else(|| layout("a guard alone"))?;
                    let (neg, g) = match g.strip_prefix('!') {
                        Some(g) => (true, g),
                        None => (false, g),
                    };
                    (Some((g.to_string(), neg)), rest.trim())
                }
                None => (None, s),
            };
            let (op, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
            raw.push((guard, op.to_string(), split_operands(rest)));
        }
        let mut reg = |name: &str| -> usize {
            let n = regs.len();
            *regs.entry(name.to_string()).or_insert(n)
        };
        let mut insts = Vec::with_capacity(raw.len());
        for (guard, op, ops) in raw {
            let mut parts = op.split('.');
            let base = parts.next().unwrap_or("").to_string();
            let mods: Vec<String> = parts.map(str::to_string).collect();
            let mut opds = Vec::new();
            for o in &ops {
                let opd = if let Some(inner) = o.strip_prefix('[').and_then(|r| r.strip_suffix(']'))
                {
                    let (b, off) = match inner.split_once('+') {
                        Some((b, off)) => (
                            b.trim(),
                            parse_imm(off.trim()).ok_or_else(|| layout(format!("address {o}")))?
                                as i64,
                        ),
                        None => (inner.trim(), 0),
                    };
                    let base = if b.starts_with('%') {
                        Base::Reg(reg(b))
                    } else if let Some(i) = e.params.iter().position(|p| p == b) {
                        Base::Param(i)
                    } else {
                        return Err(layout(format!("address {o}")));
                    };
                    Opd::Addr(base, off)
                } else if let Some(inner) = o.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
                    Opd::Vector(inner.split(',').map(|r| reg(r.trim())).collect())
                } else if let Some(sp) = o.strip_prefix('%').and_then(|r| {
                    let (w, axis) = r.split_once('.')?;
                    let which = ["tid", "ntid", "ctaid", "nctaid"]
                        .iter()
                        .position(|s| *s == w)?;
                    Some((which as u8, "xyz".find(axis)?))
                }) {
                    Opd::Special(sp.0, sp.1)
                } else if o.starts_with('%') {
                    Opd::Reg(reg(o))
                } else if let Some(v) = parse_imm(o) {
                    Opd::Imm(v)
                } else if let Some(&l) = labels.get(o.as_str()) {
                    Opd::Label(l)
                } else {
                    return Err(layout(format!("operand {o} of {op}")));
                };
                opds.push(opd);
            }
            let guard = guard.map(|(g, neg)| (reg(&g), neg));
            let ty = mods.iter().rev().find_map(|m| ty_of(m));
            let flags = flags_of(&mods);
            let tys: Vec<Ty> = mods.iter().filter_map(|m| ty_of(m)).collect();
            let cvt = match tys[..] {
                [dt, st] => Some((dt, st)),
                _ => None,
            };
            insts.push(Inst {
                guard,
                code: Op::of(&base),
                op: base,
                mods,
                opds,
                ty,
                flags,
                cvt,
            });
        }
        Ok(Program {
            insts,
            nregs: regs.len(),
        })
    }
}

/// The width and kind of an instruction's type suffix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Ty {
    S(u32),
    U(u32),
    F(u32),
    Pred,
}

pub(super) fn ty_of(m: &str) -> Option<Ty> {
    if m == "pred" {
        return Some(Ty::Pred);
    }
    if m.is_empty() {
        return None;
    }
    let (k, w) = m.split_at(1);
    let w: u32 = w.parse().ok()?;
    Some(match k {
        "s" => Ty::S(w),
        "u" | "b" => Ty::U(w),
        "f" if w == 32 || w == 64 => Ty::F(w),
        _ => return None,
    })
}

pub(super) fn bits(t: Ty) -> u32 {
    match t {
        Ty::S(w) | Ty::U(w) | Ty::F(w) => w,
        Ty::Pred => 1,
    }
}
