//! PTX text as `cuModuleLoadData` accepts it (TensorFlow hands the driver PTX when it cannot run
//! `ptxas` itself): the kernels (`.entry`) with their parameter layouts, read from each entry's
//! parameter list as the ABI lays them out (each parameter at the next multiple of its alignment),
//! and the module's variables (`.global`, `.const`) with their sizes. Nothing is compiled: the
//! simulator times kernels, it does not run them. Pure: works on text; the FFI edge is
//! `loaded.rs`.

use crate::fatbin::{FatbinError, KernelParams, Parsed, PtxEntry};
use std::collections::HashMap;

fn bad(s: impl Into<String>) -> FatbinError {
    FatbinError::Invalid(s.into())
}

/// Whether a module image is PTX text: it is text up to its NUL and declares `.version` (every
/// PTX module starts with it, after comments).
pub fn is_ptx(image: &[u8]) -> bool {
    let text = image.split(|&b| b == 0).next().unwrap_or(&[]);
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    strip_comments(text)
        .split_whitespace()
        .next()
        .is_some_and(|t| t == ".version")
}

/// The text without `//` and `/* */` comments (each replaced by a space).
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if after.starts_with("//") {
            rest = after.find('\n').map_or("", |n| &after[n..]);
            out.push(' ');
        } else if let Some(body) = after.strip_prefix("/*") {
            rest = body.find("*/").map_or("", |n| &body[n + 2..]);
            out.push(' ');
        } else {
            out.push('/');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Size in bytes of a PTX fundamental type (`.u64`, `.f32`, `.b8`, ...) or opaque reference.
fn type_size(t: &str) -> Option<usize> {
    Some(match t {
        ".u8" | ".s8" | ".b8" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        ".b128" => 16,
        ".texref" | ".samplerref" | ".surfref" => 8,
        _ => return None,
    })
}

/// A declaration's type, alignment and size: `.align 8 .b8 name[16]`, `.u64 .ptr .global name`.
/// Returns (name, size, alignment).
fn declaration(tokens: &[&str]) -> Result<(String, usize, usize), FatbinError> {
    let mut align = None;
    let mut size = None;
    let mut name = None;
    // After `.ptr`, `.global .align N` describe what the pointer points to, not the parameter.
    let mut pointee = false;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        if t == ".align" {
            let n = tokens
                .get(i + 1)
                .ok_or_else(|| bad(".align without a value"))?;
            let n = n.parse::<usize>().map_err(|_| bad(format!(".align {n}")))?;
            if !pointee {
                align = Some(n);
            }
            i += 2;
            continue;
        }
        pointee |= t == ".ptr";
        if let Some(s) = type_size(t) {
            size = Some(s);
        } else if !t.starts_with('.') {
            name = Some(t);
            break;
        }
        i += 1;
    }
    let name = name.ok_or_else(|| bad(format!("no name in `{}`", tokens.join(" "))))?;
    let elem = size.ok_or_else(|| bad(format!("no type for {name}")))?;
    // name[N] or name[N][M]; `name[]` (unsized) counts as one element.
    let (base, dims) = name.split_once('[').unwrap_or((name, ""));
    let mut count = 1usize;
    for d in dims.split('[') {
        let d = d.trim_end_matches(']').trim();
        if d.is_empty() {
            continue;
        }
        let n: usize = d
            .parse()
            .map_err(|_| bad(format!("array size `{d}` of {base}")))?;
        count = count
            .checked_mul(n)
            .ok_or_else(|| bad(format!("{base} is too large")))?;
    }
    let align = align.unwrap_or(elem);
    if !align.is_power_of_two() {
        return Err(bad(format!(".align {align} of {base}")));
    }
    Ok((base.to_string(), elem * count, align))
}

/// One `.entry` header (`.visible .entry name(.param ..., .param ...)` and performance
/// directives): the kernel's name and parameters.
fn entry(header: &str) -> Result<(String, KernelParams, Vec<String>), FatbinError> {
    let at = header.find(".entry").unwrap_or(0) + ".entry".len();
    let rest = header[at..].trim_start();
    let name_end = rest
        .find(|c: char| c == '(' || c.is_whitespace())
        .unwrap_or(rest.len());
    let name = rest[..name_end].to_string();
    if name.is_empty() {
        return Err(bad("an .entry without a name"));
    }
    let mut params = Vec::new();
    let mut names = Vec::new();
    let after = rest[name_end..].trim_start();
    if let Some(list) = after.strip_prefix('(') {
        let close = list
            .find(')')
            .ok_or_else(|| bad(format!(".entry {name}: no `)` after its parameters")))?;
        let mut offset = 0usize;
        for p in list[..close].split(',') {
            let toks: Vec<&str> = p.split_whitespace().collect();
            if toks.is_empty() {
                continue;
            }
            if toks[0] != ".param" {
                return Err(bad(format!(".entry {name}: parameter `{}`", p.trim())));
            }
            let (pname, size, align) =
                declaration(&toks[1..]).map_err(|e| bad(format!(".entry {name}: {e}")))?;
            offset = offset.div_ceil(align) * align;
            if size > 1 << 20 {
                return Err(bad(format!(".entry {name}: {pname} of {size} bytes")));
            }
            params.push((offset, size));
            names.push(pname);
            offset += size;
        }
    }
    let cbank_size = params.iter().map(|(o, s)| o + s).max();
    Ok((name, KernelParams { params, cbank_size }, names))
}

