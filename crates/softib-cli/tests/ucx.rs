//! Debian's UCX (`ucx-utils`) unmodified on softib through `softib run`: `ucx_info -d` lists
//! the verbs transports on softib's device, and a `ucx_perftest` pair runs its tag and
//! active-message latency tests over rc_verbs and ud_verbs, the traffic through softib.
//! Skips, saying why, where UCX's tools or this build's libraries are missing; installs
//! nothing (scripts/install-deps.sh installs ucx-utils).

mod procs;

use procs::{datagrams_sent, free_port, on_path, skip, text};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One UCX test at a time: two busy-polling processes each already fill a small machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// What the tests need, or why they cannot run here.
fn setup() -> Result<PathBuf, String> {
    for tool in ["ucx_info", "ucx_perftest"] {
        if !on_path(tool) {
            return Err(format!("{tool} is not installed (Debian: ucx-utils)"));
        }
    }
    procs::library_dir(&["libibverbs.so", "libsoftib_preload.so"]).ok_or_else(|| {
        "this build's libibverbs.so and libsoftib_preload.so are not beside the softib binary \
         (cargo build --release)"
            .to_string()
    })
}

/// `softib run -- argv` with the build's libraries, no inherited softib or UCX settings;
/// `prefix` runs softib under another program (`setpriv ...`).
fn softib_run_as(prefix: &[&str], lib: &Path, env: &[(&str, &str)], argv: &[&str]) -> Command {
    let softib = env!("CARGO_BIN_EXE_softib");
    let mut c = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(softib);
            c
        }
        None => Command::new(softib),
    };
    c.arg("run")
        .arg("--")
        .args(argv)
        .env("SOFTIB_LIB_DIR", lib)
        .env_remove("SOFTIB_BIND")
        .env_remove("SOFTIB_CONFIG")
        .env_remove("LD_PRELOAD")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("UCX_") && !env.iter().any(|(e, _)| *e == k) {
            c.env_remove(k);
        }
    }
    c
}

fn softib_run(lib: &Path, env: &[(&str, &str)], argv: &[&str]) -> Command {
    softib_run_as(&[], lib, env, argv)
}

fn lists_verbs_transports(out: &str) {
    let mut tl = None;
    let mut found = Vec::new();
    for line in out.lines() {
        if let Some(t) = line.split("Transport:").nth(1) {
            tl = Some(t.trim().to_string());
        } else if let Some(d) = line.split("Device:").nth(1) {
            if let Some(t) = &tl {
                found.push(format!("{t}/{}", d.trim()));
            }
        }
    }
    for want in ["rc_verbs/softib0:1", "ud_verbs/softib0:1"] {
        assert!(
            found.iter().any(|f| f == want),
            "ucx_info -d lists no {want}: {found:?}\n{out}"
        );
    }
}

#[test]
fn ucx_info_lists_rc_and_ud_verbs_on_softib() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let out = procs::finish(
        softib_run(&lib, &[], &["ucx_info", "-d"]).spawn().unwrap(),
        "ucx_info -d",
    );
    assert!(out.status.success(), "{}", text(&out));
    lists_verbs_transports(&text(&out));

    // As an unprivileged user too (nothing of softib's needs root or files in /dev).
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root && on_path("setpriv") {
        let prefix = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ];
        let mut c = softib_run_as(&prefix, &lib, &[], &["ucx_info", "-d"]);
        c.env("HOME", "/nonexistent");
        let out = procs::finish(c.spawn().unwrap(), "ucx_info -d as uid 65534");
        assert!(out.status.success(), "{}", text(&out));
        lists_verbs_transports(&text(&out));
    } else if root {
        println!("(root without setpriv: not run as an unprivileged user)");
    }
}

/// Runs a `ucx_perftest` pair under `softib run` (server, then the client towards
/// 127.0.0.1) with `env` and `args`; both outputs, the client's first.
fn perftest_pair(lib: &Path, env: &[(&str, &str)], args: &[&str]) -> (String, String) {
    let port = free_port().to_string();
    let mut server_args = vec!["ucx_perftest", "-p", port.as_str()];
    server_args.extend_from_slice(args);
    let server = softib_run(lib, env, &server_args).spawn().unwrap();
    let mut client_args = vec!["ucx_perftest", "127.0.0.1", "-p", port.as_str()];
    client_args.extend_from_slice(args);
    // The server listens within moments; the client retries its connection a few times.
    let start = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(300));
        let out = procs::finish(
            softib_run(lib, env, &client_args).spawn().unwrap(),
            "ucx_perftest client",
        );
        let t = text(&out);
        if out.status.success()
            || !t.contains("connect")
            || start.elapsed() > Duration::from_secs(10)
        {
            break out;
        }
    };
    let server = procs::finish(server, "ucx_perftest server");
    let (c, s) = (text(&client), text(&server));
    assert!(client.status.success(), "client failed:\n{c}\nserver:\n{s}");
    assert!(server.status.success(), "server failed:\n{s}\nclient:\n{c}");
    (c, s)
}

/// The average latency (us) of the `Final:` line of ucx_perftest's report.
fn final_latency(out: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line in\n{out}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    f.get(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no latency in {line:?}"))
}

fn tag_lat(tls: &str, lane: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let env = [
        ("UCX_TLS", tls),
        ("UCX_LOG_LEVEL", "info"),
        ("SOFTIB_STATS", "1"),
    ];
    let (client, server) = perftest_pair(&lib, &env, &["-t", "tag_lat", "-n", "2000", "-w", "100"]);
    let lat = final_latency(&client);
    println!("UCX_TLS={tls} tag_lat: {lat} us (one way, average of 2000)");
    assert!(lat > 0.0 && lat < 10_000.0, "latency {lat} us\n{client}");
    // The tag lane is softib's, and the messages went through softib.
    for (who, out) in [("client", &client), ("server", &server)] {
        assert!(
            out.lines()
                .any(|l| l.contains("ep_cfg") && l.contains(lane)),
            "{who}: no endpoint lane on {lane}:\n{out}"
        );
        let sent = datagrams_sent(out);
        assert!(sent >= 2000, "{who}: softib sent {sent} datagrams:\n{out}");
    }
}

#[test]
fn ucx_perftest_tag_lat_over_rc_verbs() {
    tag_lat("rc_verbs,ud_verbs", "tag(rc_verbs/softib0:1)");
}

#[test]
fn ucx_perftest_tag_lat_over_ud_verbs() {
    tag_lat("ud_verbs", "tag(ud_verbs/softib0:1)");
}

/// UCT's own active-message latency test on one transport of softib's device.
#[test]
fn ucx_perftest_uct_am_lat_over_ud_verbs() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let (client, _) = perftest_pair(
        &lib,
        &[],
        &[
            "-t",
            "am_lat",
            "-d",
            "softib0:1",
            "-x",
            "ud_verbs",
            "-n",
            "2000",
            "-w",
            "100",
        ],
    );
    let lat = final_latency(&client);
    println!("ud_verbs am_lat: {lat} us");
    assert!(lat > 0.0 && lat < 10_000.0, "latency {lat} us\n{client}");
}
