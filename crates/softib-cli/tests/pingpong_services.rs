//! `softib pingpong --service uc`, `--service ud`, `--service xrc` and `--service rd` between two softib processes on loopback
//! (127.0.0.1 and 127.0.0.2 style addresses, each test its own /24 and TCP port): both roles
//! print the lines of `ibv_uc_pingpong` / `ibv_ud_pingpong`, and the captured frames carry the
//! service's opcodes (UC SEND, UD SEND Only with a DETH of the pingpong Q_Key).

mod procs;

use procs::{finish, ok, softib, spawn};
use softib_wire::pcap::PcapReader;
use softib_wire::roce::RocePacket;
use softib_wire::Service;
use std::thread::sleep;
use std::time::Duration;

/// Runs the server with `common` + `--bind net.1`, then the client with `common` +
/// `--bind net.2` + `--pcap pcap` + the server's address; returns both outputs.
fn pingpong(common: &[&str], net: &str, pcap: &str) -> (String, String) {
    let server_ip = format!("{net}.1");
    let client_ip = format!("{net}.2");
    let mut sargs = vec!["pingpong", "--bind", &server_ip];
    sargs.extend_from_slice(common);
    let s = spawn(&sargs);
    sleep(Duration::from_millis(300));
    let mut cargs = vec!["pingpong", "--bind", &client_ip, "--pcap", pcap];
    cargs.extend_from_slice(common);
    cargs.push(&server_ip);
    let c = spawn(&cargs);
    let cout = finish(c, "client");
    let sout = finish(s, "server");
    (ok(&sout, "server"), ok(&cout, "client"))
}

/// The hexadecimal number right after the first `key` in `out`.
fn hex_after(out: &str, key: &str) -> u32 {
    let at = out
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {out}"))
        + key.len();
    let digits: String = out[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u32::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("{key:?} in {out}"))
}

/// A QPN (SRQ number, EECN) of a member of a host-wide device: the member's slot in its high
/// byte, numbered from 0x11 up within it.
fn is_member_number(n: u32) -> bool {
    (1..=254).contains(&(n >> 16)) && (n & 0xFFFF) >= 0x11
}

/// Each side's remote QPN is the other's local one, a member's number.
fn check_exchange(server: &str, client: &str) {
    let local = |o: &str| hex_after(o, "  local address:  LID 0x0000, QPN 0x");
    let remote = |o: &str| hex_after(o, "  remote address: LID 0x0000, QPN 0x");
    assert!(is_member_number(local(server)), "{server}");
    assert!(is_member_number(local(client)), "{client}");
    assert_eq!(local(server), remote(client), "{server}\n{client}");
    assert_eq!(local(client), remote(server), "{server}\n{client}");
}