/// The target architecture (`.target sm_90a` -> 90, `sm_80` -> 80).
fn target(stmt: &str) -> Option<u32> {
    let t = stmt.split_whitespace().nth(1)?.trim_end_matches(',');
    let digits: String = t
        .strip_prefix("sm_")?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// A PTX module's kernels, target architecture and variables (name -> size in bytes).
pub fn parse(text: &str) -> Result<(Parsed, HashMap<String, usize>), FatbinError> {
    let text = strip_comments(text);
    let mut kernels = HashMap::new();
    let mut bodies = HashMap::new();
    let mut globals = HashMap::new();
    let mut arch = None;
    let mut version = false;
    // `.version`, `.target` and `.address_size` end at their line, not at a `;`.
    let mut body = String::with_capacity(text.len());
    for line in text.lines() {
        match line.split_whitespace().next() {
            Some(".version") => version = true,
            Some(".target") => arch = target(line),
            Some(".address_size") => {}
            _ => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    let text = body;
    let mut stmt = String::new();
    let mut chars = text.char_indices().peekable();
    // Statements at the top level end at `;`; a `{` opens a function body (skipped, after its
    // header is read) or an initializer (`= {...}`).
    while let Some((_, c)) = chars.next() {
        match c {
            ';' => {
                let s = stmt.trim();
                let decl = s.split('=').next().unwrap_or(s);
                let dt: Vec<&str> = decl.split_whitespace().collect();
                let space = dt.iter().position(|t| *t == ".global" || *t == ".const");
                if let Some(i) = space
                    && !dt.contains(&".func")
                    && !dt.contains(&".entry")
                {
                    let (name, size, _) = declaration(&dt[i + 1..])?;
                    globals.insert(name, size);
                }
                stmt.clear();
            }
            '{' => {
                let init = stmt.contains('=');
                let mut depth = 1;
                let mut inner = String::new();
                for (_, c) in chars.by_ref() {
                    inner.push(c);
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                if depth != 0 {
                    return Err(bad("PTX ends inside a `{ }` block"));
                }
                if init {
                    stmt.push_str(" {}");
                    continue;
                }
                if stmt.split_whitespace().any(|t| t == ".entry") {
                    let (name, p, params) = entry(&stmt)?;
                    inner.pop();
                    let body = PtxEntry {
                        params,
                        body: inner,
                    };
                    bodies.insert(name.clone(), std::sync::Arc::new(body));
                    kernels.insert(name, p);
                }
                stmt.clear();
            }
            _ => stmt.push(c),
        }
    }
    if !version {
        return Err(bad("PTX without a .version directive"));
    }
    let arch = arch.ok_or_else(|| bad("PTX without a .target sm_XX directive"))?;
    Ok((
        Parsed {
            arch,
            fallback: false,
            kernels,
            ptx: bodies,
        },
        globals,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As TensorFlow's MLIR-generated kernels look (trimmed), with a struct-by-value parameter,
    /// a pointer with state-space qualifiers, a 32-bit integer after a 64-bit one, and a global.
    const PTX: &str = r#"
//
// Generated by LLVM NVPTX Back-End
//

.version 8.0
.target sm_90a
.address_size 64

	// .globl	AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel
.global .align 4 .b8 table[40] = {1, 2, 3, 4};
.const .align 8 .u64 scale;
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);

.visible .entry AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel(
	.param .u64 AddV2_param_0,
	.param .u64 .ptr .global .align 16 AddV2_param_1,
	.param .u32 AddV2_param_2,
	.param .align 8 .b8 AddV2_param_3[24],
	.param .u16 AddV2_param_4
)
.maxntid 256, 1, 1
{
	.reg .b32 	%r<5>;
	{ // inner block
	ld.param.u64 	%rd1, [AddV2_param_0];
	}
	ret;
}

.entry empty()
{
	ret;
}
"#;

    #[test]
    fn kernels_parameters_and_globals_from_ptx() {
        assert!(is_ptx(PTX.as_bytes()));
        assert!(is_ptx(b"\n.version 7.0\n.target sm_80\0garbage\xff"));
        assert!(!is_ptx(b"\x7fELF\x02\x01"));
        assert!(!is_ptx(&0xBA55_ED50u32.to_le_bytes()));
        let (p, globals) = parse(PTX).unwrap();
        assert_eq!(p.arch, 90);
        assert_eq!(p.kernels.len(), 2);
        let k = &p.kernels["AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel"];
        // u64 at 0, u64 at 8, u32 at 16, 24 bytes aligned to 8 at 24, u16 at 48.
        assert_eq!(k.params, vec![(0, 8), (8, 8), (16, 4), (24, 24), (48, 2)]);
        assert_eq!(k.block_len(), 50);
        assert!(p.kernels["empty"].params.is_empty());
        assert_eq!(globals.get("table"), Some(&40));
        assert_eq!(globals.get("scale"), Some(&8));
        assert_eq!(globals.len(), 2);
    }

    #[test]
    fn bad_ptx_is_an_error_not_a_crash() {
        for text in [
            ".version 8.0\n.entry k(.param .u64 a\n{ ret; }",
            ".version 8.0\n.target sm_90\n.entry k(.param .u64 a) { ret;",
            ".target sm_90\n.entry k() { ret; }",
            ".version 8.0\n.entry k() { ret; }",
            ".version 8.0\n.target sm_90\n.entry k(.param .align 3 .b8 a[4]) { ret; }",
            ".version 8.0\n.target sm_90\n.entry k(.param .u64 a[x]) { ret; }",
            ".version 8.0\n.target sm_90\n.entry k(.reg .u64 a) { ret; }",
            ".version 8.0\n.target sm_90\n.entry k(.param a) { ret; }",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
