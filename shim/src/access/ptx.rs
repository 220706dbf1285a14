//! A kernel's touches from its PTX, where the program loaded the module as PTX text (TensorFlow
//! hands the driver the PTX of the kernels it generates at run time, all named `main_kernel`,
//! when it cannot run `ptxas` itself): which parameters the kernel reads through and which it
//! writes through, followed from each parameter's `ld.param` to the addresses of the global
//! loads, stores and atomics it reaches.
//!
//! Each register carries the parameters its value derives from (any instruction's result
//! derives from every register it reads), and whether it derives from a value loaded from
//! memory. A global access through an address that derives from parameters reads (a load)
//! or writes (a store, an atomic, a reduction) through each of them: a parameter written is
//! `rw` (extent unknown), one only read is `r`, one never used for an access is no touch.
//!
//! Where the PTX does not settle it, the kernel is left to the conservative rule (every touch
//! `rw`): an access through an address that derives from no parameter (a pointer loaded from
//! memory, a module variable written), a call, texture or surface instructions, an entry that is
//! not in the text or parameters of a kind this module does not follow.

use super::words::Found;
use planner::trace::{Access, Touch};
use std::collections::HashMap;

/// What an entry does through each of its parameters, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    /// Per parameter: (bytes as declared, what is accessed through its words: byte offset in
    /// the parameter, written (and maybe read) or read only).
    params: Vec<(usize, Vec<(usize, bool)>)>,
}

/// What a register's value derives from.
#[derive(Debug, Clone, Default)]
struct Origin {
    /// (parameter, byte offset in it) of every parameter word it derives from.
    params: Vec<(usize, usize)>,
    /// It derives from a value loaded from memory.
    loaded: bool,
    /// It derives from the address of a module variable or of shared memory.
    symbol: bool,
}

impl Origin {
    fn join(&mut self, o: &Origin) {
        for p in &o.params {
            if !self.params.contains(p) {
                self.params.push(*p);
            }
        }
        self.loaded |= o.loaded;
        self.symbol |= o.symbol;
    }
}

/// The text without `//` and `/* */` comments.
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if after.starts_with("//") {
            rest = after.find('\n').map_or("", |n| &after[n..]);
        } else if let Some(body) = after.strip_prefix("/*") {
            rest = body.find("*/").map_or("", |n| &body[n + 2..]);
        } else {
            out.push('/');
            rest = &after[1..];
        }
        out.push(' ');
    }
    out.push_str(rest);
    out
}

/// The bytes of a parameter declaration (`.param .u64 .ptr .align 16 name`, `.param .align 8
/// .b8 name[24]`) and its name; None for a type this module does not know.
fn declaration(decl: &str) -> Option<(String, usize)> {
    let tokens: Vec<&str> = decl.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return None;
    }
    let last = *tokens.last()?;
    let (name, count) = match last.split_once('[') {
        Some((n, c)) => (n, c.strip_suffix(']')?.parse::<usize>().ok()?),
        None => (last, 1),
    };
    let size = tokens[1..tokens.len() - 1].iter().find_map(|t| {
        Some(match *t {
            ".b8" | ".u8" | ".s8" | ".pred" => 1,
            ".b16" | ".u16" | ".s16" | ".f16" => 2,
            ".b32" | ".u32" | ".s32" | ".f32" => 4,
            ".b64" | ".u64" | ".s64" | ".f64" => 8,
            _ => return None,
        })
    })?;
    Some((name.to_string(), size * count))
}

/// The entry named `name` in a module's PTX text: its parameters and its body.
fn entry<'a>(text: &'a str, name: &str) -> Option<(Vec<(String, usize)>, &'a str)> {
    let mut at = 0;
    while let Some(i) = text[at..].find(".entry") {
        let start = at + i + ".entry".len();
        at = start;
        let rest = &text[start..];
        let open = rest.find('(')?;
        if rest[..open].trim() != name {
            continue;
        }
        let close = open + rest[open..].find(')')?;
        let params = rest[open + 1..close]
            .split(',')
            .filter(|d| !d.trim().is_empty())
            .map(declaration)
            .collect::<Option<Vec<_>>>()?;
        let body_start = close + rest[close..].find('{')?;
        // The body's closing brace: braces nest (scoped blocks).
        let mut depth = 0i32;
        for (k, c) in rest[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some((params, &rest[body_start + 1..body_start + k]));
                    }
                }
                _ => {}
            }
        }
        return None;
    }
    None
}

/// The operands of an instruction, split at top-level commas (vector operands `{a, b}` and
/// addresses `[a+8]` stay whole).
fn operands(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

/// The registers an operand names (`%rd1`, `{%f1, %f2}`, `[%rd3+8]`, `%p|%q`).
fn registers(op: &str) -> Vec<&str> {
    op.split(|c: char| !(c.is_alphanumeric() || c == '%' || c == '_' || c == '$' || c == '.'))
        .filter(|t| t.starts_with('%'))
        .collect()
}

/// One instruction: its opcode's first part, all its parts, its operands.
struct Instr<'a> {
    base: &'a str,
    parts: Vec<&'a str>,
    ops: Vec<&'a str>,
}

