//! `softib run`: the program runs with softib's libibverbs.so.1 (and librdmacm.so.1) first on
//! the loader path.

mod procs;

use procs::softib;
use std::path::{Path, PathBuf};

/// softib's cdylib of this build: beside the softib binary after `cargo build`, in `deps/`
/// after `cargo test --workspace` (which does not copy it up).
fn library() -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_softib"));
    let dir = exe.parent()?;
    [dir.join("deps/libibverbs.so"), dir.join("libibverbs.so")]
        .into_iter()
        .filter(|l| l.is_file())
        .max_by_key(|l| std::fs::metadata(l).and_then(|m| m.modified()).ok())
}

/// `softib` with SOFTIB_LIB_DIR naming this build's library.
fn softib_run() -> std::process::Command {
    let mut c = softib();
    if let Some(lib) = library() {
        c.env("SOFTIB_LIB_DIR", lib.parent().unwrap());
    }
    c
}

#[test]
fn run_sets_the_loader_path_and_options() {
    let Some(lib) = library() else {
        println!("SKIPPED: softib's libibverbs.so was not built beside the softib binary");
        return;
    };
    let out = softib_run()
        .args([
            "run",
            "--bind",
            "127.0.0.9",
            "--pcap",
            "/tmp/x",
            "--",
            "sh",
            "-c",
            "echo \"$LD_LIBRARY_PATH|$SOFTIB_BIND|$SOFTIB_PCAP\"",
        ])
        .env("LD_LIBRARY_PATH", "/old/path")
        .output()
        .expect("run softib");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<&str> = line.split('|').collect();
    assert_eq!(parts.len(), 3, "{line}");
    let dirs: Vec<&str> = parts[0].split(':').collect();
    assert_eq!(dirs.last(), Some(&"/old/path"), "{line}");
    let so1 = Path::new(dirs[0]).join("libibverbs.so.1");
    assert_eq!(
        std::fs::canonicalize(&so1).expect("the libibverbs.so.1 link resolves"),
        std::fs::canonicalize(&lib).unwrap()
    );
    // librdmacm.so.1 beside it when the companion library was built.
    let cm = lib.parent().unwrap().join("librdmacm.so");
    if cm.is_file() {
        let so1 = Path::new(dirs[0]).join("librdmacm.so.1");
        assert_eq!(
            std::fs::canonicalize(&so1).expect("the librdmacm.so.1 link resolves"),
            std::fs::canonicalize(&cm).unwrap()
        );
    }
    assert_eq!(parts[1], "127.0.0.9");
    assert_eq!(parts[2], "/tmp/x");
}

#[test]
fn run_passes_the_exit_status_and_reports_a_missing_program() {
    if library().is_none() {
        println!("SKIPPED: softib's libibverbs.so was not built beside the softib binary");
        return;
    }
    let st = softib_run()
        .args(["run", "--", "sh", "-c", "exit 7"])
        .status()
        .expect("run softib");
    assert_eq!(st.code(), Some(7));
    let out = softib_run()
        .args(["run", "--", "/nonexistent/program"])
        .output()
        .expect("run softib");
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run"));
}

#[test]
fn run_ibv_devices_lists_softib0() {
    if library().is_none() {
        println!("SKIPPED: softib's libibverbs.so was not built beside the softib binary");
        return;
    }
    if !Path::new("/usr/bin/ibv_devices").exists() {
        println!("SKIPPED: ibv_devices (Debian ibverbs-utils) is not installed");
        return;
    }
    let out = softib_run()
        .args(["run", "--", "ibv_devices"])
        .env_remove("SOFTIB_BIND")
        .env("SOFTIB_CONFIG", "/nonexistent")
        .output()
        .expect("run softib");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("softib0"), "{s}");
}

/// A process of `softib run` removes, when it exits, what killed softib processes left in
/// `/dev/shm`: a device's only member killed by SIGKILL (no exit handler ran, no member was
/// left to notice) leaves its inbox and the host table; `softib run -- true` exiting removes
/// both, while the killed process is still a zombie (what `softib run -- mpirun` does after a
/// failed job whose ranks the launcher killed and did not wait for).
#[test]
fn run_removes_what_killed_processes_left_in_dev_shm() {
    let Some(lib) = library() else {
        println!("SKIPPED: softib's libibverbs.so was not built beside the softib binary");
        return;
    };
    if !lib.with_file_name("libsoftib_preload.so").is_file() {
        println!(
            "SKIPPED: libsoftib_preload.so was not built beside {}",
            lib.display()
        );
        return;
    }
    let at: std::net::SocketAddr = "127.0.31.77:4791".parse().unwrap();
    let table = softib_udp::host::host_path(at);
    let inboxes = || -> Vec<PathBuf> {
        let stem = softib_udp::shm::inbox_path(at);
        (1..=255u8)
            .map(|s| softib_udp::shm::member_inbox_path(at, s))
            .chain(std::iter::once(stem))
            .filter(|p| p.exists())
            .collect()
    };
    // A ping-pong server holds the device while it waits for a client.
    let mut server = softib()
        .args(["pingpong", "--bind", "127.0.31.77", "-p", "18977"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run softib pingpong");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !table.exists() || inboxes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server made no host table {} and inbox",
            table.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Killed and not yet reaped (a zombie), as ranks are when their launcher exits.
    server.kill().unwrap();
    let zombie = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{}/stat", server.id())).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    }) {
        assert!(std::time::Instant::now() < zombie, "the server did not die");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let left = inboxes();
    assert!(
        table.exists() && !left.is_empty(),
        "the killed server's files are already gone"
    );
    let st = softib_run()
        .args(["run", "--", "true"])
        .status()
        .expect("run softib");
    assert!(st.success());
    let left = (table.exists(), inboxes());
    server.wait().unwrap();
    assert!(!left.0, "{} is left", table.display());
    assert_eq!(left.1, Vec::<PathBuf>::new(), "inboxes are left");
}
