//! Debian's libfabric 1.17 (`libfabric-bin`) unmodified on softib through `softib run`: its
//! verbs provider lists softib's device for connected (MSG), datagram (DGRAM) and, through
//! `ofi_rxm`, reliable datagram (RDM) endpoints, and `fi_pingpong -p verbs` runs between two
//! processes of this host for each endpoint type, every message checked (`-c`) and carried by
//! softib (its counters). A C program (`tests/c/fi_msg.c`) connects MSG endpoints found the
//! way applications find them: the server with fi_getinfo's passive-side hints (a service and
//! FI_SOURCE), the client with the server's node and service. Open MPI 4.1 (pml cm, mtl ofi)
//! runs two ranks over `verbs;ofi_rxm` (`tests/c/mpi_check.c`, every message checked).
//!
//! Both processes use a device of their own on 127.0.93.1 (`SOFTIB_BIND`), apart from other
//! tests' devices; every run has a deadline. Skips, saying why, where libfabric's tools (or,
//! for the C programs, libfabric's headers or Open MPI) or this build's libraries are missing;
//! installs nothing (scripts/install-deps.sh installs libfabric-bin, libfabric-dev,
//! openmpi-bin and libopenmpi-dev).

mod procs;

use procs::{datagrams_sent, free_port, on_path, skip, text};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One pair at a time: two busy-polling processes each already fill a small machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// The device address both processes bind (no other test uses it).
const BIND: &str = "127.0.93.1";

/// What the tests need, or why they cannot run here.
fn setup() -> Result<PathBuf, String> {
    for tool in ["fi_info", "fi_pingpong"] {
        if !on_path(tool) {
            return Err(format!("{tool} is not installed (Debian: libfabric-bin)"));
        }
    }
    procs::library_dir(&["libibverbs.so", "librdmacm.so", "libsoftib_preload.so"]).ok_or_else(
        || {
            "this build's libibverbs.so, librdmacm.so and libsoftib_preload.so are not beside the \
         softib binary (cargo build --release)"
                .to_string()
        },
    )
}

/// `softib run -- argv` with the build's libraries on softib's device at [`BIND`], no
/// inherited softib or libfabric settings.
fn softib_run(lib: &Path, env: &[(&str, &str)], argv: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softib"));
    // In the build's temporary directory: whatever a crashing program leaves in its working
    // directory (a backtrace file) stays out of the source tree.
    c.arg("run")
        .arg("--")
        .args(argv)
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .env("SOFTIB_LIB_DIR", lib)
        .env("SOFTIB_BIND", BIND)
        .env_remove("SOFTIB_CONFIG")
        .env_remove("LD_PRELOAD")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") && !env.iter().any(|(e, _)| *e == k) {
            c.env_remove(k);
        }
    }
    c
}

/// True once a socket of this network namespace listens on TCP `port` (fi_pingpong's
/// server accepts one control connection: a probe would take its place).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3
                    && c[3] == "0A"
                    && c[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
        })
    })
}

