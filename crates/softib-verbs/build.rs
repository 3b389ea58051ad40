//! Gives the cdylib rdma-core's ABI identity: soname `libibverbs.so.1` and every exported
//! symbol at the version node rdma-core 44 gives it (`symbols.tsv`); softib's own extensions
//! (`include/softib/rd.h`) at softib's node, `SOFTIB_1.0`, from the same table.
//!
//! rustc links a cdylib with its own anonymous version script, which cannot be combined with
//! named version nodes in a second script for the same symbols. So each symbol is defined in
//! Rust as `softib_<name>` and aliased to `<name>@@<node>` with an assembler `.symver`
//! directive: `$OUT_DIR/symver.rs` (included by `src/lib.rs`) defines the `symver!` macro that
//! each definition invokes beside itself. The version script here only declares the nodes.
//! `tests/exports.rs` checks the built library exports exactly `symbols.tsv`.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let table = std::fs::read_to_string(dir.join("symbols.tsv")).unwrap();
    println!("cargo:rerun-if-changed=symbols.tsv");
    println!("cargo:rerun-if-changed=build.rs");

    let mut nodes: Vec<String> = Vec::new();
    let mut asm = String::from(
        "/// `symver!(name)`: the `.symver` alias of `softib_<name>` to `<name>@@<node>`.\n\
         /// Used beside each definition: the assembler needs the aliased symbol defined in\n\
         /// the same codegen unit.\n\
         macro_rules! symver {\n",
    );
    for line in table.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut it = line.split('\t');
        let (Some(name), Some(node)) = (it.next(), it.next()) else {
            panic!("symbols.tsv: bad line {line:?}");
        };
        if !nodes.iter().any(|n| n == node) {
            nodes.push(node.to_string());
        }
        writeln!(
            asm,
            "    ({name}) => {{ std::arch::global_asm!(\".symver softib_{name}, {name}@@{node}\"); }};"
        )
        .unwrap();
    }
    asm.push_str("}\n");
    std::fs::write(out.join("symver.rs"), asm).unwrap();

    let mut map = String::new();
    for n in &nodes {
        writeln!(map, "{n} {{ }};").unwrap();
    }
    let map_path = out.join("libibverbs.map");
    std::fs::write(&map_path, map).unwrap();

    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
        // Never unloaded: a context's progress thread and the SIGSEGV handler of src/fault.rs
        // run its code for the rest of the process, whatever a dlclose says.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            map_path.display()
        );
    }
}
