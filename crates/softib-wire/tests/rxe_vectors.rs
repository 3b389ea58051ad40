//! softib-wire against real traffic recorded between two Linux rxe peers
//! (`../shared/testvectors/rxe/*.pcap`): every RoCEv2 packet parses, re-emits byte-identical and
//! has a valid ICRC; rebuilding each packet from its parsed fields with `roce::build` gives the
//! same bytes (so softib's builder writes what rxe writes); tampering is caught.

use std::path::PathBuf;

use softib_wire::opcode::Opcode;
use softib_wire::pcap::{PcapReader, LINKTYPE_ETHERNET};
use softib_wire::roce::{self, FrameClass, IpHeader, RocePacket};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testvectors/rxe")
}

/// Every pcap of the test vectors, with its bytes.
fn vectors() -> Vec<(String, Vec<u8>)> {
    let dir = vectors_dir();
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("test vectors missing at {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 12,
        "expected the 12 rxe captures, found {}",
        v.len()
    );
    v
}

/// The RoCEv2 frames of one capture.
fn roce_frames(bytes: &[u8]) -> Vec<&[u8]> {
    let r = PcapReader::new(bytes).unwrap();
    assert_eq!(r.link_type(), LINKTYPE_ETHERNET);
    r.map(|rec| rec.unwrap().data)
        .filter(|d| roce::classify(d) == FrameClass::RoceV2)
        .collect()
}

#[test]
fn every_packet_parses_reemits_and_has_valid_icrc() {
    let mut total = 0;
    for (name, bytes) in vectors() {
        let frames = roce_frames(&bytes);
        assert!(!frames.is_empty(), "{name}: no RoCEv2 frames");
        for (i, f) in frames.iter().enumerate() {
            let p = RocePacket::parse(f).unwrap_or_else(|e| panic!("{name} #{i}: {e}"));
            assert!(
                p.icrc_ok(),
                "{name} #{i}: ICRC {:#x} != {:#x}",
                p.computed_icrc(),
                p.icrc
            );
            assert!(RocePacket::parse_verified(f).is_ok());
            let mut out = vec![0u8; f.len()];
            let n = p.emit(&mut out).unwrap();
            assert_eq!(n, f.len(), "{name} #{i}");
            assert_eq!(&out[..], *f, "{name} #{i}: re-emit differs");
            total += 1;
        }
    }
    // The 12 captures hold 394 RoCEv2 packets (README of the vectors, summed).
    assert_eq!(total, 394);
}

#[test]
fn build_from_fields_reproduces_rxe_bytes() {
    for (name, bytes) in vectors() {
        for (i, f) in roce_frames(&bytes).iter().enumerate() {
            let p = RocePacket::parse(f).unwrap();
            let mut out = vec![0u8; f.len().max(60)];
            let n = roce::build(&p.eth, &p.ip, p.udp.src_port, &p.transport, &mut out).unwrap();
            assert_eq!(&out[..n], *f, "{name} #{i}: built frame differs");
        }
    }
}