/// Kills the server if the client side of a pair fails.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a server, waits until `ready` says it is listening, then the client; both outputs
/// (client's first) once both exited successfully within their deadline (60 s each).
fn pair(server: Command, ready: impl Fn(&mut Child) -> bool, client: Command) -> (String, String) {
    let mut server = server;
    let mut reaper = Reaper(Some(server.spawn().expect("start the server")));
    let start = Instant::now();
    loop {
        let s = reaper.0.as_mut().expect("the server");
        if let Ok(Some(st)) = s.try_wait() {
            let out = reaper
                .0
                .take()
                .expect("the server")
                .wait_with_output()
                .unwrap();
            panic!(
                "the server exited ({st}) before it listened:\n{}",
                text(&out)
            );
        }
        if ready(s) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server did not listen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = client;
    let client = procs::finish(client.spawn().expect("start the client"), "the client");
    let c = text(&client);
    let server = procs::finish(reaper.0.take().expect("the server"), "the server");
    let s = text(&server);
    assert!(client.status.success(), "client failed:\n{c}\nserver:\n{s}");
    assert!(server.status.success(), "server failed:\n{s}\nclient:\n{c}");
    (c, s)
}

/// `fi_info -p verbs` lists softib's device for MSG, DGRAM and (through ofi_rxm) RDM.
#[test]
fn fi_info_lists_verbs_and_ofi_rxm_on_softib() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let out = procs::finish(
        softib_run(&lib, &[], &["fi_info", "-p", "verbs"])
            .spawn()
            .unwrap(),
        "fi_info -p verbs",
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // fi_info prints provider, fabric, domain, version, type and protocol per entry.
    let mut entries = Vec::new();
    let mut cur: Vec<(String, String)> = Vec::new();
    for line in t.lines() {
        let Some((k, v)) = line.trim().split_once(": ") else {
            continue;
        };
        if k == "provider" && !cur.is_empty() {
            entries.push(std::mem::take(&mut cur));
        }
        cur.push((k.to_string(), v.to_string()));
    }
    entries.push(cur);
    let has = |prov: &str, domain: &str, ty: &str| {
        entries.iter().any(|e| {
            let get = |k: &str| e.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
            get("provider") == Some(prov)
                && get("domain") == Some(domain)
                && get("type") == Some(ty)
        })
    };
    for (prov, domain, ty) in [
        ("verbs", "softib0", "FI_EP_MSG"),
        ("verbs", "softib0-dgram", "FI_EP_DGRAM"),
        ("verbs;ofi_rxm", "softib0", "FI_EP_RDM"),
    ] {
        assert!(
            has(prov, domain, ty),
            "fi_info -p verbs lists no {prov} {domain} {ty}:\n{t}"
        );
    }
}

/// `fi_pingpong -p verbs -e EP` between two processes: 200 round trips of each size up to
/// the endpoint's largest (DGRAM: the path MTU), every message checked, carried by softib.
fn pingpong(ep: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let port = free_port();
    let p = port.to_string();
    let env = [("SOFTIB_STATS", "1")];
    let common = ["fi_pingpong", "-p", "verbs", "-e", ep, "-I", "200", "-c"];
    let server = {
        let mut a = common.to_vec();
        a.extend_from_slice(&["-B", &p]);
        softib_run(&lib, &env, &a)
    };
    let client = {
        let mut a = common.to_vec();
        a.extend_from_slice(&["-P", &p, "127.0.0.1"]);
        softib_run(&lib, &env, &a)
    };
    let (client, server) = pair(server, |_| listening(port), client);
    for (who, out) in [("client", &client), ("server", &server)] {
        let rows: Vec<(u64, f64)> = out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let bytes = f.first()?.parse::<u64>().ok().or_else(|| {
                    let (n, unit) = f.first()?.split_at(f.first()?.len() - 1);
                    let m = match unit {
                        "k" => 1 << 10,
                        "m" => 1 << 20,
                        _ => return None,
                    };
                    Some(n.parse::<u64>().ok()? * m)
                })?;
                (f.len() == 8 && f[2] == "=200").then_some((bytes, f[6].parse().ok()?))
            })
            .collect();
        assert!(
            rows.iter().any(|&(b, _)| b == 64) && rows.len() >= 4,
            "{who}: no results of fi_pingpong -e {ep} for 64 bytes and up:\n{out}"
        );
        for &(b, lat) in &rows {
            assert!(
                lat > 0.0 && lat < 100_000.0,
                "{who}: {b} bytes: {lat} us\n{out}"
            );
        }
        let sent = datagrams_sent(out);
        assert!(sent >= 200, "{who}: softib sent {sent} datagrams:\n{out}");
        if who == "client" {
            let lat64 = rows.iter().find(|&&(b, _)| b == 64).map(|r| r.1);
            println!(
                "fi_pingpong -e {ep}: 64 bytes {lat64:?} us/xfer; sizes {}",
                rows.len()
            );
        }
    }
}

#[test]
fn fi_pingpong_msg() {
    pingpong("msg");
}

#[test]
fn fi_pingpong_rdm_over_ofi_rxm() {
    pingpong("rdm");
}

#[test]
fn fi_pingpong_dgram() {
    pingpong("dgram");
}

