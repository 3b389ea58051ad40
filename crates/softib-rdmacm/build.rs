//! Gives the cdylib rdma-core's ABI identity: soname `librdmacm.so.1` and every exported symbol
//! at the version node rdma-core 44 gives it (`symbols.tsv`), each a trampoline to softib's
//! libibverbs.so.1 (see `src/lib.rs`). As in softib-verbs, each symbol is defined as
//! `softib_<name>` and aliased to `<name>@@<node>` with `.symver`; the version script only
//! declares the nodes.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let table = std::fs::read_to_string(dir.join("symbols.tsv")).unwrap();
    println!("cargo:rerun-if-changed=symbols.tsv");
    println!("cargo:rerun-if-changed=build.rs");

    let mut nodes: Vec<String> = Vec::new();
    let mut code = String::new();
    for line in table.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let [name, node, ret] = f[..] else {
            panic!("symbols.tsv: bad line {line:?}");
        };
        if !nodes.iter().any(|n| n == node) {
            nodes.push(node.to_string());
        }
        let ret = match ret {
            "int" => "Ret::Int",
            "ptr" => "Ret::Ptr",
            "str" => "Ret::Str",
            "port" => "Ret::Port",
            "void" => "Ret::Void",
            other => panic!("symbols.tsv: {name}: unknown return kind {other:?}"),
        };
        writeln!(
            code,
            "trampoline!({name}, \"{node}\", {ret}, c\"softib_rdmacm_{name}\", \"softib_{name}\");"
        )
        .unwrap();
    }
    std::fs::write(out.join("trampolines.rs"), code).unwrap();

    let mut map = String::new();
    for n in &nodes {
        writeln!(map, "{n} {{ }};").unwrap();
    }
    let map_path = out.join("librdmacm.map");
    std::fs::write(&map_path, map).unwrap();

    if std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default() == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            map_path.display()
        );
        // rdma-core's librdmacm.so.1 needs libibverbs.so.1; so does this one, at run time
        // (the implementation is resolved there, see src/lib.rs).
        println!("cargo:rustc-link-lib=dylib=dl");
    }
}
