//! Running `softib` as child processes in integration tests.
// Each test file uses a part of this module.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

pub fn spawn(args: &[&str]) -> Child {
    softib()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run softib")
}

/// Waits for a child with a deadline (kills it on timeout).
pub fn finish(mut c: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if c.try_wait().expect("wait").is_some() {
            return c.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let out = c.wait_with_output().expect("output");
            panic!("{what} timed out: {}", String::from_utf8_lossy(&out.stderr));
        }
        sleep(Duration::from_millis(10));
    }
}

/// The child's stdout, after asserting it exited successfully.
pub fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{what} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Says why a test does not run here, on stdout and stderr.
pub fn skip(reason: &str) {
    println!("SKIPPED: {reason}");
    eprintln!("SKIPPED: {reason}");
}

/// True if `tool` is a file in a directory of `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The directory of this build's libraries that holds all of `libs` (`softib run` needs
/// libibverbs.so and libsoftib_preload.so there): `deps/` after `cargo test`, beside the
/// binary after `cargo build`; the newer if both do.
pub fn library_dir(libs: &[&str]) -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_softib"));
    let dir = exe.parent()?;
    [dir.join("deps"), dir.to_path_buf()]
        .into_iter()
        .filter(|d| libs.iter().all(|l| d.join(l).is_file()))
        .max_by_key(|d| {
            std::fs::metadata(d.join(libs[0]))
                .and_then(|m| m.modified())
                .ok()
        })
}

/// A TCP port free right now (for a tool's own control connection or address exchange).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A process's stdout and stderr, as text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The datagrams softib sent, summed over the devices' `SOFTIB_STATS` lines.
pub fn datagrams_sent(out: &str) -> u64 {
    out.lines()
        .filter(|l| l.contains("runtime DeviceStats"))
        .filter_map(|l| {
            let at = l.find("tx_datagrams: ")? + "tx_datagrams: ".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
