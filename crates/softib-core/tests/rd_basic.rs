//! RD end to end between two HCAs: RD QPs of one reliable datagram domain on each side send
//! through one pair of EE contexts; every message lands in the QP its BTH names, one message
//! at a time per EE context, and a message one QP gets wrong does not stop the others.

#[path = "shuttle/mod.rs"]
mod shuttle;

use shuttle::{Dir, Filter};
use softib_core::time::Instant;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, GidType, Mtu, QpState, QpType, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_core::verbs::CqHandle;
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::opcode::Opcode;
use softib_wire::roce::RocePacket;
use softib_wire::{Eecn, Psn, Qpn};

const QKEY: u32 = 0x0011_2233;

struct Node {
    hca: Hca,
    cq: CqHandle,
    mr: MrInfo,
    qps: Vec<Qpn>,
    eec: Eecn,
}

fn node(id: u32, ip: [u8; 4], peer: [u8; 4], peer_eecn: u32, psns: (u32, u32)) -> Node {
    let mut cfg = HcaConfig::new(id);
    cfg.ports[0].gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    cfg.ports[0].active_mtu = Mtu::Mtu1024;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(256).unwrap();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = hca.reg_mr(pd, vec![0u8; 1 << 20], access, None).unwrap();
    let rdd = hca.alloc_rdd().unwrap();
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qps = Vec::new();
    for _ in 0..2 {
        let qpn = hca
            .create_rd_qp(pd, rdd, &QpInitAttr::new(QpType::Rd, cq, cap))
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            qp_access_flags: access,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE;
        hca.modify_qp(
            qpn,
            &init,
            m | QpAttrMask::PORT | QpAttrMask::QKEY | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
        hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), m)
            .unwrap();
        hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rts), m)
            .unwrap();
        qps.push(qpn);
    }
    let eec = hca.create_eec(rdd).unwrap();
    let m = QpAttrMask::STATE;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    hca.modify_eec(eec, &init, m | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX)
        .unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::global(1, gid_of_ipv4(peer), 1),
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: peer_eecn,
        rq_psn: Psn::new(psns.1),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    hca.modify_eec(
        eec,
        &rtr,
        m | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(psns.0),
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    hca.modify_eec(
        eec,
        &rts,
        m | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
    Node {
        hca,
        cq,
        mr,
        qps,
        eec,
    }
}

struct Pair {
    a: Node,
    b: Node,
    now: Instant,
    filter: Filter,
    log: Vec<(Dir, Vec<u8>)>,
}

fn pair() -> Pair {
    // Each side's EEC is number 1; A sends from PSN 0x100, B from 0x900.
    Pair {
        a: node(1, [10, 0, 0, 1], [10, 0, 0, 2], 1, (0x100, 0x900)),
        b: node(2, [10, 0, 0, 2], [10, 0, 0, 1], 1, (0x900, 0x100)),
        now: Instant::ZERO,
        filter: Box::new(|_, _| true),
        log: Vec::new(),
    }
}

impl Pair {
    fn run(&mut self) {
        shuttle::run(
            &mut self.a.hca,
            &mut self.b.hca,
            &mut self.now,
            &mut self.filter,
            &mut self.log,
            10_000_000_000,
        );
    }

    fn sge_a(&self, off: u64, len: u32) -> Sge {
        Sge::new(self.a.mr.addr + off, len, self.a.mr.lkey)
    }

    fn recv_b(&mut self, qp: usize, wr_id: u64, off: u64, len: u32) {
        let sge = Sge::new(self.b.mr.addr + off, len, self.b.mr.lkey);
        self.b
            .hca
            .post_recv(self.b.qps[qp], &[RecvWr::new(wr_id, vec![sge])])
            .unwrap();
    }

    /// A send WR of A's QP to B's QP `to`, through A's EEC.
    fn wr(&self, wr_id: u64, op: WrOpcode, to: usize) -> SendWr {
        SendWr::new(wr_id, op)
            .signaled()
            .with_rd(self.a.eec, self.b.qps[to], QKEY)
    }

    fn done(hca: &mut Hca, cq: CqHandle) -> Vec<(u64, WcStatus, Qpn)> {
        hca.poll_cq(cq, 256)
            .unwrap()
            .iter()
            .map(|w| (w.wr_id, w.status, w.qp_num))
            .collect()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn sends_of_two_qps_share_one_ee_context() {
    let mut p = pair();
    let (a0, a1) = (p.a.qps[0], p.a.qps[1]);
    let (b0, b1) = (p.b.qps[0], p.b.qps[1]);
    p.recv_b(0, 10, 0, 4096);
    p.recv_b(1, 11, 0x2000, 4096);
    let d0 = pattern(2500, 1);
    let d1 = pattern(700, 2);
    p.a.hca.mr_write(p.a.mr.handle, 0, &d0).unwrap();
    p.a.hca.mr_write(p.a.mr.handle, 0x4000, &d1).unwrap();
    let w0 = p
        .wr(1, WrOpcode::SendWithImm(0xabcd), 0)
        .with_sge(p.sge_a(0, 2500));
    let w1 = p.wr(2, WrOpcode::Send, 1).with_sge(p.sge_a(0x4000, 700));
    p.a.hca.post_send(a0, &[w0]).unwrap();
    p.a.hca.post_send(a1, &[w1]).unwrap();
    p.run();

    let mut got = Pair::done(&mut p.a.hca, p.a.cq);
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![(1, WcStatus::Success, a0), (2, WcStatus::Success, a1)]
    );
    let wb = p.b.hca.poll_cq(p.b.cq, 16).unwrap();
    let mut seen: Vec<_> = wb
        .iter()
        .map(|w| {
            (
                w.wr_id, w.status, w.qp_num, w.src_qp, w.byte_len, w.imm_data,
            )
        })
        .collect();
    seen.sort_by_key(|g| g.0);
    assert_eq!(
        seen,
        vec![
            (10, WcStatus::Success, b0, a0, 2500, Some(0xabcd)),
            (11, WcStatus::Success, b1, a1, 700, None),
        ]
    );
    assert_eq!(p.b.hca.mr_bytes(p.b.mr.handle).unwrap()[..2500], d0[..]);
    assert_eq!(
        p.b.hca.mr_bytes(p.b.mr.handle).unwrap()[0x2000..0x2000 + 700],
        d1[..]
    );

    // On the wire: RD opcodes, every request with RDETH (B's EECN) and DETH (Q_Key, source
    // QP), every response with an RDETH (A's EECN) and credit bits zero (o9-72); one message
    // at a time: the second message's FIRST PSN follows the first message's ACK.
    let mut last_ack = None;
    for (d, f) in &p.log {
        let h = RocePacket::parse(f).unwrap().transport.headers;
        assert_eq!(h.bth.opcode.0 & 0xe0, 0x40, "{:?}", h.bth.opcode);
        assert_eq!(h.rdeth.map(|r| r.eecn.value()), Some(1));
        match d {
            Dir::AtoB => {
                let deth = h.deth.unwrap();
                assert_eq!(deth.qkey, QKEY);
                assert!([a0, a1].contains(&deth.src_qp));
            }
            Dir::BtoA => {
                assert!(h.deth.is_none());
                assert_eq!(h.aeth.unwrap().syndrome, 0);
                last_ack = Some(h.bth.psn.value());
            }
        }
    }
    assert!(last_ack.is_some());
}

#[test]
fn write_read_and_atomics_through_the_ee_context() {
    let mut p = pair();
    let a0 = p.a.qps[0];
    let data = pattern(3000, 5);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    p.b.hca
        .mr_write(p.b.mr.handle, 0x8000, &40u64.to_le_bytes())
        .unwrap();
    let (addr, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let wrs = [
        p.wr(
            1,
            WrOpcode::RdmaWrite {
                remote: RemoteAddr::new(addr + 0x100, rkey),
            },
            0,
        )
        .with_sge(p.sge_a(0, 3000)),
        p.wr(
            2,
            WrOpcode::RdmaRead {
                remote: RemoteAddr::new(addr + 0x100, rkey),
            },
            0,
        )
        .with_sge(p.sge_a(0x10000, 3000)),
        p.wr(
            3,
            WrOpcode::AtomicFetchAdd {
                remote_addr: addr + 0x8000,
                rkey,
                add: 2,
            },
            1,
        )
        .with_sge(p.sge_a(0x20000, 8)),
    ];
    p.a.hca.post_send(a0, &wrs).unwrap();
    p.run();
    assert_eq!(
        Pair::done(&mut p.a.hca, p.a.cq),
        vec![
            (1, WcStatus::Success, a0),
            (2, WcStatus::Success, a0),
            (3, WcStatus::Success, a0)
        ]
    );
    let mut v = vec![0u8; 3000];
    p.a.hca.mr_read(p.a.mr.handle, 0x10000, &mut v).unwrap();
    assert_eq!(v, data);
    let mut c = [0u8; 8];
    p.a.hca.mr_read(p.a.mr.handle, 0x20000, &mut c).unwrap();
    assert_eq!(u64::from_le_bytes(c), 40);
    p.b.hca.mr_read(p.b.mr.handle, 0x8000, &mut c).unwrap();
    assert_eq!(u64::from_le_bytes(c), 42);
}

/// C9-127 / o9-38.a2: a message for a QP with another Q_Key draws NAK-Invalid RD Request; the
/// sending QP's WR fails and that QP enters SQE, the EE context resynchronises (RESYNC at the
/// PSN after the message) and carries the other QP's message as if nothing happened.
#[test]
fn a_wrong_q_key_fails_one_qp_and_the_ee_context_goes_on() {
    let mut p = pair();
    let (a0, a1) = (p.a.qps[0], p.a.qps[1]);
    p.recv_b(0, 10, 0, 64);
    p.recv_b(1, 11, 0x1000, 64);
    let bad = SendWr::new(1, WrOpcode::Send)
        .signaled()
        .with_rd(p.a.eec, p.b.qps[0], 0x0bad)
        .with_sge(p.sge_a(0, 16));
    let good = p.wr(2, WrOpcode::Send, 1).with_sge(p.sge_a(0, 32));
    p.a.hca.post_send(a0, &[bad]).unwrap();
    p.a.hca.post_send(a1, &[good]).unwrap();
    p.run();
    let mut got = Pair::done(&mut p.a.hca, p.a.cq);
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![
            (1, WcStatus::RemInvRdReqErr, a0),
            (2, WcStatus::Success, a1)
        ]
    );
    assert_eq!(p.a.hca.query_qp(a0).unwrap().qp_state, QpState::Sqe);
    assert_eq!(p.a.hca.query_eec(p.a.eec).unwrap().qp_state, QpState::Rts);
    assert_eq!(p.b.hca.counters().rd_bad_dest, 1);
    // B's QP 0 kept its receive; QP 1 got its message.
    let wb = Pair::done(&mut p.b.hca, p.b.cq);
    assert_eq!(wb, vec![(11, WcStatus::Success, p.b.qps[1])]);
    // The RESYNC went out between the two messages, at the PSN after the failed one.
    let resync: Vec<u32> = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::AtoB)
        .map(|(_, f)| RocePacket::parse(f).unwrap().transport.headers.bth)
        .filter(|b| b.opcode == Opcode::RD_RESYNC)
        .map(|b| b.psn.value())
        .collect();
    assert_eq!(resync, vec![0x101]);
}

/// Under loss (every 7th frame dropped, both ways) every message of both QPs arrives exactly
/// once and in order, and completes once at the sender: the EE context retries as an RC QP
/// does.
#[test]
fn lossy_path_delivers_every_message_once_in_order() {
    let mut p = pair();
    let mut n = 0u32;
    p.filter = Box::new(move |_, _| {
        n += 1;
        n % 7 != 0
    });
    let per_qp = 12u64;
    for q in 0..2 {
        for k in 0..per_qp {
            p.recv_b(q, 100 * q as u64 + k, (q as u64 * per_qp + k) * 4096, 4096);
        }
    }
    for k in 0..per_qp {
        for q in 0..2usize {
            let off = (q as u64 * per_qp + k) * 4096;
            let data = pattern(1500 + k as usize * 37, (q * 50 + k as usize) as u8);
            p.a.hca
                .mr_write(p.a.mr.handle, off as usize, &data)
                .unwrap();
            let wr = p
                .wr(100 * q as u64 + k, WrOpcode::Send, q)
                .with_sge(p.sge_a(off, data.len() as u32));
            p.a.hca.post_send(p.a.qps[q], &[wr]).unwrap();
        }
    }
    p.run();
    let a = Pair::done(&mut p.a.hca, p.a.cq);
    assert_eq!(a.len(), 2 * per_qp as usize, "{a:?}");
    assert!(a.iter().all(|w| w.1 == WcStatus::Success), "{a:?}");
    let b = Pair::done(&mut p.b.hca, p.b.cq);
    assert_eq!(b.len(), 2 * per_qp as usize, "{b:?}");
    for q in 0..2usize {
        // Each QP's receives complete in posting order, each with its message's bytes.
        let ids: Vec<u64> = b
            .iter()
            .filter(|w| w.2 == p.b.qps[q])
            .map(|w| w.0)
            .collect();
        let want: Vec<u64> = (0..per_qp).map(|k| 100 * q as u64 + k).collect();
        assert_eq!(ids, want);
        for k in 0..per_qp {
            let off = ((q as u64 * per_qp + k) * 4096) as usize;
            let data = pattern(1500 + k as usize * 37, (q * 50 + k as usize) as u8);
            let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
            assert_eq!(&mem[off..off + data.len()], &data[..], "QP {q} message {k}");
        }
    }
    assert!(p.a.hca.counters().retransmitted_pkts > 0);
}

/// RD has no SEND with invalidate: posting one on an RD QP is refused, nothing is queued.
#[test]
fn send_with_invalidate_is_not_an_rd_operation() {
    let mut p = pair();
    let wr = p
        .wr(1, WrOpcode::SendWithInv(0x1234), 0)
        .with_sge(p.sge_a(0, 8));
    let e = p.a.hca.post_send(p.a.qps[0], &[wr]);
    assert!(
        matches!(
            e,
            Err(softib_core::error::PostSendError::OpcodeNotSupported { .. })
        ),
        "{e:?}"
    );
    p.run();
    assert_eq!(p.a.hca.counters().sent_pkts, 0);
    assert_eq!(p.a.hca.query_eec(p.a.eec).unwrap().qp_state, QpState::Rts);
}

/// A's QP 0 sends a 5-packet SEND to B's QP 0 and A's QP 1 a short one to B's QP 1, through
/// the one EE context; after the first two packets of QP 0's message, `stop` ends QP 0 (destroys
/// it, or moves it to ERR). The EE context aborts the message with a RESYNC and carries QP 1's
/// message; B's QP 0 sees its partly filled receive complete in error, B's QP 1 its message.
/// Returns A's completions.
fn qp_ends_mid_message(stop: impl FnOnce(&mut Hca, Qpn)) -> Vec<(u64, WcStatus, Qpn)> {
    let mut p = pair();
    let (a0, a1) = (p.a.qps[0], p.a.qps[1]);
    p.recv_b(0, 10, 0, 8192);
    p.recv_b(1, 11, 0x4000, 4096);
    let d1 = pattern(700, 9);
    p.a.hca.mr_write(p.a.mr.handle, 0x4000, &d1).unwrap();
    let w0 = p.wr(1, WrOpcode::Send, 0).with_sge(p.sge_a(0, 5000));
    let w1 = p.wr(2, WrOpcode::Send, 1).with_sge(p.sge_a(0x4000, 700));
    p.a.hca.post_send(a0, &[w0]).unwrap();
    p.a.hca.post_send(a1, &[w1]).unwrap();
    let mut buf = Vec::new();
    for _ in 0..2 {
        assert!(p.a.hca.poll_transmit(p.now, &mut buf));
        p.b.hca.handle_frame(p.now, &buf);
    }
    stop(&mut p.a.hca, a0);
    p.run();
    let a = Pair::done(&mut p.a.hca, p.a.cq);
    assert!(a.contains(&(2, WcStatus::Success, a1)), "{a:?}");
    assert_eq!(p.a.hca.query_eec(p.a.eec).unwrap().qp_state, QpState::Rts);
    let b = Pair::done(&mut p.b.hca, p.b.cq);
    assert_eq!(b.len(), 2, "{b:?}");
    assert!(b.contains(&(11, WcStatus::Success, p.b.qps[1])), "{b:?}");
    let partial = b.iter().find(|w| w.0 == 10).expect("B's QP 0 receive");
    assert_ne!(partial.1, WcStatus::Success, "{b:?}");
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    assert_eq!(&mem[0x4000..0x4000 + 700], &d1[..]);
    let resyncs = p
        .log
        .iter()
        .filter(|(d, f)| {
            *d == Dir::AtoB
                && RocePacket::parse(f).unwrap().transport.headers.bth.opcode == Opcode::RD_RESYNC
        })
        .count();
    assert_eq!(resyncs, 1);
    a
}

/// A QP destroyed while an EE context carries its message: the message is flushed with the
/// rest of its send queue (as `destroy_qp` flushes every QP's queues).
#[test]
fn destroying_a_qp_mid_message_aborts_it_and_the_ee_context_goes_on() {
    let mut a0 = None;
    let a = qp_ends_mid_message(|h, q| {
        a0 = Some(q);
        h.destroy_qp(q).unwrap();
    });
    assert!(a.contains(&(1, WcStatus::WrFlushErr, a0.unwrap())), "{a:?}");
    assert_eq!(a.len(), 2, "{a:?}");
}

/// A QP moved to ERR while an EE context carries its message: the message completes with
/// flush error on that QP.
#[test]
fn a_qp_moved_to_err_mid_message_flushes_it_and_the_ee_context_goes_on() {
    let mut a0 = None;
    let a = qp_ends_mid_message(|h, q| {
        a0 = Some(q);
        h.modify_qp(q, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
            .unwrap();
    });
    assert!(a.contains(&(1, WcStatus::WrFlushErr, a0.unwrap())), "{a:?}");
    assert_eq!(a.len(), 2, "{a:?}");
}
