//! The built library is what the dynamic loader expects of rdma-core 44's librdmacm.so.1: its
//! soname, exactly the functions of `symbols.tsv` at their version nodes (as default versions),
//! and every `RDMACM_*` symbol the distribution's programs on this machine import
//! (rdmacm-utils, perftest).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

mod common;
use common::library;

fn readelf(args: &[&str], file: &Path) -> Option<String> {
    let out = Command::new("readelf").args(args).arg(file).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// name -> (version, default?) of the defined, versioned dynamic symbols.
fn defined(text: &str) -> BTreeMap<String, (String, bool)> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let c: Vec<&str> = line.split_whitespace().collect();
        if c.len() < 8 || c[6] == "UND" {
            continue;
        }
        if let Some((n, v)) = c[7].split_once("@@") {
            m.insert(n.to_string(), (v.to_string(), true));
        } else if let Some((n, v)) = c[7].split_once('@') {
            m.insert(n.to_string(), (v.to_string(), false));
        }
    }
    m
}

fn table() -> BTreeMap<String, String> {
    let t = include_str!("../symbols.tsv");
    t.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect()
}

#[test]
fn soname_and_versions() {
    let Some(lib) = library() else {
        panic!("librdmacm.so was not built beside this test");
    };
    let dynamic = readelf(&["-d", "-W"], &lib).expect("readelf");
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "{dynamic}"
    );
    let syms = defined(&readelf(&["--dyn-syms", "-W"], &lib).expect("readelf"));
    let want = table();
    assert_eq!(want.len(), 68);
    for (name, node) in &want {
        assert_eq!(
            syms.get(name),
            Some(&(node.clone(), true)),
            "{name} should be exported as {name}@@{node}"
        );
    }
    for (name, (ver, _)) in &syms {
        if ver.starts_with("RDMACM_") && name != ver {
            assert!(
                want.contains_key(name),
                "{name}@{ver} is not in rdma-core 44"
            );
        }
    }
}

/// Every RDMACM_* import of the distribution's programs on this machine is served.
#[test]
fn distribution_imports_are_served() {
    let Some(lib) = library() else {
        panic!("librdmacm.so was not built beside this test");
    };
    let syms = defined(&readelf(&["--dyn-syms", "-W"], &lib).expect("readelf"));
    let mut files = 0;
    let mut checked = BTreeSet::new();
    for dir in ["/usr/bin", "/usr/lib/x86_64-linux-gnu"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let interesting = [
                "rping",
                "udaddy",
                "ucmatose",
                "rdma_",
                "riostream",
                "rstream",
                "mckey",
                "cmtime",
                "ib_",
                "rcopy",
                "udpong",
            ]
            .iter()
            .any(|s| name.starts_with(s));
            if !interesting || !p.is_file() {
                continue;
            }
            let Some(text) = readelf(&["--dyn-syms", "-W"], &p) else {
                continue;
            };
            let mut any = false;
            for line in text.lines() {
                let c: Vec<&str> = line.split_whitespace().collect();
                if c.len() < 8 || c[6] != "UND" {
                    continue;
                }
                if let Some((n, v)) = c[7].split_once('@') {
                    if v.starts_with("RDMACM_") {
                        any = true;
                        let v = v.split_whitespace().next().unwrap_or(v);
                        assert_eq!(
                            syms.get(n).map(|s| s.0.as_str()),
                            Some(v),
                            "{name} imports {n}@{v}"
                        );
                        checked.insert(format!("{n}@{v}"));
                    }
                }
            }
            files += any as usize;
        }
    }
    if files == 0 {
        eprintln!("SKIPPED: no program importing librdmacm is installed (rdmacm-utils, perftest)");
        assert!(
            std::env::var("CI").is_err(),
            "rdmacm-utils must be installed in CI"
        );
        return;
    }
    eprintln!("{files} files, {} distinct imports served", checked.len());
}
