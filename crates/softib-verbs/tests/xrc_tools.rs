//! Debian's own XRC programs, unmodified, between softib processes on this machine:
//! `ibv_xsrq_pingpong` (ibverbs-utils) and perftest's `ib_{send,write,read,atomic}_bw` and
//! `ib_send_lat` with `-c XRC`. Each case starts the server, waits until it listens on its TCP
//! port, runs the client (or clients), and passes when all exit 0 and print their result:
//! "success" for the pingpong (which exits non-zero, or never ends, unless every one of its
//! messages came back), the result line with the asked byte and iteration counts for perftest.
//! Each process loads this build's `libibverbs.so` (`LD_LIBRARY_PATH`) and opens the "auto"
//! device: the processes are members of the host-wide device of 127.0.0.1 (one GID, QP and SRQ
//! numbers that name their process: docs/host.md), as the processes of a host share its NIC.
//!
//! The pingpong cases also capture the client's frames (`SOFTIB_PCAP`) and check them: every
//! message in both directions travelled as XRC SENDs carrying an XRCETH that names one of the
//! two SRQ numbers the programs printed, one message per iteration each way.
//!
//! `ibv_xsrq_pingpong -c 2` runs a server and two client processes. All three open the XRC
//! domain of `/tmp/xrc_domain`; the server sends each client's messages round robin through
//! its connections to both clients' target QPs, so a target QP of one client process delivers
//! into the XRC SRQ of the other (docs/xrc.md, "Domains shared between processes"): each
//! client's counters (`SOFTIB_STATS`) must show such deliveries.
//!
//! A missing program skips its case with `SKIPPED: why` (Debian: `apt-get install
//! ibverbs-utils perftest`).

mod common;

use std::collections::HashSet;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use softib_wire::pcap::PcapReader;
use softib_wire::roce::RocePacket;

/// Longest a case's process may run.
const LIMIT: Duration = Duration::from_secs(30);

/// The program's path, or why the case cannot run.
fn tool(name: &str, package: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} is not installed (Debian: apt-get install {package})"))
}

/// A TCP port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// True once some socket listens on TCP `port` (IPv4 or IPv6), read from /proc/net: a probing
/// connection would be taken by the server as its client.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// One process of a case: its command line and where its output goes.
struct Proc {
    child: Child,
    out: PathBuf,
    what: String,
}

impl Proc {
    fn spawn(
        dir: &Path,
        tag: &str,
        libdir: &Path,
        prog: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let out = dir.join(format!("{tag}.log"));
        let f = File::create(&out).unwrap();
        let child = Command::new(prog)
            .args(args)
            .current_dir(dir)
            .env("LD_LIBRARY_PATH", libdir)
            .env("SOFTIB_CONFIG", "/nonexistent")
            .env_remove("SOFTIB_BIND")
            .env_remove("SOFTIB_PCAP")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", prog.display()));
        Proc {
            child,
            out,
            what: format!("{} {}", prog.display(), args.join(" ")),
        }
    }

    /// Waits for the exit (killing the process at `deadline`); the status (`None`: killed)
    /// and the output.
    fn finish(mut self, deadline: Instant) -> (Option<ExitStatus>, String) {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        println!("--- {} ({status:?})\n{out}", self.what);
        (status, out)
    }
}

/// What a case's two processes printed.
struct Outputs {
    server: String,
    client: String,
    dir: PathBuf,
}

/// Runs `prog` as a server (`server_args`) and then as its client (`client_args`); panics
/// unless both exit 0. `None` (after printing the skip line) if the program or the library
/// is missing.
fn pair(
    name: &str,
    prog: &str,
    package: &str,
    server_args: &[&str],
    client_args: &[&str],
    client_env: &[(&str, &str)],
) -> Option<Outputs> {
    let g = group(name, prog, package, server_args, client_args, client_env, 1)?;
    Some(Outputs {
        server: g.server,
        client: g.clients.into_iter().next().unwrap_or_default(),
        dir: g.dir,
    })
}

/// What a case's server and clients printed.
struct GroupOutputs {
    server: String,
    clients: Vec<String>,
    dir: PathBuf,
}

