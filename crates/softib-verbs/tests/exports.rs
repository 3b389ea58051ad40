//! The built library is what the dynamic loader expects of rdma-core 44's libibverbs.so.1:
//! its soname, exactly the symbols of `symbols.tsv` at their version nodes (as default
//! versions), and every `IBVERBS_*` symbol the distribution's rdma-core packages on this
//! machine import (their programs, librdmacm, the libmlx5 / libefa that perftest links, the
//! pyverbs extension modules). softib's own extensions (`<softib/rd.h>`) are the table's
//! `SOFTIB_*` rows: `softib_`-prefixed, at softib's nodes, never at an rdma-core one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cdylib of this build: `<target>/<profile>/deps/libibverbs.so` beside the test binary,
/// else `<target>/<profile>/libibverbs.so`.
fn library() -> Option<PathBuf> {
    // `cargo test` builds the cdylib into `<profile>/deps` beside this test and does not copy
    // it up to `<profile>/libibverbs.so` (only `cargo build` does): that one may be stale or
    // absent.
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libibverbs.so"),
        deps.parent()?.join("libibverbs.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn readelf(args: &[&str], file: &Path) -> Option<String> {
    let out = Command::new("readelf").args(args).arg(file).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// (name, version, default?) of the defined dynamic symbols carrying a version.
fn defined_versioned(text: &str) -> BTreeMap<String, (String, bool)> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 8 || cols[6] == "UND" {
            continue;
        }
        let sym = cols[7];
        if let Some((name, ver)) = sym.split_once("@@") {
            m.insert(name.to_string(), (ver.to_string(), true));
        } else if let Some((name, ver)) = sym.split_once('@') {
            m.insert(name.to_string(), (ver.to_string(), false));
        }
    }
    m
}

/// (name, version) of the undefined IBVERBS_* symbols a file imports.
fn imports(text: &str) -> BTreeSet<(String, String)> {
    let mut s = BTreeSet::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 8 || cols[6] != "UND" {
            continue;
        }
        if let Some((name, ver)) = cols[7].split_once('@') {
            if ver.starts_with("IBVERBS_") {
                s.insert((name.to_string(), ver.to_string()));
            }
        }
    }
    s
}

fn table() -> BTreeMap<String, String> {
    include_str!("../symbols.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (n, v) = l.split_once('\t').expect("name<TAB>version");
            (n.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn soname_and_exactly_the_table() {
    let Some(lib) = library() else {
        println!("SKIPPED: the cdylib was not built beside this test (cargo test --workspace)");
        return;
    };
    let Some(dynamic) = readelf(&["-d"], &lib) else {
        println!("SKIPPED: readelf (binutils) is not available");
        return;
    };
    assert!(
        dynamic.contains("Library soname: [libibverbs.so.1]"),
        "{dynamic}"
    );
    let syms = readelf(&["--dyn-syms", "-W"], &lib).unwrap();
    let defined = defined_versioned(&syms);
    let want = table();
    for (name, ver) in &want {
        match defined.get(name) {
            Some((v, true)) if v == ver => {}
            other => panic!("{name}: want {name}@@{ver}, the library has {other:?}"),
        }
    }
    // Nothing else carries an rdma-core or a softib version.
    for (name, (ver, _)) in &defined {
        if ver.starts_with("IBVERBS_") || ver.starts_with("SOFTIB_") {
            assert!(
                want.contains_key(name),
                "{name}@{ver} is not in symbols.tsv"
            );
        }
    }
    let rdma_core = want.values().filter(|v| v.starts_with("IBVERBS_")).count();
    assert_eq!(
        rdma_core, 146,
        "rdma-core 44 exports 146 symbols by default"
    );
    // The rest are softib's extensions: its own prefix and version node.
    let ours: BTreeSet<&str> = want
        .iter()
        .filter(|(_, v)| !v.starts_with("IBVERBS_"))
        .map(|(n, v)| {
            assert!(
                n.starts_with("softib_") && v.starts_with("SOFTIB_"),
                "{n}@{v}: an extension is softib_* at a SOFTIB_* node"
            );
            n.as_str()
        })
        .collect();
    let rd: BTreeSet<&str> = [
        "softib_alloc_rdd",
        "softib_dealloc_rdd",
        "softib_create_eec",
        "softib_modify_eec",
        "softib_query_eec",
        "softib_eec_num",
        "softib_destroy_eec",
        "softib_create_rd_qp",
        "softib_post_rd_send",
    ]
    .into_iter()
    .collect();
    assert_eq!(ours, rd, "the extensions are <softib/rd.h>'s");
    assert!(want.values().filter(|v| *v == "SOFTIB_1.0").count() == rd.len());
}

/// Every function `<softib/rd.h>` declares is exported at `SOFTIB_1.0`, and every extension
/// the table exports is declared there: the header and the library cannot drift apart.
#[test]
fn the_rd_header_declares_exactly_the_extensions() {
    let header = include_str!("../include/softib/rd.h");
    // A declaration: `softib_<name>(` on a line outside the comments.
    let mut declared = BTreeSet::new();
    for line in header.lines().map(str::trim_start) {
        if line.starts_with("/*") || line.starts_with('*') || line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("softib_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('(') {
                declared.insert(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    let exported: BTreeSet<String> = table()
        .into_iter()
        .filter(|(_, v)| v.starts_with("SOFTIB_"))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(declared, exported);
}

#[test]
fn every_import_of_the_distribution_resolves() {
    let Some(lib) = library() else {
        println!("SKIPPED: the cdylib was not built beside this test (cargo test --workspace)");
        return;
    };
    let Some(syms) = readelf(&["--dyn-syms", "-W"], &lib) else {
        println!("SKIPPED: readelf (binutils) is not available");
        return;
    };
    let defined = defined_versioned(&syms);
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["/usr/bin"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("ibv_") || n.starts_with("ib_") || n == "rping" || n == "ucmatose"
                {
                    files.push(e.path());
                }
            }
        }
    }
    for f in [
        "/usr/lib/x86_64-linux-gnu/librdmacm.so.1",
        "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
        "/usr/lib/x86_64-linux-gnu/libmlx4.so.1",
        "/usr/lib/x86_64-linux-gnu/libefa.so.1",
    ] {
        files.push(PathBuf::from(f));
    }
    let mut stack = vec![PathBuf::from("/usr/lib/python3/dist-packages/pyverbs")];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "so") {
                    files.push(p);
                }
            }
        }
    }
    let files: Vec<PathBuf> = files.into_iter().filter(|f| f.is_file()).collect();
    if files.is_empty() {
        println!("SKIPPED: no rdma-core package is installed (ibverbs-utils, perftest, ...)");
        return;
    }
    let mut checked = 0;
    let mut missing = Vec::new();
    for f in &files {
        let Some(text) = readelf(&["--dyn-syms", "-W"], f) else {
            continue;
        };
        for (name, ver) in imports(&text) {
            checked += 1;
            match defined.get(&name) {
                Some((v, _)) if *v == ver => {}
                other => missing.push(format!(
                    "{}: {name}@{ver} (library: {other:?})",
                    f.display()
                )),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "unresolved imports:\n{}",
        missing.join("\n")
    );
    assert!(checked > 0);
    println!("{checked} imports of {} files resolve", files.len());
}
