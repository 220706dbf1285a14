//! No import circles: within each crate of the product (the shim, the planner, the command),
//! the modules' imports form no cycle, so a change in one layer cannot reach back up into the
//! layer that uses it (docs/architecture.md).
//!
//! The rule, read from the source text: module A imports module B when A's code names a path
//! that resolves into B (`crate::b::…`, `super::…`, `use` trees with braces, and a parent's
//! paths to its own submodules). A module's submodules are its parts: a submodule naming its
//! ancestor is not an import. Comments and string literals are not code.

use marmoset_e2e::root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every `.rs` file under `src` and its module path (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into()).collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    m.pop();
                }
                out.insert(m, p);
            }
        }
    }
    out
}

/// The source without comments, string and character literals.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && i + 1 < b.len() && (b[i + 1] == b'"' || b[i + 1] == b'#') {
            // A raw string r"…" or r#"…"#, unless `r` ends an identifier.
            let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
            let mut j = i + 1;
            while j < b.len() && b[j] == b'#' {
                j += 1;
            }
            if ident_before || j >= b.len() || b[j] != b'"' {
                out.push('r');
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            i = j + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A character literal ('a', '\n', '\''), not a lifetime ('a).
            let lit = if i + 2 < b.len() && b[i + 1] == b'\\' {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|k| i + 3 + k)
            } else if i + 2 < b.len() && b[i + 2] == b'\'' {
                Some(i + 3)
            } else {
                None
            };
            match lit {
                Some(end) => {
                    out.push_str("' '");
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Tokens: identifiers and the punctuation paths are made of.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            cur.push(c);
            continue;
        }
        if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        match c {
            ':' if chars.peek() == Some(&':') => {
                chars.next();
                out.push("::".into());
            }
            '{' | '}' | ',' | ';' | '*' => out.push(c.to_string()),
            c if c.is_whitespace() => {}
            _ => out.push("·".into()),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The paths of a use tree starting at `t[i]` (after a `::`), each appended to `prefix`.
fn tree(t: &[String], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match t.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                loop {
                    i = tree(t, i, path.clone(), out);
                    match t.get(i).map(String::as_str) {
                        Some(",") => i += 1,
                        Some("}") => return i + 1,
                        _ => return i,
                    }
                    if t.get(i).map(String::as_str) == Some("}") {
                        return i + 1;
                    }
                }
            }
            Some(id) if id.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                path.push(id.to_string());
                i += 1;
                if t.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// Every path in `code` that starts at the crate root or a parent (`crate::`, `super::`), or
/// at one of `children` (submodules named from their parent), as absolute module paths.
fn paths(code: &str, me: &Module, is_dir_module: bool, children: &BTreeSet<String>) -> Vec<Module> {
    let t = tokens(code);
    // The module `self` and `super` are relative to: a file `a/b.rs` is `a::b`, its `super` is `a`.
    let here: Module = me.clone();
    let _ = is_dir_module;
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let prev_is_sep = i > 0 && t[i - 1] == "::";
        let start = t[i].as_str();
        if prev_is_sep || t.get(i + 1).map(String::as_str) != Some("::") {
            i += 1;
            continue;
        }
        let base: Option<Module> = match start {
            "crate" => Some(Vec::new()),
            "super" => {
                let mut b = here.clone();
                b.pop();
                let mut j = i + 2;
                while t.get(j).map(String::as_str) == Some("super")
                    && t.get(j + 1).map(String::as_str) == Some("::")
                {
                    b.pop();
                    j += 2;
                }
                let mut found = Vec::new();
                let end = tree(&t, j, b, &mut found);
                out.extend(found);
                i = end;
                continue;
            }
            "self" => Some(here.clone()),
            name if children.contains(name) => Some(here.clone()),
            _ => None,
        };
        match base {
            Some(b) => {
                let from = if matches!(start, "crate" | "self") {
                    i + 2
                } else {
                    i
                };
                let mut found = Vec::new();
                i = tree(&t, from, b, &mut found);
                out.extend(found);
            }
            None => i += 1,
        }
    }
    out
}

/// The import edges between the modules of one crate's `src`.
fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let is_dir_module = file.file_stem().is_some_and(|s| s == "mod");
        let children: BTreeSet<String> = mods
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k.last().unwrap().clone())
            .collect();
        for p in paths(&code(&text), m, is_dir_module, &children) {
            // The longest prefix that is a module.
            let Some(target) = (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|k| mods.contains_key(k))
            else {
                continue;
            };
            // Itself, or one of its ancestors (a submodule is its parent's part).
            if m.starts_with(&target) {
                continue;
            }
            out.entry(m.clone()).or_default().insert(target);
        }
    }
    for m in mods.keys() {
        out.entry(m.clone()).or_default();
    }
    out
}

