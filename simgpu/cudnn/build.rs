//! Writes the dispatcher's exports into $OUT_DIR/dispatch.rs: a typed forwarder for every
//! function a sub-library exports (its signature read from the sub-library's source, so the two
//! cannot drift apart), and a CUDNN_STATUS_NOT_SUPPORTED stub for every name a program built
//! against cuDNN imports (simgpu/names/libcudnn.so.9.txt, what torch imports) that no
//! sub-library has. The library answers to the real soname and finds its sub-libraries beside it.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// (soname, source directory) of each sub-library, in the order names are looked up.
const SUBLIBS: &[(&str, &str)] = &[
    ("libcudnn_graph.so.9", "../cudnn_graph/src"),
    ("libcudnn_ops.so.9", "../cudnn_ops/src"),
    ("libcudnn_cnn.so.9", "../cudnn_cnn/src"),
];
const NAMES: &str = "../names/libcudnn.so.9.txt";

struct Export {
    name: String,
    params: Vec<(String, String)>,
    ret: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every `#[unsafe(no_mangle)] pub extern "C" fn cudnn...(...) -> T` in `src`.
fn exports(src: &str) -> Vec<Export> {
    const MARK: &str = "#[unsafe(no_mangle)]\npub extern \"C\" fn ";
    let mut v = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find(MARK) {
        rest = &rest[i + MARK.len()..];
        let open = rest.find('(').expect("a parameter list");
        let name = rest[..open].trim().to_string();
        let mut depth = 0;
        let mut close = open;
        for (j, ch) in rest[open..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = rest[close + 1..].find('{').expect("a body") + close + 1;
        let ret = rest[close + 1..body]
            .trim()
            .trim_start_matches("->")
            .trim()
            .to_string();
        let params = rest[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (n, t) = p.split_once(':').expect("name: type");
                (
                    n.trim().trim_start_matches('_').to_string(),
                    t.trim().to_string(),
                )
            })
            .collect();
        if name.starts_with("cudnn") {
            v.push(Export { name, params, ret });
        }
    }
    v
}

fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic): the
    // addresses it hands out (cuGetProcAddress, dispatch tables) are its own, never a preloaded
    // interposer's definition of the same name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudnn.so.9");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    println!("cargo:rerun-if-changed={NAMES}");
    let mut out = String::new();
    let mut defined = std::collections::BTreeSet::new();
    for (lib_index, (soname, dir)) in SUBLIBS.iter().enumerate() {
        println!("cargo:rerun-if-changed={dir}");
        let mut files = Vec::new();
        rust_files(Path::new(dir), &mut files);
        for f in files {
            println!("cargo:rerun-if-changed={}", f.display());
            let src = std::fs::read_to_string(&f).unwrap();
            for e in exports(&src) {
                assert!(defined.insert(e.name.clone()), "{} defined twice", e.name);
                let params: Vec<String> =
                    e.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
                let types: Vec<&str> = e.params.iter().map(|(_, t)| t.as_str()).collect();
                let args: Vec<&str> = e.params.iter().map(|(n, _)| n.as_str()).collect();
                let (ret, arrow) = if e.ret.is_empty() {
                    ("()", String::new())
                } else {
                    (e.ret.as_str(), format!(" -> {}", e.ret))
                };
                writeln!(
                    out,
                    "/// Forwarded to `{soname}`.\n#[unsafe(no_mangle)]\npub extern \"C\" fn {name}({params}){arrow} {{\n    \
                     static SLOT: Slot = Slot::new();\n    \
                     match SLOT.resolve({lib_index}, c\"{name}\") {{\n        \
                     // SAFETY: `{name}` in {soname} has exactly this signature: this forwarder is\n        \
                     // generated from that library's source.\n        \
                     Some(f) => unsafe {{ std::mem::transmute::<*mut c_void, unsafe extern \"C\" fn({types}) -> {ret}>(f)({args}) }},\n        \
                     None => unresolved(c\"{name}\"),\n    }}\n}}\n",
                    name = e.name,
                    params = params.join(", "),
                    types = types.join(", "),
                    args = args.join(", "),
                )
                .unwrap();
            }
        }
    }
    let names = std::fs::read_to_string(NAMES).unwrap();
    for name in names.lines().map(str::trim) {
        if name.is_empty() || name.starts_with('#') || defined.contains(name) {
            continue;
        }
        writeln!(
            out,
            "/// No sub-library simulates `{name}`: CUDNN_STATUS_NOT_SUPPORTED.\n#[unsafe(no_mangle)]\npub extern \"C\" fn {name}() -> Status {{\n    unresolved(c\"{name}\")\n}}\n"
        )
        .unwrap();
    }
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("dispatch.rs");
    std::fs::write(dest, out).unwrap();
}
