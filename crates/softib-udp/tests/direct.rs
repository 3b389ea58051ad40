//! Two devices on 127.0.3.1 / 127.0.3.2 talk directly: every packet's ICRC is verified on
//! receive (no ICRC errors counted), and the capture holds valid RoCEv2 frames.

mod common;

use std::time::Duration;

use common::*;
use softib_core::verbs::types::WcStatus;
use softib_core::verbs::wr::{RemoteAddr, SendWr, Sge, WrOpcode};
use softib_udp::endpoint::Endpoint;

/// Posts `wr` (signaled) on A's QP and drives both devices until it completes successfully.
fn post_and_complete(a: &mut Endpoint, b: &mut Endpoint, wr: SendWr) {
    let qpn = a.qpn;
    a.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
    let mut ok = false;
    drive(a, b, Duration::from_secs(10), |a, _b| {
        for wc in completions(a) {
            assert_eq!(wc.status, WcStatus::Success);
            ok = true;
        }
        ok
    });
}

/// Connects A and B and has A write 5000 bytes (pattern `seed`) into B's buffer at offset
/// 100; checks the completion and the bytes.
fn write_5000_bytes(a: &mut Endpoint, b: &mut Endpoint, seed: u64) {
    connect(a, b);
    let (amr, bmr) = (a.mr, b.mr);
    let data = pattern(seed, 5000);
    a.dev.hca_mut().mr_write(amr.handle, 0, &data).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr::new(bmr.addr + 100, bmr.rkey),
        },
    )
    .with_sge(Sge::new(amr.addr, 5000, amr.lkey))
    .signaled();
    post_and_complete(a, b, wr);
    assert_eq!(
        &b.dev.hca().mr_bytes(bmr.handle).unwrap()[100..5100],
        &data[..]
    );
}

