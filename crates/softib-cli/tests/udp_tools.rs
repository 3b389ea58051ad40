//! The real-UDP tools as two processes on loopback: `softib pingpong` (RC) prints the lines of
//! `ibv_rc_pingpong` on both sides, `softib bench` completes every operation with `--json`
//! over UDP and over shared memory,
//! `--pcap` captures frames whose ICRC verifies, and a pingpong through `softib relay` with
//! seeded loss still completes.
//!
//! Every test uses its own 127.0.x.0/24 addresses and TCP port, so they can run in parallel.

mod procs;

use procs::{finish, ok, softib, spawn};
use std::thread::sleep;
use std::time::Duration;

/// Runs a server and a client (the client gets `server_ip` appended) and returns both outputs.
fn pair(server: &[&str], client: &[&str], server_ip: &str) -> (String, String) {
    let s = spawn(server);
    sleep(Duration::from_millis(300));
    let mut cargs = client.to_vec();
    cargs.push(server_ip);
    let c = spawn(&cargs);
    let cout = finish(c, "client");
    let sout = finish(s, "server");
    (ok(&sout, "server"), ok(&cout, "client"))
}

fn check_pingpong_lines(out: &str, bytes: u64, iters: u32) {
    assert!(
        out.contains("  local address:  LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(
        out.contains("  remote address: LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(out.contains(&format!("{bytes} bytes in ")), "{out}");
    assert!(out.contains(" Mbit/sec"), "{out}");
    assert!(out.contains(&format!("{iters} iters in ")), "{out}");
    assert!(out.contains(" usec/iter"), "{out}");
}

#[test]
fn rc_pingpong_between_two_processes_with_capture() {
    let dir = std::env::temp_dir().join(format!("softib-udp-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("pp.pcap");
    let (s, c) = pair(
        &[
            "pingpong",
            "--bind",
            "127.0.4.1",
            "-p",
            "18811",
            "-n",
            "200",
            "-s",
            "3000",
        ],
        &[
            "pingpong",
            "--bind",
            "127.0.4.2",
            "-p",
            "18811",
            "-n",
            "200",
            "-s",
            "3000",
            "--pcap",
            pcap.to_str().unwrap(),
        ],
        "127.0.4.1",
    );
    check_pingpong_lines(&s, 3000 * 200 * 2, 200);
    check_pingpong_lines(&c, 3000 * 200 * 2, 200);
    assert!(s.contains("GID ::ffff:127.0.4.1"), "{s}");
    assert!(c.contains("GID ::ffff:127.0.4.2"), "{c}");
    // Every captured frame parses and its ICRC verifies.
    let out = softib()
        .args(["pcap", "check", pcap.to_str().unwrap()])
        .output()
        .unwrap();
    let text = ok(&out, "pcap check");
    assert!(text.contains(" 0 bad"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `softib bench --perftest` against a softib server, which recognises perftest's exchange:
/// both sides agree on every step (version, MTU, keys, the report the server prints).
#[test]
fn bench_speaks_perftests_exchange() {
    for (k, op) in ["write", "read", "send", "atomic"].iter().enumerate() {
        let port = (18841 + k).to_string();
        let common = ["-p", &port, "-s", "4096", "-n", "250", "--json"];
        let server: Vec<&str> = ["bench", op, "--bind", "127.0.7.1"]
            .into_iter()
            .chain(common)
            .collect();
        let client: Vec<&str> = ["bench", op, "--perftest", "--bind", "127.0.7.2"]
            .into_iter()
            .chain(common)
            .collect();
        let (s, c) = pair(&server, &client, "127.0.7.1");
        let size = if *op == "atomic" { 8 } else { 4096 };
        for (side, out) in [("server", &s), ("client", &c)] {
            let v: serde_json::Value = serde_json::from_str(out.trim())
                .unwrap_or_else(|e| panic!("{op} {side}: {e}: {out}"));
            assert_eq!(v["iterations"], 250, "{op} {side}: {v}");
            assert_eq!(v["bytes"], size, "{op} {side}: {v}");
            assert!(
                v["msg_rate_mpps"].as_f64().unwrap() > 0.0,
                "{op} {side}: {v}"
            );
        }
        if *op != "send" {
            // The server prints the report the client sent: the same figures.
            let (vs, vc): (serde_json::Value, serde_json::Value) = (
                serde_json::from_str(s.trim()).unwrap(),
                serde_json::from_str(c.trim()).unwrap(),
            );
            let (a, b) = (
                vs["msg_rate_mpps"].as_f64().unwrap(),
                vc["msg_rate_mpps"].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() <= 1e-9 * b.max(1.0),
                "{op}: server {a}, client {b}"
            );
        }
    }
}

/// Every operation over each path between the two processes: the kernel's UDP stack
/// (`--transport udp`) and shared memory (`--transport shm`); `--stats` shows which carried
/// the datagrams.
#[test]
fn bench_runs_every_operation() {
    for (t, transport) in ["udp", "shm"].iter().enumerate() {
        for (k, op) in ["write", "read", "send", "atomic"].iter().enumerate() {
            let port = (18821 + 4 * t + k).to_string();
            let s = spawn(&[
                "bench",
                op,
                "--bind",
                "127.0.5.1",
                "-p",
                &port,
                "--transport",
                transport,
            ]);
            sleep(Duration::from_millis(300));
            let c = spawn(&[
                "bench",
                op,
                "--bind",
                "127.0.5.2",
                "-p",
                &port,
                "-s",
                "8192",
                "-n",
                "300",
                "--json",
                "--stats",
                "--transport",
                transport,
                "127.0.5.1",
            ]);
            let cout = finish(c, "client");
            ok(&finish(s, "server"), "server");
            let c = ok(&cout, "client");
            let v: serde_json::Value = serde_json::from_str(c.trim()).expect("JSON result");
            assert_eq!(v["op"], *op);
            assert_eq!(v["iterations"], 300);
            assert!(v["bw_avg_gbps"].as_f64().unwrap() > 0.0, "{v}");
            assert!(v["msg_rate_mpps"].as_f64().unwrap() > 0.0, "{v}");
            let expected_bytes = if *op == "atomic" { 8 } else { 8192 };
            assert_eq!(v["bytes"], expected_bytes);
            let stats = String::from_utf8_lossy(&cout.stderr);
            let shm_used = !stats.contains("tx_shm: 0,") && !stats.contains("rx_shm: 0,");
            assert!(stats.contains("DeviceStats"), "{stats}");
            assert_eq!(shm_used, *transport == "shm", "{transport} {op}: {stats}");
            assert!(
                stats.contains("tx_dropped: 0,"),
                "{transport} {op}: {stats}"
            );
        }
    }
    // Latency mode and the table.
    let (_s, c) = pair(
        &["bench", "read", "--bind", "127.0.5.1", "-p", "18829"],
        &[
            "bench",
            "read",
            "--lat",
            "--bind",
            "127.0.5.2",
            "-p",
            "18829",
            "-s",
            "64",
            "-n",
            "200",
        ],
        "127.0.5.1",
    );
    assert!(
        c.contains("t_median[usec]") && c.contains("t_p99[usec]"),
        "{c}"
    );
}

/// `bench write --lat --pingpong` (perftest's ib_write_lat method) over both transports: the
/// two sides write to each other in turn, both end cleanly (the last WRITE of each side is
/// acknowledged before it stops) and every turn is reported.
#[test]
fn write_latency_pingpong_between_two_processes() {
    for (transport, port) in [("udp", "18833"), ("shm", "18834")] {
        let (_s, c) = pair(
            &[
                "bench",
                "write",
                "--lat",
                "--pingpong",
                "--bind",
                "127.0.5.1",
                "-p",
                port,
                "--transport",
                transport,
            ],
            &[
                "bench",
                "write",
                "--lat",
                "--pingpong",
                "--bind",
                "127.0.5.2",
                "-p",
                port,
                "-s",
                "64",
                "-n",
                "500",
                "--json",
                "--transport",
                transport,
            ],
            "127.0.5.1",
        );
        let v: serde_json::Value = serde_json::from_str(c.trim()).expect("JSON result");
        assert_eq!(v["iterations"], 500, "{transport}: {v}");
        assert_eq!(v["mode"], "lat");
        let (min, med) = (
            v["t_min_us"].as_f64().unwrap(),
            v["t_median_us"].as_f64().unwrap(),
        );
        assert!(min > 0.0 && med >= min, "{transport}: {v}");
    }
    // Only WRITE has a ping-pong.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_softib"))
        .args(["bench", "send", "--lat", "--pingpong", "127.0.5.9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pingpong"));
}

/// A pingpong through `softib relay` with seeded loss and reordering: over UDP, and over
/// shared memory (`relay --shm`, `pingpong --transport shm`: every datagram through inboxes).
#[test]
fn pingpong_through_a_lossy_relay() {
    for (net, port, transport) in [("127.0.6", "18831", "udp"), ("127.0.9", "18832", "shm")] {
        let side = |n: u8, peer: u8| format!("{net}.{n}:4791={net}.{peer}:4791");
        let mut relay_args = vec![
            "relay".to_string(),
            "--loss".into(),
            "0.02".into(),
            "--reorder".into(),
            "0.01".into(),
            "--seed".into(),
            "9".into(),
            "--duration".into(),
            "60".into(),
            side(3, 1),
            side(4, 2),
        ];
        if transport == "shm" {
            relay_args.push("--shm".into());
        }
        let relay = spawn(&relay_args.iter().map(String::as_str).collect::<Vec<_>>());
        sleep(Duration::from_millis(200));
        let (a, b) = (format!("{net}.1"), format!("{net}.2"));
        let (via_a, via_b) = (format!("{net}.3:4791"), format!("{net}.4:4791"));
        let common = [
            "-p",
            port,
            "-n",
            "300",
            "-s",
            "2000",
            "--transport",
            transport,
        ];
        let server: Vec<&str> = ["pingpong", "--bind", &a, "--peer-via", &via_a]
            .into_iter()
            .chain(common)
            .collect();
        let client: Vec<&str> = ["pingpong", "--bind", &b, "--peer-via", &via_b]
            .into_iter()
            .chain(common)
            .collect();
        let (s, c) = pair(&server, &client, &a);
        // SIGTERM: the relay ends in order and removes its inboxes.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &relay.id().to_string()])
            .status();
        let out = finish(relay, "relay");
        ok(&out, "relay");
        if transport == "shm" {
            let side: std::net::SocketAddr = format!("{net}.3:4791").parse().unwrap();
            assert!(!softib_udp::shm::inbox_path(side).exists());
        }
        check_pingpong_lines(&s, 2000 * 300 * 2, 300);
        check_pingpong_lines(&c, 2000 * 300 * 2, 300);
    }
}

#[test]
fn devinfo_shows_the_bound_gid() {
    let out = softib()
        .args(["devinfo", "--bind", "10.99.0.1", "-v"])
        .output()
        .unwrap();
    let text = ok(&out, "devinfo");
    assert!(text.contains("hca_id:\tsoftib0"), "{text}");
    assert!(text.contains("::ffff:10.99.0.1, RoCE v2"), "{text}");
    assert!(text.contains("link_layer:\t\tEthernet"), "{text}");
}

/// `softib bench icrc` times the ICRC of a real packet layout: the covered bytes are the
/// LRH stand-in, IPv4, UDP, BTH and payload, and both timings are positive.
#[test]
fn bench_icrc_reports_the_covered_bytes_and_both_timings() {
    for (size, covered) in [(64u64, 112u64), (1000, 1048)] {
        let out = softib()
            .args([
                "bench",
                "icrc",
                "-s",
                &size.to_string(),
                "-n",
                "2000",
                "--json",
            ])
            .output()
            .unwrap();
        let text = ok(&out, "bench icrc");
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["bytes"], size, "{text}");
        assert_eq!(v["covered_bytes"], covered, "{text}");
        for k in ["icrc_ns", "crc32fast_copy_ns", "ratio_to_crc32fast"] {
            let x = v[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k}: {text}");
        }
    }
}
