//! The receive-side header rebuild against packets two Linux rxe peers really sent
//! (`shared/testvectors/rxe`): what a UDP socket would deliver of each packet (source
//! address and port, destination address, UDP payload) is rebuilt into a frame and its ICRC
//! checked, as the runtime does.
//!
//! - IPv6: the socket shows everything the ICRC covers, so every rebuilt rxe packet verifies.
//! - IPv4: rxe numbers its packets (IPv4 Identification), which the socket hides; the rebuilt
//!   header (Identification 0) verifies only where rxe happened to send 0, and
//!   `IcrcPolicy::Verify` solves every other packet's Identification from its ICRC
//!   (`frame::verify_ipv4_icrc_any_ident`), recovering the one rxe wrote.

use std::net::IpAddr;

use softib_udp::frame;
use softib_wire::pcap::PcapReader;
use softib_wire::roce::{IpHeader, RocePacket};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/testvectors/rxe"
);

/// (source, source port, destination, UDP payload) of every RoCEv2 packet in a capture.
fn datagrams(name: &str) -> Vec<(IpAddr, u16, IpAddr, Vec<u8>, u16)> {
    let bytes = std::fs::read(format!("{VECTORS}/{name}")).expect("test vector");
    let r = PcapReader::new(&bytes).unwrap();
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.unwrap();
        let Ok(p) = RocePacket::parse(rec.data) else {
            continue; // ARP and the like
        };
        let (src, dst, ident) = match p.ip {
            IpHeader::V4(h) => (IpAddr::from(h.src), IpAddr::from(h.dst), h.ident),
            IpHeader::V6(h) => (IpAddr::from(h.sgid), IpAddr::from(h.dgid), 0),
        };
        let (d, payload) = frame::datagram_of_frame(rec.data).unwrap();
        assert_eq!(d, dst);
        out.push((src, p.udp.src_port, dst, payload.to_vec(), ident));
    }
    assert!(!out.is_empty(), "{name} holds RoCEv2 packets");
    out
}

fn verifies(f: &[u8]) -> bool {
    RocePacket::parse_verified(f).is_ok()
}

#[test]
fn rebuilt_ipv6_rxe_packets_verify() {
    for (src, sport, dst, payload, _) in datagrams("rc_pingpong_ipv6_s64_n3.pcap") {
        let mut f = Vec::new();
        assert!(frame::frame_of_datagram(src, sport, dst, &payload, &mut f));
        assert!(verifies(&f), "IPv6 packet from {src}:{sport}");
    }
}

#[test]
fn rebuilt_ipv4_rxe_packets_verify_with_the_solved_identification() {
    let (mut zero_id, mut numbered) = (0, 0);
    for name in ["rc_pingpong_s3000_n2.pcap", "write_bw_s4096_n5.pcap"] {
        for (src, sport, dst, payload, ident) in datagrams(name) {
            let mut f = Vec::new();
            assert!(frame::frame_of_datagram(src, sport, dst, &payload, &mut f));
            // As rebuilt (Identification 0): right exactly when rxe sent 0.
            assert_eq!(verifies(&f), ident == 0, "{name}: ident {ident:#x}");
            if ident == 0 {
                zero_id += 1;
            } else {
                numbered += 1;
            }
            // Verify: the Identification rxe wrote is solved and written into the frame,
            // which then verifies as captured; transport bytes untouched.
            let mut g = f.clone();
            assert!(frame::verify_ipv4_icrc_any_ident(&mut g), "{name}");
            let p = RocePacket::parse_verified(&g).unwrap();
            let IpHeader::V4(ip) = p.ip else {
                panic!("IPv4 expected")
            };
            assert_eq!(ip.ident, ident);
            assert_eq!(frame::datagram_of_frame(&g).unwrap().1, &payload[..]);
            // AcceptIpv4Unverified (opt-out): accepted, transport bytes untouched.
            assert!(frame::reseal_ipv4_icrc(&mut f));
            let p = RocePacket::parse_verified(&f).unwrap();
            let (_, rebuilt) = frame::datagram_of_frame(&f).unwrap();
            assert_eq!(rebuilt[..rebuilt.len() - 4], payload[..payload.len() - 4]);
            assert_eq!(p.udp.src_port, sport);
        }
    }
    // rxe really numbers its IPv4 packets.
    assert!(numbered > 0, "zero {zero_id}, numbered {numbered}");
}