/// Compiles tests/c/fi_msg.c against the installed libfabric, or says why it cannot.
fn fi_msg_program() -> Result<PathBuf, String> {
    if !Path::new("/usr/include/rdma/fabric.h").is_file() {
        return Err("libfabric's headers are not installed (Debian: libfabric-dev)".into());
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fi_msg.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fi_msg");
    let cc = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-lfabric")
        .output()
        .map_err(|e| format!("no C compiler: {e}"))?;
    if !cc.status.success() {
        return Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&cc.stderr)
        ));
    }
    Ok(out)
}

/// MSG endpoints found as applications find them: the server through fi_getinfo's
/// passive-side hints (no node, a service, FI_SOURCE: the wildcard address), the client
/// through the server's node and service; messages of 1 byte to 1 MiB, each checked both
/// ways.
#[test]
fn fi_msg_passive_hints_and_connect() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    let prog = match fi_msg_program() {
        Ok(p) => p,
        Err(r) => return skip(&r),
    };
    let prog = prog.to_str().expect("a UTF-8 path");
    // A port no id of this host holds (rdma_cm ports are the CM's, not TCP's: a free TCP port
    // is as good a guess as any).
    let service = free_port().to_string();
    let server = softib_run(&lib, &[], &[prog, "server", &service]);
    let client = softib_run(&lib, &[], &[prog, "client", BIND, &service]);
    // The server says when it listens: its first line of stdout (the rest goes to stderr).
    let ready = |c: &mut Child| -> bool {
        use std::io::BufRead;
        let Some(out) = c.stdout.take() else {
            return true;
        };
        let mut r = std::io::BufReader::new(out);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        assert!(
            line.starts_with("listening on 0.0.0.0:"),
            "server said {line:?}"
        );
        // The rest of its output is not needed.
        std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
        true
    };
    let (c, s) = pair(server, ready, client);
    assert!(
        c.contains("client: 12 messages sent, answers checked"),
        "{c}"
    );
    assert!(
        s.contains("server: 12 messages checked and answered"),
        "{s}"
    );
}

/// Open MPI 4.1 (pml cm, mtl ofi) over libfabric's verbs;ofi_rxm on softib: two ranks of
/// `mpirun.openmpi` on this host, every message of a ping-pong of 1 byte to 4 MiB checked
/// (tests/c/mpi_check.c), the traffic carried by softib.
#[test]
fn open_mpi_over_verbs_ofi_rxm() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = match setup() {
        Ok(l) => l,
        Err(r) => return skip(&r),
    };
    for tool in ["mpicc.openmpi", "mpirun.openmpi"] {
        if !on_path(tool) {
            return skip(&format!("{tool} is not installed (Debian: openmpi-bin)"));
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
    let prog = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mpi_check");
    let cc = Command::new("mpicc.openmpi")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .expect("run mpicc.openmpi");
    if !cc.status.success() {
        return skip(&format!(
            "mpicc.openmpi failed: {}",
            String::from_utf8_lossy(&cc.stderr)
        ));
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    let mut argv = vec!["mpirun.openmpi"];
    if root {
        argv.push("--allow-run-as-root");
    }
    let prog = prog.to_str().expect("a UTF-8 path");
    argv.extend_from_slice(&[
        "-np",
        "2",
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        "verbs;ofi_rxm",
        prog,
    ]);
    let out = procs::finish(
        softib_run(&lib, &[("SOFTIB_STATS", "1")], &argv)
            .spawn()
            .expect("run mpirun.openmpi"),
        "mpirun.openmpi",
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let line = t
        .lines()
        .find(|l| l.starts_with("mpi_check:"))
        .unwrap_or_else(|| panic!("no result line:\n{t}"));
    assert!(
        line.starts_with("mpi_check: 48 messages checked each way, 0 bad;"),
        "{line}"
    );
    println!("{line}");
    // Both ranks' messages went through softib (10 000 round trips and the ping-pong).
    let sent = datagrams_sent(&t);
    assert!(sent >= 2 * 10_000, "softib sent {sent} datagrams:\n{t}");
}
