//! The pyverbs suite (`tests/pyverbs/test_softib.py`, written with Debian's python3-pyverbs,
//! rdma-core's own Python bindings) run against this build's libibverbs.so.1: device, PD, MR,
//! CQ (plain, extended, with a completion channel), RC / UC / UD QPs through their states,
//! SRQ, and traffic with data checks through ibv_post_send and the ibv_wr_* interface.

use std::path::{Path, PathBuf};
use std::process::Command;

const PYTHON: &str = "/usr/bin/python3";

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

#[test]
fn pyverbs_suite() {
    let Some(lib) = library() else {
        println!("SKIPPED: the cdylib was not built beside this test (cargo test --workspace)");
        return;
    };
    if !Path::new(PYTHON).exists() {
        println!("SKIPPED: {PYTHON} is missing");
        return;
    }
    let dir = std::env::temp_dir().join(format!("softib-pyverbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    let probe = Command::new(PYTHON)
        .args(["-c", "import pyverbs.device"])
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("run python3");
    if !probe.status.success() {
        println!(
            "SKIPPED: pyverbs is not importable by {PYTHON} (Debian: python3-pyverbs): {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyverbs");
    let out = Command::new("timeout")
        .args(["300", PYTHON, "-m", "unittest", "-v", "test_softib"])
        .current_dir(&suite)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTIB_CONFIG", "/nonexistent")
        .env_remove("SOFTIB_BIND")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run the pyverbs suite");
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{err}");
    assert!(out.status.success(), "the pyverbs suite failed:\n{err}");
    assert!(err.contains("\nOK"), "{err}");
}
