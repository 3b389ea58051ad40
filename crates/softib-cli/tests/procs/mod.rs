//! Running `softib` as child processes in integration tests.

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