/// Runs `prog` as a server (`server_args`) and then as `clients` client processes
/// (`client_args`, started one after the other as the server accepts them in turn); panics
/// unless all exit 0. `None` (after printing the skip line) if the program or the library is
/// missing.
fn group(
    name: &str,
    prog: &str,
    package: &str,
    server_args: &[&str],
    client_args: &[&str],
    client_env: &[(&str, &str)],
    clients: usize,
) -> Option<GroupOutputs> {
    let prog = match tool(prog, package) {
        Ok(p) => p,
        Err(why) => {
            common::skip(&why);
            return None;
        }
    };
    let Some(lib) = common::built_lib() else {
        common::skip("no built libibverbs.so (cargo build -p softib-verbs)");
        return None;
    };
    let dir = common::scratch(name);
    let libdir = common::link_dir(&lib, &dir);
    let port = free_port().to_string();
    let mut s_args = vec!["-p", port.as_str()];
    s_args.extend_from_slice(server_args);
    let mut c_args = vec!["-p", port.as_str()];
    c_args.extend_from_slice(client_args);
    c_args.push("127.0.0.1");

    let start = Instant::now();
    let server = Proc::spawn(&dir, "server", &libdir, &prog, &s_args, &[]);
    let p: u16 = port.parse().unwrap();
    while !listening(p) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let procs: Vec<Proc> = (0..clients)
        .map(|k| {
            let tag = if clients == 1 {
                "client".to_string()
            } else {
                format!("client{k}")
            };
            Proc::spawn(&dir, &tag, &libdir, &prog, &c_args, client_env)
        })
        .collect();
    let deadline = Instant::now() + LIMIT;
    let done: Vec<(Option<ExitStatus>, String)> =
        procs.into_iter().map(|c| c.finish(deadline)).collect();
    let (s_status, s_out) = server.finish(deadline);
    println!("{name}: {:.2} s", start.elapsed().as_secs_f64());
    let all_ok = s_status.is_some_and(|s| s.success())
        && done.iter().all(|(st, _)| st.is_some_and(|s| s.success()));
    assert!(
        all_ok,
        "{name}: clients {:?}, server {s_status:?} (None: killed after {LIMIT:?})\n\
         clients:\n{}\nserver:\n{s_out}",
        done.iter().map(|(st, _)| *st).collect::<Vec<_>>(),
        done.iter()
            .map(|(_, o)| o.as_str())
            .collect::<Vec<_>>()
            .join("\n--\n")
    );
    Some(GroupOutputs {
        server: s_out,
        clients: done.into_iter().map(|(_, o)| o).collect(),
        dir,
    })
}

// ----- ibv_xsrq_pingpong ---------------------------------------------------------------------

/// The SRQ numbers in the pingpong's "local:" and "remote:" lines.
fn printed_srqns(out: &str) -> HashSet<u32> {
    out.lines()
        .filter_map(|l| l.split("SRQN ").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .filter_map(|n| u32::from_str_radix(n.trim(), 16).ok())
        .collect()
}

/// The XRC SEND messages in the client's capture: (distinct messages, packets), checking that
/// every SEND packet carries an XRCETH naming one of `srqns`. A message is counted by its
/// last packet (LAST or ONLY), once per (destination QP, PSN) so a retransmission is not
/// counted twice.
fn xrc_sends_captured(dir: &Path, srqns: &HashSet<u32>) -> (usize, usize) {
    let mut messages = HashSet::new();
    let mut packets = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if !path.to_string_lossy().ends_with(".pcap") {
            continue;
        }
        files += 1;
        let bytes = std::fs::read(&path).unwrap();
        let reader = PcapReader::new(&bytes).unwrap();
        for rec in reader.records() {
            let rec = rec.unwrap();
            let Ok(pkt) = RocePacket::parse(rec.data) else {
                continue;
            };
            let h = &pkt.transport.headers;
            let op = h.bth.opcode.0;
            // Every SEND of the run is an XRC SEND (0xA0..=0xA5); no RC SEND (0x00..=0x05).
            assert!(
                op > 0x05,
                "an RC SEND packet (opcode {op:#04x}) in {}",
                path.display()
            );
            if !(0xa0..=0xa5).contains(&op) {
                continue;
            }
            let x = h
                .xrceth
                .unwrap_or_else(|| panic!("XRC SEND {op:#04x} without XRCETH"));
            assert!(
                srqns.contains(&x.xrcsrq.value()),
                "XRCETH names SRQ {} (printed: {srqns:?})",
                x.xrcsrq.value()
            );
            packets += 1;
            if matches!(op, 0xa2..=0xa5) {
                messages.insert((h.bth.dest_qp.value(), h.bth.psn.value()));
            }
        }
    }
    assert!(files > 0, "no capture written in {}", dir.display());
    (messages.len(), packets)
}