impl Instr<'_> {
    fn has(&self, part: &str) -> bool {
        self.parts.contains(&part)
    }
}

/// The instructions of an entry's body, labels, guards, braces and directives aside.
fn instructions(body: &str) -> Vec<Instr<'_>> {
    let mut out = Vec::new();
    for stmt in body.split(';') {
        let mut stmt = stmt.trim();
        loop {
            let t = stmt.trim_start_matches(['{', '}']).trim_start();
            let t = match t.split_once(':') {
                Some((label, rest))
                    if !label.is_empty()
                        && label
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '$') =>
                {
                    rest.trim_start()
                }
                _ => t,
            };
            if t.len() == stmt.len() {
                break;
            }
            stmt = t;
        }
        let stmt = match stmt.strip_prefix('@') {
            Some(g) => g.split_once(char::is_whitespace).map_or("", |x| x.1).trim(),
            None => stmt,
        };
        if stmt.is_empty() || stmt.starts_with('.') {
            continue;
        }
        let (opcode, rest) = stmt.split_once(char::is_whitespace).unwrap_or((stmt, ""));
        let parts: Vec<&str> = opcode.split('.').collect();
        out.push(Instr {
            base: parts[0],
            parts,
            ops: operands(rest),
        });
    }
    out
}

/// The parameter-space address an instruction gives its destination, as (parameter, byte
/// offset): a parameter's name or such a register moved (`mov.b64 %rd5, <param>`), or such a
/// register plus a constant (`add.s64 %rd8, %rd1, 16`). LLVM reads a struct passed by value
/// through one (Eigen's evaluators: `ld.param.u64 %rd6, [%rd1+24]`).
fn param_address(
    ins: &Instr,
    index: &HashMap<&str, usize>,
    at_param: &HashMap<&str, (usize, usize)>,
) -> Option<(usize, usize)> {
    let src = *ins.ops.get(1)?;
    let base = index
        .get(src)
        .map(|&k| (k, 0))
        .or_else(|| at_param.get(src).copied())?;
    match (ins.base, ins.ops.get(2)) {
        ("mov", None) => Some(base),
        ("add", Some(imm)) => Some((base.0, base.1 + imm.trim().parse::<usize>().ok()?)),
        _ => None,
    }
}