fn check_lines(out: &str, own_ip: &str, peer_ip: &str, bytes: u64, iters: u32) {
    assert!(
        out.contains("  local address:  LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(out.contains(&format!("GID ::ffff:{own_ip}\n")), "{out}");
    assert!(
        out.contains("  remote address: LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(out.contains(&format!("GID ::ffff:{peer_ip}\n")), "{out}");
    assert!(out.contains(&format!("\n{bytes} bytes in ")), "{out}");
    assert!(out.contains(" Mbit/sec"), "{out}");
    assert!(out.contains(&format!("\n{iters} iters in ")), "{out}");
    assert!(out.contains(" usec/iter"), "{out}");
}

/// The frames of a capture: (service, opcode, payload length, DETH Q_Key).
fn captured(path: &std::path::Path) -> Vec<(Service, u8, usize, Option<u32>)> {
    let bytes = std::fs::read(path).unwrap();
    let r = PcapReader::new(&bytes).unwrap();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            let p = RocePacket::parse(rec.data).unwrap();
            assert!(p.icrc_ok());
            let t = &p.transport;
            let info = t.info().unwrap();
            (
                info.service,
                t.headers.bth.opcode.0,
                t.payload.len(),
                t.headers.deth.map(|d| d.qkey),
            )
        })
        .collect()
}

fn temp_pcap(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("softib-pp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("pp.pcap");
    (dir, pcap)
}

/// UC and UD run over both paths between the processes: the kernel's UDP stack and shared
/// memory (`--transport`); the capture is the same either way.
#[test]
fn uc_pingpong_between_two_processes() {
    for (transport, port, net) in [("udp", "18851", "127.0.11"), ("shm", "18861", "127.0.21")] {
        let (dir, pcap) = temp_pcap(&format!("uc-{transport}"));
        let common = [
            "--service",
            "uc",
            "-p",
            port,
            "-n",
            "150",
            "-s",
            "2500",
            "--transport",
            transport,
        ];
        let (s, c) = pingpong(&common, net, pcap.to_str().unwrap());
        let (a, b) = (format!("{net}.1"), format!("{net}.2"));
        check_lines(&s, &a, &b, 2500 * 150 * 2, 150);
        check_lines(&c, &b, &a, 2500 * 150 * 2, 150);
        check_exchange(&s, &c);
        // 2500 bytes at MTU 1024: SEND First, Middle, Last (UC opcodes 0x20..0x22), both ways.
        let frames = captured(&pcap);
        assert_eq!(frames.len(), 150 * 3 * 2, "{transport}");
        assert!(frames.iter().all(|f| f.0 == Service::Uc), "{frames:?}");
        let mut ops: Vec<u8> = frames.iter().map(|f| f.1).collect();
        ops.sort_unstable();
        ops.dedup();
        assert_eq!(ops, vec![0x20, 0x21, 0x22]);
        let bytes: usize = frames.iter().map(|f| f.2).sum();
        assert_eq!(bytes, 2500 * 150 * 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn ud_pingpong_between_two_processes() {
    for (transport, port, net) in [("udp", "18852", "127.0.12"), ("shm", "18862", "127.0.22")] {
        let (dir, pcap) = temp_pcap(&format!("ud-{transport}"));
        // The ibv_ud_pingpong default size: 2048 bytes, one datagram each.
        let common = [
            "--service",
            "ud",
            "-p",
            port,
            "-n",
            "150",
            "--transport",
            transport,
        ];
        let (s, c) = pingpong(&common, net, pcap.to_str().unwrap());
        let (a, b) = (format!("{net}.1"), format!("{net}.2"));
        check_lines(&s, &a, &b, 2048 * 150 * 2, 150);
        check_lines(&c, &b, &a, 2048 * 150 * 2, 150);
        check_exchange(&s, &c);
        let frames = captured(&pcap);
        assert_eq!(frames.len(), 150 * 2, "{transport}");
        for f in &frames {
            // SEND Only, 2048 bytes, the Q_Key of ibv_ud_pingpong.
            assert_eq!(*f, (Service::Ud, 0x64, 2048, Some(0x1111_1111)));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// XRC: each side's initiator sends to the peer's XRC SRQ through the peer's target QP; the
/// lines are `ibv_xsrq_pingpong`'s, and every captured request is an XRC SEND whose XRCETH
/// names the receiving side's SRQ, every response an XRC Acknowledge.
#[test]
fn xrc_pingpong_between_two_processes() {
    let (dir, pcap) = temp_pcap("xrc");
    let common = ["--service", "xrc", "-p", "18853", "-n", "150", "-s", "2500"];
    let (s, c) = pingpong(&common, "127.0.13", pcap.to_str().unwrap());
    // Each side's SRQ number, as both print it.
    let srqn = |out: &str, ip: &str| {
        let line = out
            .lines()
            .find(|l| l.ends_with(&format!("GID ::ffff:{ip}")))
            .unwrap_or_else(|| panic!("no line of {ip} in {out}"));
        hex_after(line, "SRQN ")
    };
    let (srv, cli) = (srqn(&s, "127.0.13.1"), srqn(&s, "127.0.13.2"));
    for out in [&s, &c] {
        // The target (RECV) QP made after the initiator (SEND), both a member's numbers.
        let recv = hex_after(out, "   local: LID 0000, QPN RECV ");
        let send = hex_after(out, &format!("QPN RECV {recv:06x} SEND "));
        assert!(is_member_number(send) && recv == send + 1, "{out}");
        assert!(is_member_number(srv) && is_member_number(cli), "{out}");
        assert_eq!(
            (srqn(out, "127.0.13.1"), srqn(out, "127.0.13.2")),
            (srv, cli)
        );
        assert!(
            out.contains(&format!("\n{} bytes in ", 2500 * 150 * 2)),
            "{out}"
        );
        assert!(out.contains("\n150 iters in "), "{out}");
    }
    let bytes = std::fs::read(&pcap).unwrap();
    let r = PcapReader::new(&bytes).unwrap();
    let (mut sends, mut acks, mut payload) = (0, 0, 0);
    for rec in r.records() {
        let rec = rec.unwrap();
        let p = RocePacket::parse(rec.data).unwrap();
        assert!(p.icrc_ok());
        let t = &p.transport;
        assert_eq!(t.info().unwrap().service, Service::Xrc);
        match t.headers.bth.opcode.0 {
            0xa0..=0xa2 => {
                // The receiving side's SRQ.
                let srqn = t.headers.xrceth.map(|x| x.xrcsrq.value());
                assert!(srqn == Some(srv) || srqn == Some(cli), "{srqn:?}");
                sends += 1;
                payload += t.payload.len();
            }
            0xb1 => acks += 1,
            op => panic!("unexpected opcode {op:#x}"),
        }
    }
    // 2500 bytes at MTU 1024: First, Middle, Last, each way; acknowledgements coalesce.
    assert_eq!(sends, 150 * 3 * 2);
    assert_eq!(payload, 2500 * 150 * 2);
    assert!(acks >= 150, "{acks} acknowledgements");
    let _ = std::fs::remove_dir_all(&dir);
}

/// RD: each side's RD QP sends to the peer's through a pair of EE contexts; every request is
/// an RD SEND with an RDETH naming the peer's EE context and a DETH with the Q_Key and the
/// sending QP, every response an RD Acknowledge with an RDETH and zero credit bits.
#[test]
fn rd_pingpong_between_two_processes() {
    let (dir, pcap) = temp_pcap("rd");
    let common = ["--service", "rd", "-p", "18854", "-n", "150", "-s", "2500"];
    let (s, c) = pingpong(&common, "127.0.14", pcap.to_str().unwrap());
    let qpn = |out: &str, side: &str| hex_after(out, &format!("{side}: LID 0000, QPN "));
    let eecn = |out: &str, ip: &str| {
        let line = out
            .lines()
            .find(|l| l.ends_with(&format!("GID ::ffff:{ip}")))
            .unwrap_or_else(|| panic!("no line of {ip} in {out}"));
        hex_after(line, "EECN ")
    };
    let qpns = [qpn(&s, "   local"), qpn(&c, "   local")];
    let eecns = [eecn(&s, "127.0.14.1"), eecn(&s, "127.0.14.2")];
    assert_eq!(qpn(&s, "  remote"), qpns[1]);
    assert_eq!(qpn(&c, "  remote"), qpns[0]);
    for out in [&s, &c] {
        assert!(
            qpns.iter().chain(&eecns).all(|&n| is_member_number(n)),
            "{out}"
        );
        assert_eq!([eecn(out, "127.0.14.1"), eecn(out, "127.0.14.2")], eecns);
        assert!(
            out.contains(&format!("\n{} bytes in ", 2500 * 150 * 2)),
            "{out}"
        );
        assert!(out.contains("\n150 iters in "), "{out}");
    }
    let bytes = std::fs::read(&pcap).unwrap();
    let r = PcapReader::new(&bytes).unwrap();
    let (mut sends, mut acks, mut payload) = (0, 0, 0);
    for rec in r.records() {
        let rec = rec.unwrap();
        let p = RocePacket::parse(rec.data).unwrap();
        assert!(p.icrc_ok());
        let h = &p.transport.headers;
        assert_eq!(p.transport.info().unwrap().service, Service::Rd);
        let to = h.rdeth.map(|r| r.eecn.value()).unwrap();
        assert!(eecns.contains(&to), "{to:#x}");
        match h.bth.opcode.0 {
            0x40..=0x42 => {
                let deth = h.deth.unwrap();
                assert_eq!(deth.qkey, 0x1111_1111);
                assert!(qpns.contains(&deth.src_qp.value()));
                sends += 1;
                payload += p.transport.payload.len();
            }
            0x51 => {
                assert_eq!(h.aeth.unwrap().syndrome, 0);
                acks += 1;
            }
            op => panic!("unexpected opcode {op:#x}"),
        }
    }
    assert_eq!(sends, 150 * 3 * 2);
    assert_eq!(payload, 2500 * 150 * 2);
    assert!(acks >= 150, "{acks} acknowledgements");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ud_pingpong_refuses_a_size_above_the_port_mtu() {
    let out = softib()
        .args([
            "pingpong",
            "--service",
            "ud",
            "--bind",
            "127.0.13.2",
            "-s",
            "4097",
            "127.0.13.1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Requested size larger than port MTU (4096)"),
        "{err}"
    );
}