/// One pingpong run: `iters` messages each way of `size` bytes (4096 if `None`), the client's
/// frames captured and checked.
fn xsrq(name: &str, extra: &[&str], iters: usize, size: Option<usize>) {
    let pcap_dir =
        std::env::temp_dir().join(format!("softib-xrc-pcap-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&pcap_dir);
    std::fs::create_dir_all(&pcap_dir).unwrap();
    let base = pcap_dir.join("client");
    let base = base.to_string_lossy().into_owned();
    let mut args = vec!["-g", "0"];
    args.extend_from_slice(extra);
    let Some(o) = pair(
        name,
        "ibv_xsrq_pingpong",
        "ibverbs-utils",
        &args,
        &args,
        &[("SOFTIB_PCAP", &base)],
    ) else {
        return;
    };
    for (who, out) in [("server", &o.server), ("client", &o.client)] {
        assert!(
            out.lines().any(|l| l.trim() == "success"),
            "{name}: the {who} did not print success:\n{out}"
        );
    }
    // The client prints its own SRQ number and the server's; they differ (an SRQ number's high
    // byte names its process on the host-wide device), and the server prints the same two.
    let srqns = printed_srqns(&o.client);
    assert_eq!(srqns.len(), 2, "{name}: SRQ numbers printed: {srqns:?}");
    assert_eq!(
        printed_srqns(&o.server),
        srqns,
        "{name}: the server's SRQ numbers"
    );
    let (messages, packets) = xrc_sends_captured(&pcap_dir, &srqns);
    // The MTU is 1024 (the pingpong's default -m), so a message is ceil(size/1024) packets.
    let per_msg = size.unwrap_or(4096).div_ceil(1024).max(1);
    println!(
        "{name}: {messages} XRC SEND messages, {packets} packets captured (expected {} and at \
         least {}) in {}",
        2 * iters,
        2 * iters * per_msg,
        o.dir.display()
    );
    assert_eq!(messages, 2 * iters, "{name}: XRC SEND messages, both ways");
    assert!(
        packets >= 2 * iters * per_msg,
        "{name}: {packets} XRC SEND packets"
    );
    let _ = std::fs::remove_dir_all(&pcap_dir);
}

/// The defaults: 5 messages of 4096 bytes each way, polling.
#[test]
fn xsrq_pingpong_defaults() {
    xsrq("xsrq-defaults", &[], 5, None);
}

/// 100 iterations, polling.
#[test]
fn xsrq_pingpong_100_iterations() {
    xsrq("xsrq-n100", &["-n", "100"], 100, None);
}

/// 100 iterations sleeping on completion events (`-e`).
#[test]
fn xsrq_pingpong_100_iterations_with_events() {
    xsrq("xsrq-n100-e", &["-n", "100", "-e"], 100, None);
}

/// 500 single-packet messages at path MTU 4096, with `-c 1` given explicitly (one client).
#[test]
fn xsrq_pingpong_500_small_messages() {
    xsrq(
        "xsrq-n500-s64",
        &["-c", "1", "-n", "500", "-s", "64", "-m", "4096"],
        500,
        Some(64),
    );
}

/// A number in a `SOFTIB_STATS` line: `name: N` (the first one).
fn stat(out: &str, name: &str) -> Option<u64> {
    let at = out.find(&format!("{name}: "))? + name.len() + 2;
    out[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// One server and two client processes (`-c 2` on the server), 100 messages of 4096 bytes
/// each way per client, polling and then sleeping on completion events: the server sends a
/// client's messages through both clients' target QPs, so each client's XRC SRQ receives
/// through the other client's process (its runtime counts the delegations it took, and the
/// other's target QP the ones it handed on).
#[test]
fn xsrq_pingpong_two_clients() {
    for (name, extra) in [("xsrq-c2", &[][..]), ("xsrq-c2-e", &["-e"][..])] {
        let mut s_args = vec!["-g", "0", "-c", "2", "-n", "100"];
        s_args.extend_from_slice(extra);
        let mut c_args = vec!["-g", "0", "-n", "100"];
        c_args.extend_from_slice(extra);
        let Some(o) = group(
            name,
            "ibv_xsrq_pingpong",
            "ibverbs-utils",
            &s_args,
            &c_args,
            &[("SOFTIB_STATS", "1")],
            2,
        ) else {
            return;
        };
        for (who, out) in
            std::iter::once(("server", &o.server)).chain(o.clients.iter().map(|c| ("a client", c)))
        {
            assert!(
                out.lines().any(|l| l.trim() == "success"),
                "{name}: {who} did not print success:\n{out}"
            );
        }
        // Three processes, three SRQ numbers (each client prints its own and the server's).
        let srqns: HashSet<u32> = o.clients.iter().flat_map(|c| printed_srqns(c)).collect();
        assert_eq!(srqns.len(), 3, "{name}: {srqns:?}");
        for c in &o.clients {
            let taken = stat(c, "xrc_delegated_in").unwrap_or(0);
            let handed = stat(c, "xrc_delegated").unwrap_or(0);
            println!("{name}: a client took {taken} delegations and handed on {handed}");
            assert!(
                taken > 0 && handed > 0,
                "{name}: each client receives through the other's target QP:\n{c}"
            );
            assert_eq!(stat(c, "xrc_delegations_dropped"), Some(0), "{name}:\n{c}");
        }
        let _ = std::fs::remove_dir_all(&o.dir);
    }
}

// ----- perftest ------------------------------------------------------------------------------

/// (bytes, iterations) of perftest's result line ("#bytes #iterations ..." then numbers).
fn perftest_result(out: &str) -> Option<(u64, u64)> {
    let mut after_header = false;
    for l in out.lines() {
        if l.trim_start().starts_with("#bytes") {
            after_header = true;
            continue;
        }
        if after_header {
            let mut it = l.split_whitespace();
            let bytes = it.next()?.parse().ok()?;
            let iters = it.next()?.parse().ok()?;
            return Some((bytes, iters));
        }
    }
    None
}

/// One perftest run of `iters` iterations; the result line must report `bytes` and
/// `reported` iterations (perftest counts every QP's: `-q 4` reports 4 × `-n`).
fn perftest(test: &str, extra: &[&str], bytes: u64, iters: u64, reported: u64) {
    let n = iters.to_string();
    let mut args = vec!["-c", "XRC", "-n", n.as_str()];
    args.extend_from_slice(extra);
    let name = format!("{test}-xrc{}", extra.join(""));
    let Some(o) = pair(&name, test, "perftest", &args, &args, &[]) else {
        return;
    };
    assert!(
        o.client.contains("Connection type : XRC"),
        "{name}: not an XRC run:\n{}",
        o.client
    );
    let got = perftest_result(&o.client);
    println!("{name}: result (bytes, iterations) {got:?}");
    assert_eq!(
        got,
        Some((bytes, reported)),
        "{name}: result line\n{}",
        o.client
    );
}

#[test]
fn perftest_send_bw_xrc() {
    perftest("ib_send_bw", &[], 65536, 1000, 1000);
}

#[test]
fn perftest_write_bw_xrc() {
    perftest("ib_write_bw", &[], 65536, 1000, 1000);
}

#[test]
fn perftest_read_bw_xrc() {
    perftest("ib_read_bw", &[], 65536, 1000, 1000);
}

/// Bidirectional: each process has XRC initiators and targets.
#[test]
fn perftest_send_bw_xrc_bidirectional() {
    perftest("ib_send_bw", &["-b"], 65536, 1000, 1000);
}

/// Four initiator/target pairs.
#[test]
fn perftest_write_bw_xrc_four_qps() {
    perftest("ib_write_bw", &["-q", "4"], 65536, 1000, 4000);
}

#[test]
fn perftest_atomic_bw_xrc() {
    perftest("ib_atomic_bw", &[], 8, 1000, 1000);
}

/// Latency: both processes ping-pong through an initiator and a target each.
#[test]
fn perftest_send_lat_xrc() {
    perftest("ib_send_lat", &[], 2, 1000, 1000);
}