#[test]
fn tampering_breaks_the_icrc_and_masked_fields_do_not() {
    let (_, bytes) = vectors()
        .into_iter()
        .find(|(n, _)| n == "write_bw_s4096_n5.pcap")
        .unwrap();
    let frames = roce_frames(&bytes);
    let f = frames
        .iter()
        .find(|f| {
            RocePacket::parse(f).unwrap().transport.headers.bth.opcode
                == Opcode::RC_RDMA_WRITE_FIRST
        })
        .unwrap();
    // Ethernet 14, IPv4 20 (TOS @1, TTL @8, checksum @10, addresses @12..20), UDP 8 (ports @0..4,
    // checksum @6), BTH (byte 4 = FECN/BECN, PSN @9..12), RETH, payload.
    let ip = 14;
    let udp = ip + 20;
    let bth = udp + 8;
    let covered = [
        ("IPv4 source address", ip + 12),
        ("IPv4 destination address", ip + 19),
        ("UDP source port", udp),
        ("UDP destination port low byte", udp + 3),
        ("BTH P_Key", bth + 2),
        ("BTH PSN", bth + 11),
        ("RETH R_Key", bth + 12 + 8),
        ("payload", bth + 28 + 100),
        ("last payload byte", f.len() - 5),
    ];
    for (what, at) in covered {
        let mut g = f.to_vec();
        g[at] ^= 0x01;
        let ok = match RocePacket::parse(&g) {
            Ok(p) => p.icrc_ok(),
            Err(_) => false, // a flipped port may make it non-RoCE: also a rejection
        };
        assert!(!ok, "flipping {what} was not caught");
    }
    let masked = [
        ("IPv4 TOS/ECN", ip + 1, 0x03u8),
        ("IPv4 TTL", ip + 8, 0xff),
        ("IPv4 header checksum", ip + 10, 0x55),
        ("UDP checksum", udp + 6, 0xff),
        ("BTH FECN", bth + 4, 0x80),
        ("BTH BECN", bth + 4, 0x40),
    ];
    for (what, at, mask) in masked {
        let mut g = f.to_vec();
        g[at] ^= mask;
        let p = RocePacket::parse(&g).unwrap();
        assert!(p.icrc_ok(), "flipping masked field {what} broke the ICRC");
    }
}

#[test]
fn ipv6_capture_parses_with_grh_layout() {
    let (_, bytes) = vectors()
        .into_iter()
        .find(|(n, _)| n == "rc_pingpong_ipv6_s64_n3.pcap")
        .unwrap();
    let frames = roce_frames(&bytes);
    assert_eq!(frames.len(), 12);
    for f in frames {
        let p = RocePacket::parse(f).unwrap();
        let IpHeader::V6(g) = p.ip else {
            panic!("expected IPv6")
        };
        assert_eq!(g.sgid[..2], [0xfe, 0x80]);
        assert!(p.icrc_ok());
        // Flow label and hop limit are masked; the addresses are not.
        let mut h = f.to_vec();
        h[14 + 3] ^= 0x0f;
        h[14 + 7] ^= 0x01;
        assert!(RocePacket::parse(&h).unwrap().icrc_ok());
        h[14 + 8 + 15] ^= 0x01;
        assert!(!RocePacket::parse(&h).unwrap().icrc_ok());
    }
}

#[test]
fn known_fields_of_real_packets() {
    // From the capture README: rc_pingpong_s64_n5, client QPN 0x13, client PSN 0x922dee,
    // server PSN 0xa32549; 64-byte SEND_ONLY packets and 0x1f ACKs.
    let (_, bytes) = vectors()
        .into_iter()
        .find(|(n, _)| n == "rc_pingpong_s64_n5.pcap")
        .unwrap();
    let pkts: Vec<_> = roce_frames(&bytes)
        .into_iter()
        .map(|f| RocePacket::parse(f).unwrap())
        .collect();
    let sends: Vec<_> = pkts
        .iter()
        .filter(|p| p.transport.headers.bth.opcode == Opcode::RC_SEND_ONLY)
        .collect();
    assert_eq!(sends.len(), 10);
    assert!(sends
        .iter()
        .all(|p| p.transport.payload.len() == 64 && p.transport.headers.bth.ack_req));
    let psns: Vec<u32> = sends
        .iter()
        .map(|p| p.transport.headers.bth.psn.value())
        .collect();
    assert!(
        psns.contains(&0x922dee) && psns.contains(&0xa32549),
        "{psns:x?}"
    );
    let acks: Vec<_> = pkts
        .iter()
        .filter(|p| p.transport.headers.bth.opcode == Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert_eq!(acks.len(), 10);
    assert!(acks
        .iter()
        .all(|p| p.transport.headers.aeth.unwrap().syndrome == 0x1f));
    assert!(pkts
        .iter()
        .all(|p| p.transport.headers.bth.dest_qp.value() == 0x13));
}