#[test]
fn direct_write_is_icrc_verified_and_captured() {
    let dir = std::env::temp_dir().join(format!("softib-udp-direct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("a.pcap");
    let mut a = endpoint(addr(3, 1), 7, 1 << 16, Some(pcap.to_str().unwrap()));
    let b_pcap = dir.join("b.pcap");
    let mut b = endpoint(addr(3, 2), 9, 1 << 16, Some(b_pcap.to_str().unwrap()));
    write_5000_bytes(&mut a, &mut b, 3);
    for e in [&a, &b] {
        let c = e.dev.hca().counters();
        assert_eq!(c.icrc_err, 0, "{c:?}");
        assert!(c.rcvd_pkts > 0, "{c:?}");
    }
    a.dev.flush_pcap().unwrap();
    let bytes = std::fs::read(&pcap).unwrap();
    let r = softib_wire::pcap::PcapReader::new(&bytes).unwrap();
    let mut frames = 0;
    for rec in r.records() {
        let rec = rec.unwrap();
        let p = softib_wire::roce::RocePacket::parse_verified(rec.data).unwrap();
        // Sent and received alike: the header an unconnected socket bound to port 4791 with
        // IP_PMTUDISC_DO makes the kernel write (Identification 0, DF, source port 4791).
        let softib_wire::roce::IpHeader::V4(ip) = p.ip else {
            panic!("IPv4 expected")
        };
        assert_eq!((ip.ident, ip.flags), (0, 0b010));
        assert_eq!(p.udp.src_port, 4791);
        frames += 1;
    }
    // 5 WRITE packets out (MTU 1024) and at least one ACK in.
    assert!(frames >= 6, "{frames}");
    // The receiver's capture: with GSO, the WRITE packets left as one run whose segment k
    // carries the ICRC of IPv4 Identification k; the receiver solved k from the ICRC and
    // wrote it into the frame it captured and handed to the HCA (which verified it).
    b.dev.flush_pcap().unwrap();
    let bytes = std::fs::read(&b_pcap).unwrap();
    let r = softib_wire::pcap::PcapReader::new(&bytes).unwrap();
    let mut idents = Vec::new();
    for rec in r.records() {
        let rec = rec.unwrap();
        let p = softib_wire::roce::RocePacket::parse_verified(rec.data).unwrap();
        if let softib_wire::roce::IpHeader::V4(ip) = p.ip {
            // RC RDMA WRITE first .. only with immediate (BTH byte 0 behind IPv4 + UDP).
            if (0x06..=0x0b).contains(&rec.data[14 + 20 + 8]) {
                idents.push(ip.ident);
            }
        }
    }
    // Every send starts at 0 and a run counts up; `a` sent only the WRITE packets, so fewer
    // send calls than datagrams means at least one run of two or more.
    let st = a.dev.stats();
    assert_eq!(idents.len(), 5, "{idents:?}");
    assert_eq!(idents[0], 0);
    for w in idents.windows(2) {
        assert!(w[1] == 0 || w[1] == w[0] + 1, "{idents:?}");
    }
    let runs = a.dev.uses_gso() && st.tx_syscalls < st.tx_datagrams;
    assert_eq!(idents.iter().any(|&i| i != 0), runs, "{idents:?} {st:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ipv6_devices_verify_every_icrc() {
    // IPv6 loopback has one address: the two devices differ by port, and each routes the
    // other's (identical) address to the other's port.
    let a_addr: std::net::SocketAddr = "[::1]:24791".parse().unwrap();
    let b_addr: std::net::SocketAddr = "[::1]:24792".parse().unwrap();
    let mut a = endpoint(a_addr, 1, 1 << 16, None);
    let mut b = endpoint(b_addr, 2, 1 << 16, None);
    a.dev.add_route(b_addr.ip(), b_addr);
    b.dev.add_route(a_addr.ip(), a_addr);
    assert!(softib_core::ipv4_of(&a.dev.gid()).is_none());
    connect(&mut a, &mut b);
    let (amr, bmr) = (a.mr, b.mr);
    let data = pattern(6, 2500);
    b.dev.hca_mut().mr_write(bmr.handle, 0, &data).unwrap();
    let wr = SendWr::new(
        5,
        WrOpcode::RdmaRead {
            remote: RemoteAddr::new(bmr.addr, bmr.rkey),
        },
    )
    .with_sge(Sge::new(amr.addr, 2500, amr.lkey))
    .signaled();
    post_and_complete(&mut a, &mut b, wr);
    assert_eq!(
        &a.dev.hca().mr_bytes(amr.handle).unwrap()[..2500],
        &data[..]
    );
    for e in [&a, &b] {
        let c = e.dev.hca().counters();
        assert_eq!(c.icrc_err, 0, "{c:?}");
        assert!(c.rcvd_pkts > 0, "{c:?}");
    }
}

/// Over shared memory: the same WRITE, every datagram through the inboxes (no send system
/// call), every captured frame a valid RoCEv2 frame with the header a single UDP datagram
/// would have had (Identification 0: nothing is cut into GSO segments).
#[test]
fn direct_write_over_shm_is_icrc_verified_and_captured() {
    let dir = std::env::temp_dir().join(format!("softib-udp-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let b_pcap = dir.join("b.pcap");
    let shm = softib_udp::Transport::Shm;
    let mut a = endpoint_on(addr(3, 5), 7, 1 << 16, None, shm);
    let mut b = endpoint_on(addr(3, 6), 9, 1 << 16, Some(b_pcap.to_str().unwrap()), shm);
    write_5000_bytes(&mut a, &mut b, 4);
    for e in [&a, &b] {
        let (c, s) = (e.dev.hca().counters(), e.dev.stats());
        assert_eq!(c.icrc_err, 0, "{c:?}");
        assert_eq!((s.tx_syscalls, s.tx_dropped), (0, 0), "{s:?}");
        assert_eq!(s.tx_shm, s.tx_datagrams, "{s:?}");
        assert!(e.dev.has_inbox());
    }
    assert!(a.dev.stats().tx_shm >= 5 && b.dev.stats().rx_shm >= 5);
    b.dev.flush_pcap().unwrap();
    let bytes = std::fs::read(&b_pcap).unwrap();
    let mut frames = 0;
    for rec in softib_wire::pcap::PcapReader::new(&bytes)
        .unwrap()
        .records()
    {
        let rec = rec.unwrap();
        let p = softib_wire::roce::RocePacket::parse_verified(rec.data).unwrap();
        let softib_wire::roce::IpHeader::V4(ip) = p.ip else {
            panic!("IPv4 expected")
        };
        assert_eq!((ip.ident, p.udp.src_port), (0, 4791));
        frames += 1;
    }
    assert!(frames >= 6, "{frames}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WRITE of 300 packets (MTU 256) leaves in GSO sends of up to the kernel's most segments
/// ([`softib_udp::gso_max_segments`]: 128 since Linux 6.9): the first send of the flush 64,
/// the next ones up to that most. Segment k of a send carries the ICRC of IPv4 Identification
/// k, up to 127, which the receiver solves: every packet verifies, the bytes land, nothing is
/// dropped, and the sends are as few as those sizes allow.
#[test]
fn long_gso_sends_carry_the_kernels_most_segments() {
    let most = softib_udp::gso_max_segments();
    assert!(most == 64 || most == 128, "{most}");
    let open = |bind| {
        let mut cfg = softib_udp::DeviceConfig::new(bind);
        cfg.active_mtu = softib_core::verbs::types::Mtu::Mtu256;
        // The whole message in flight at once.
        cfg.max_unacked_psns = 1024;
        // The kernel's UDP stack, not the same-host inboxes.
        cfg.transport = softib_udp::Transport::Udp;
        let dev = softib_udp::Device::open(&cfg).expect("bind the RoCEv2 socket");
        let ecfg = softib_udp::endpoint::EndpointConfig {
            qp_type: softib_core::verbs::types::QpType::Rc,
            buf_len: 1 << 17,
            send_depth: 16,
            recv_depth: 16,
            max_inline: 0,
        };
        Endpoint::new(dev, &ecfg, softib_wire::Psn::new(11)).unwrap()
    };
    let (mut a, mut b) = (open(addr(3, 7)), open(addr(3, 8)));
    let opts = softib_core::setup::ConnectOptions {
        path_mtu: softib_core::verbs::types::Mtu::Mtu256,
        ..options()
    };
    let (ia, ib) = (a.info(), b.info());
    a.connect(&ib, &opts).unwrap();
    b.connect(&ia, &opts).unwrap();
    const PACKETS: usize = 300;
    let len = PACKETS * 256;
    let (amr, bmr) = (a.mr, b.mr);
    let data = pattern(8, len);
    a.dev.hca_mut().mr_write(amr.handle, 0, &data).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr::new(bmr.addr, bmr.rkey),
        },
    )
    .with_sge(Sge::new(amr.addr, len as u32, amr.lkey))
    .signaled();
    post_and_complete(&mut a, &mut b, wr);
    assert_eq!(&b.dev.hca().mr_bytes(bmr.handle).unwrap()[..len], &data[..]);
    let (sa, cb) = (a.dev.stats(), b.dev.hca().counters());
    assert_eq!(cb.icrc_err, 0, "{cb:?}");
    assert_eq!(
        (sa.tx_dropped, sa.tx_datagrams),
        (0, PACKETS as u64),
        "{sa:?}"
    );
    if a.dev.uses_gso() {
        // One flush: 64, then sends of `most` (the requester may spread the message over a
        // second flush, which starts at 64 again: one send more at most).
        let fewest = 1 + (PACKETS - 64).div_ceil(most) as u64;
        assert!(
            sa.tx_syscalls <= fewest + 1,
            "{} sends for {PACKETS} datagrams ({most} segments at most): {sa:?}",
            sa.tx_syscalls
        );
    }
}