/// The roles of entry `name` in a module's PTX `text`; None where they are not settled (see the
/// module's comment).
pub fn roles(text: &str, name: &str) -> Option<Roles> {
    let text = strip_comments(text);
    let (params, body) = entry(&text, name)?;
    let index: HashMap<&str, usize> = params
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    // Module variables and shared arrays: their addresses are no parameter's.
    let symbols: Vec<&str> = text
        .split(';')
        .filter_map(|d| {
            let d = d.trim();
            let decl = [".global", ".shared", ".const", ".extern"]
                .iter()
                .any(|k| d.contains(k))
                && !d.contains(".entry")
                && !d.contains(".func");
            decl.then(|| d.split_whitespace().last())
                .flatten()
                .map(|n| n.split(['[', '=']).next().unwrap_or(n).trim())
        })
        .collect();
    let instrs = instructions(body);
    // Registers holding a parameter's address in the parameter space (`mov.b64 %rd5,
    // <param>`: a struct passed by value, its fields loaded through the register), with the
    // offset added to it: (parameter, byte offset).
    // A register is one where every definition of it is such an address (a register also
    // assigned otherwise is not): joined until nothing changes.
    let mut at_param: HashMap<&str, (usize, usize)> = HashMap::new();
    for _ in 0..8 {
        let mut defs: HashMap<&str, Option<(usize, usize)>> = HashMap::new();
        for ins in &instrs {
            let Some(&dst) = ins.ops.first() else {
                continue;
            };
            if matches!(ins.base, "st" | "red" | "bra" | "ret" | "exit" | "bar") {
                continue;
            }
            let v = param_address(ins, &index, &at_param);
            defs.entry(dst)
                .and_modify(|e| {
                    if *e != v {
                        *e = None
                    }
                })
                .or_insert(v);
        }
        let next: HashMap<&str, (usize, usize)> = defs
            .into_iter()
            .filter_map(|(d, v)| Some((d, v?)))
            .collect();
        if next == at_param {
            break;
        }
        at_param = next;
    }
    // Each register's origin, over all its definitions (PTX registers are assigned anew in
    // loops): joined until nothing changes.
    let mut origin: HashMap<&str, Origin> = HashMap::new();
    let origin_of = |origin: &HashMap<&str, Origin>, op: &str| {
        let mut o = Origin::default();
        for r in registers(op) {
            if let Some(x) = origin.get(r) {
                o.join(x);
            }
        }
        let word = op.trim_matches(|c| c == '[' || c == ']');
        let name = word.split('+').next().unwrap_or(word).trim();
        o.symbol |= symbols.contains(&name);
        o
    };
    for _ in 0..64 {
        let mut changed = false;
        for ins in &instrs {
            let (dst, o) = match ins.base {
                "ld" | "ldu" if ins.has("param") => {
                    let addr = ins.ops.get(1)?.trim_matches(|c| c == '[' || c == ']');
                    let (name, off) = match addr.split_once('+') {
                        Some((n, o)) => (n.trim(), o.trim().parse::<usize>().ok()?),
                        None => (addr.trim(), 0),
                    };
                    let (k, base) = match index.get(name) {
                        Some(&k) => (k, 0),
                        None => *at_param.get(name)?,
                    };
                    let o = Origin {
                        params: vec![(k, base + off)],
                        ..Origin::default()
                    };
                    (ins.ops.first(), o)
                }
                "ld" | "ldu" | "atom" => (
                    ins.ops.first(),
                    Origin {
                        loaded: true,
                        ..Origin::default()
                    },
                ),
                "st" | "red" | "bra" | "ret" | "exit" | "bar" | "barrier" | "membar" | "fence"
                | "trap" => continue,
                _ => {
                    // Any other instruction writes its first operand from the rest.
                    let mut o = Origin::default();
                    for s in ins.ops.iter().skip(1) {
                        o.join(&origin_of(&origin, s));
                    }
                    (ins.ops.first(), o)
                }
            };
            for d in dst.map(|d| registers(d)).unwrap_or_default() {
                let e = origin.entry(d).or_default();
                let before = (e.params.len(), e.loaded, e.symbol);
                e.join(&o);
                changed |= before != (e.params.len(), e.loaded, e.symbol);
            }
        }
        if !changed {
            break;
        }
    }
    let mut access: Vec<Vec<(usize, bool)>> = vec![Vec::new(); params.len()];
    for ins in &instrs {
        // Device memory the program may hold: global or generic, not shared, local, constant
        // or parameter space.
        let global = !["shared", "local", "param", "const"]
            .iter()
            .any(|s| ins.has(s));
        let (addr, write) = match ins.base {
            "call" | "tex" | "tld4" | "suld" | "sust" | "sured" | "cp" => return None,
            "ld" | "ldu" => (ins.ops.get(1)?, false),
            "st" | "red" => (ins.ops.first()?, true),
            "atom" => (ins.ops.get(1)?, true),
            _ => continue,
        };
        if !global {
            continue;
        }
        let o = origin_of(&origin, addr);
        if o.params.is_empty() {
            // Not through a parameter: a module variable or shared memory may be read,
            // nothing else may be touched.
            if write || o.loaded || !o.symbol {
                return None;
            }
            continue;
        }
        for &(p, off) in &o.params {
            let a = access.get_mut(p)?;
            match a.iter_mut().find(|x| x.0 == off) {
                Some(x) => x.1 |= write,
                None => a.push((off, write)),
            }
        }
    }
    Some(Roles {
        params: params.iter().map(|p| p.1).zip(access).collect(),
    })
}

impl Roles {
    /// Where in the parameter buffer (its `layout`) the words are that the kernel accesses
    /// through: a replay rewrites these. None where the layout is not the declared one.
    pub fn pointer_words(&self, layout: &[(usize, usize)]) -> Option<Vec<usize>> {
        self.fits(layout).then(|| {
            self.params
                .iter()
                .zip(layout)
                .flat_map(|((_, acc), &(off, _))| acc.iter().map(move |a| off + a.0))
                .collect()
        })
    }

    fn fits(&self, layout: &[(usize, usize)]) -> bool {
        layout.len() == self.params.len()
            && self
                .params
                .iter()
                .zip(layout)
                .all(|(p, l)| p.0 == l.1 && p.1.iter().all(|a| a.0 + 8 <= l.1))
    }

    /// The touches of a launch from its parameter `layout` and packed buffer: each word the
    /// kernel writes through, `rw` (extent unknown), each it only reads through, `r`. A word
    /// that points into no allocation (NULL, memory not the program's) is no touch. None
    /// where the layout is not the declared one.
    pub fn touches(
        &self,
        layout: &[(usize, usize)],
        buf: &[u8],
        find: impl Fn(u64) -> Option<Found>,
    ) -> Option<Vec<Touch>> {
        if !self.fits(layout) {
            return None;
        }
        let mut out: Vec<Touch> = Vec::new();
        for ((_, acc), &(off, _)) in self.params.iter().zip(layout) {
            for &(at, write) in acc {
                let w = u64::from_le_bytes(buf.get(off + at..off + at + 8)?.try_into().ok()?);
                let Some((alloc, offset, _)) = find(w) else {
                    continue;
                };
                let access = if write { Access::Rw } else { Access::R };
                match out
                    .iter_mut()
                    .find(|t| t.alloc == alloc && t.offset == offset)
                {
                    Some(t) if write => t.access = Access::Rw,
                    Some(_) => {}
                    None => out.push(Touch {
                        alloc,
                        offset,
                        bytes: 0,
                        access,
                    }),
                }
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests;
