//! UD against Linux rxe: the frames of `ibv_ud_pingpong -g 1 -s 64 -n 5` between two rxe
//! peers (`shared/testvectors/rxe/ud_pingpong_s64_n5.pcap`) are delivered by softib with the
//! layout rxe gives them (GRH area, byte_len, src_qp), and the frames softib builds for the
//! same sends are byte-identical to rxe's except for the MAC addresses, the IPv4
//! Identification (per packet in both) and the fields that cover it (IP checksum, ICRC).

mod ud_common;

use softib_core::verbs::device::GidEntry;
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, GidType, Mtu, QpType, WcFlags, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::pcap::PcapReader;
use softib_wire::roce::RocePacket;
use softib_wire::Qpn;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/testvectors/rxe/ud_pingpong_s64_n5.pcap"
);
const CLIENT: [u8; 4] = [10, 99, 0, 2];
const SERVER: [u8; 4] = [10, 99, 0, 3];
/// Both peers' QPN, from the tools' logs.
const QPN: u32 = 0x17;
/// `ibv_ud_pingpong`'s fixed Q_Key.
const QKEY: u32 = 0x1111_1111;

/// The RoCEv2 frames of the capture sent by `from`.
fn frames_from(from: [u8; 4]) -> Vec<Vec<u8>> {
    let data = std::fs::read(CAPTURE).expect("the rxe test vectors");
    PcapReader::new(&data)
        .unwrap()
        .records()
        .map(|r| r.unwrap().data.to_vec())
        .filter(|f| {
            RocePacket::parse(f).is_ok_and(
                |p| matches!(p.ip, softib_wire::roce::IpHeader::V4(v4) if v4.src == from),
            )
        })
        .collect()
}

/// An HCA at `ip` whose UD QP has number 0x17 (rxe numbers QPs from 0x11 too).
fn host(
    ip: [u8; 4],
    sq_psn: u32,
) -> (
    Hca,
    Qpn,
    softib_core::verbs::mr::MrInfo,
    softib_core::verbs::CqHandle,
    softib_core::verbs::PdHandle,
) {
    let mut cfg = HcaConfig::new(u32::from(ip[3]));
    cfg.ports[0].gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    cfg.ports[0].active_mtu = Mtu::Mtu1024;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qpn = Qpn::new(0);
    while qpn.value() < QPN {
        qpn = hca
            .create_qp(pd, &QpInitAttr::new(QpType::Ud, cq, cap))
            .unwrap();
    }
    assert_eq!(qpn.value(), QPN);
    ud_common::bring_up(&mut hca, qpn, QKEY, sq_psn);
    let mr = hca
        .reg_mr(pd, vec![0u8; 1 << 16], AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    (hca, qpn, mr, cq, pd)
}

#[test]
fn ud_rxe_frames_delivered_with_rxe_layout() {
    for (me, peer) in [(SERVER, CLIENT), (CLIENT, SERVER)] {
        let frames = frames_from(peer);
        assert_eq!(frames.len(), 5);
        let (mut hca, qpn, mr, cq, _) = host(me, 0);
        for i in 0..5u64 {
            let sge = Sge::new(mr.addr + 256 * i, 64 + 40, mr.lkey);
            hca.post_recv(qpn, &[RecvWr::new(i, vec![sge])]).unwrap();
        }
        for f in &frames {
            hca.handle_frame(softib_core::time::Instant::ZERO, f);
        }
        let wcs = hca.poll_cq(cq, 16).unwrap();
        assert_eq!(wcs.len(), 5, "every rxe datagram delivered");
        for (i, (wc, f)) in wcs.iter().zip(&frames).enumerate() {
            assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
            assert_eq!(
                wc.byte_len, 104,
                "40-byte GRH area + 64-byte payload, as rxe"
            );
            assert_eq!(wc.src_qp.value(), QPN);
            assert!(wc.wc_flags.contains(WcFlags::GRH));
            let mut buf = vec![0u8; 104];
            hca.mr_read(mr.handle, 256 * i, &mut buf).unwrap();
            assert_eq!(&buf[..20], &[0u8; 20]);
            assert_eq!(&buf[20..40], &f[14..34], "the sender's IPv4 header");
            assert_eq!(&buf[40..], &f[62..126], "the payload");
        }
        assert_eq!(hca.counters().rcvd_pkts, 5);
    }
}

#[test]
fn ud_softib_frames_match_rxe() {
    let rxe = frames_from(CLIENT);
    let first_psn = RocePacket::parse(&rxe[0])
        .unwrap()
        .transport
        .headers
        .bth
        .psn
        .value();
    let (mut hca, qpn, mr, cq, pd) = host(CLIENT, first_psn);
    let ah = hca
        .create_ah(
            pd,
            &softib_core::verbs::ah::AhAttr::global(1, gid_of_ipv4(SERVER), 1),
        )
        .unwrap();
    let mut out = Vec::new();
    for (i, theirs) in rxe.iter().enumerate() {
        hca.mr_write(mr.handle, 0, &theirs[62..126]).unwrap();
        let wr = SendWr::new(i as u64, WrOpcode::Send)
            .with_sge(Sge::new(mr.addr, 64, mr.lkey))
            .signaled()
            .with_ud(ah, Qpn::new(QPN), QKEY);
        hca.post_send(qpn, &[wr]).unwrap();
        assert!(hca.poll_transmit(softib_core::time::Instant::ZERO, &mut out));
        let ours = &out;
        assert_eq!(ours.len(), theirs.len());
        // Ethernet type through IPv4 total length / flags / TTL / protocol / addresses; UDP
        // header; BTH, DETH and payload.
        let same =
            |r: std::ops::Range<usize>| assert_eq!(&ours[r.clone()], &theirs[r], "frame {i}");
        same(12..18);
        same(20..24);
        same(26..ours.len() - 4);
        let p = RocePacket::parse(ours).unwrap();
        assert!(p.icrc_ok());
    }
    assert_eq!(hca.poll_cq(cq, 16).unwrap().len(), 5);
}