/// The strongly connected components with more than one module (Tarjan).
fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct S<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in &s.g[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn describe(g: &BTreeMap<Module, BTreeSet<Module>>, c: &[Module]) -> String {
    let name = |m: &Module| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut lines = vec![format!(
        "a circle of {} modules: {}",
        c.len(),
        c.iter().map(name).collect::<Vec<_>>().join(", ")
    )];
    for a in c {
        for b in &g[a] {
            if c.contains(b) {
                lines.push(format!("  {} -> {}", name(a), name(b)));
            }
        }
    }
    lines.join("\n")
}

fn acyclic(crate_src: &str) {
    let src = root().join(crate_src);
    let g = edges(&src);
    assert!(g.len() > 3, "{crate_src}: modules found: {g:?}");
    let found = circles(&g);
    let text: Vec<String> = found.iter().map(|c| describe(&g, c)).collect();
    assert!(found.is_empty(), "{crate_src}:\n{}", text.join("\n"));
}

#[test]
fn the_shim_has_no_import_circle() {
    acyclic("shim/src");
}

#[test]
fn the_planner_has_no_import_circle() {
    acyclic("planner/src");
}

#[test]
fn the_command_has_no_import_circle() {
    acyclic("cli/src");
}

#[test]
fn the_check_finds_a_circle_and_ignores_what_is_not_code() {
    let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    // a (a directory module) -> its part a::x -> b -> c -> a: a circle of a, b, c.
    write("a/mod.rs", "mod x;\npub fn f() { x::g() }\n");
    write(
        "a/x.rs",
        "use super::f; // the parent: not an import\npub fn g() { crate::b::h() }\n",
    );
    write("b.rs", "use crate::{c::{self, k}};\npub fn h() { k() }\n");
    write("c.rs", "pub fn k() { super::a::f() }\n");
    let g = edges(&dir);
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{g:?}");
    let names: Vec<String> = found[0].iter().map(|m| m.join("::")).collect();
    assert_eq!(names, ["a", "a::x", "b", "c"]);
    // Cut c -> a; a path in a comment, a doc link or a string is not an import.
    write(
        "c.rs",
        "/// See [`crate::a::f`].\npub fn k() { let _ = \"crate::a::f\"; /* super::a::f() */ }\n",
    );
    let g = edges(&dir);
    assert!(circles(&g).is_empty(), "{g:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The shim's layers (docs/architecture.md), between its top-level modules: `core` imports
/// nothing else of the shim; `ffi` only `core`; `access` and `sinks` only `core` and `ffi`;
/// `virt` and `microbatch` never each other (memory virtualisation and μ-cuDNN meet only in
/// `core` and `ffi`), and never `hooks`; nothing but the crate root imports `hooks`.
fn layer_allows(from: &str, to: &str) -> Result<(), &'static str> {
    match (from, to) {
        (_, "hooks") => Err("nothing but the crate root imports hooks"),
        ("core", _) => Err("core imports nothing else of the shim"),
        ("ffi", to) if to != "core" => Err("ffi imports only core"),
        ("access" | "sinks", to) if !matches!(to, "core" | "ffi") => {
            Err("access and sinks import only core and ffi")
        }
        ("virt", "microbatch") | ("microbatch", "virt") => {
            Err("virt and microbatch meet only in core and ffi")
        }
        _ => Ok(()),
    }
}

/// Every import between top-level modules that the layering forbids, as "a::b -> c::d: why".
fn layering_violations(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut out = Vec::new();
    for (a, targets) in g {
        // The crate root starts the layers and attaches them to each other.
        let Some(from) = a.first() else { continue };
        for b in targets {
            let Some(to) = b.first() else { continue };
            if from == to {
                continue;
            }
            if let Err(why) = layer_allows(from, to) {
                out.push(format!("{} -> {}: {why}", a.join("::"), b.join("::")));
            }
        }
    }
    out
}

#[test]
fn the_shims_layers_import_only_downwards() {
    let g = edges(&root().join("shim/src"));
    for layer in [
        "core",
        "ffi",
        "access",
        "sinks",
        "virt",
        "microbatch",
        "hooks",
    ] {
        assert!(
            g.contains_key(&vec![layer.to_string()]),
            "shim/src has no module {layer}: the layering below names it"
        );
    }
    let found = layering_violations(&g);
    assert!(found.is_empty(), "shim/src:\n{}", found.join("\n"));
}

#[test]
fn the_layering_check_finds_each_forbidden_import() {
    let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("virt")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).unwrap();
    write(
        "lib.rs",
        "mod access;\nmod core;\nmod ffi;\nmod hooks;\nmod microbatch;\nmod sinks;\nmod virt;\n\
         fn start() { hooks::h(); virt::m::y(); }\n",
    );
    write("core.rs", "pub fn c() { crate::ffi::f() }\n");
    write(
        "ffi.rs",
        "pub fn f() { crate::core::c(); crate::access::a() }\n",
    );
    write(
        "access.rs",
        "use crate::{ffi::f, sinks};\npub fn a() { f() }\n",
    );
    write("sinks.rs", "use crate::{core, ffi::f};\n");
    write("virt/mod.rs", "pub mod m;\n");
    write("virt/m.rs", "pub fn y() { crate::microbatch::x() }\n");
    write(
        "microbatch.rs",
        "pub fn x() { super::virt::m::y(); crate::hooks::h() }\n",
    );
    write(
        "hooks.rs",
        "pub fn h() { crate::microbatch::x(); crate::virt::m::y(); crate::access::a() }\n",
    );
    let found = layering_violations(&edges(&dir));
    let pairs: Vec<&str> = found
        .iter()
        .map(|l| l.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        pairs,
        [
            "access -> sinks",
            "core -> ffi",
            "ffi -> access",
            "microbatch -> hooks",
            "microbatch -> virt::m",
            "virt::m -> microbatch",
        ],
        "{found:#?}"
    );
    // Each layer importing only what it may: nothing is found.
    write("core.rs", "pub fn c() {}\n");
    write("ffi.rs", "pub fn f() { crate::core::c() }\n");
    write("access.rs", "use crate::ffi::f;\npub fn a() { f() }\n");
    write("virt/m.rs", "pub fn y() { crate::ffi::f() }\n");
    write("microbatch.rs", "pub fn x() { crate::core::c() }\n");
    let found = layering_violations(&edges(&dir));
    assert!(found.is_empty(), "{found:#?}");
    std::fs::remove_dir_all(&dir).ok();
}
