//! Bad input through the C ABI (tests/c/bad_input.c, built against Debian's rdma-core 44
//! headers and linked with this build's libibverbs.so.1), one test per case: each bad call
//! gets rdma-core's documented error or completion status, the process goes on, and no byte
//! outside a registered region changes. The same program checks the event descriptors
//! (poll(2) on a completion channel and on `async_fd`) and fork() after `ibv_fork_init`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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

/// Builds the C program once: Some((program, dir holding libibverbs.so.1)), or the reason
/// it cannot run here.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| {
        let lib = library().ok_or("the cdylib was not built beside this test")?;
        if !Path::new("/usr/include/infiniband/verbs.h").exists() {
            return Err("<infiniband/verbs.h> is not installed (Debian: libibverbs-dev)".into());
        }
        let dir = std::env::temp_dir().join(format!("softib-bad-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let link = dir.join("libibverbs.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).map_err(|e| e.to_string())?;
        let exe = dir.join("bad_input");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/bad_input.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-Wall", "-Werror", "-O1", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg(format!("-L{}", dir.display()))
            .arg("-l:libibverbs.so.1")
            .output()
            .map_err(|e| format!("{cc}: {e}"))?;
        assert!(
            out.status.success(),
            "{cc} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((exe, dir))
    })
}

fn run_case(case: &str) {
    let (exe, dir) = match program() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let out = Command::new("timeout")
        .arg("120")
        .arg(exe)
        .arg(case)
        .env("LD_LIBRARY_PATH", dir)
        .env("SOFTIB_CONFIG", "/nonexistent")
        .env_remove("SOFTIB_BIND")
        .output()
        .expect("run the bad-input program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("{case}: ok")),
        "case {case} (exit {:?}):\n{stdout}{stderr}",
        out.status.code()
    );
}

#[test]
fn bad_null_objects() {
    run_case("null_objects");
}

#[test]
fn bad_freed_objects() {
    run_case("freed_objects");
}

#[test]
fn bad_foreign_lkey() {
    run_case("foreign_lkey");
}

#[test]
fn bad_wrong_state_post() {
    run_case("wrong_state_post");
}

#[test]
fn bad_oversized_sge_list() {
    run_case("oversized_sge_list");
}

#[test]
fn bad_remote_outside_region() {
    run_case("remote_outside_region");
}

#[test]
fn completion_channel_and_async_fd_wake_poll() {
    run_case("events");
}

#[test]
fn fork_after_fork_init() {
    run_case("fork");
}

#[test]
fn threads_share_a_context() {
    run_case("threads");
}
