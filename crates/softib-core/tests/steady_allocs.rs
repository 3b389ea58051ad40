//! Heap allocations per message on the steady path of the engine: none. Two HCAs connected by
//! RC move 64-byte SENDs, RDMA WRITEs and READs in rounds of 16 (post, frames both ways until
//! idle, poll both CQs) with the caller's WRs, frame buffer and completion array reused, as a
//! driver does; after a warm-up that lets every queue and map reach its size, a counting
//! allocator sees no allocation at all. The payload comes from one gather entry, from two, or
//! inline (whose bytes the send queue copies into buffers it keeps from WQE to WQE); a SEND
//! from two entries lands in a receive WR of two.

mod alloc_count;

use alloc_count::{thread_allocations, Counting};
use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::time::Instant;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask};
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::QpState;
use softib_core::verbs::types::{AccessFlags, GidType, QpType, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_core::verbs::{CqHandle, PdHandle};
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::{Psn, Qpn};

#[global_allocator]
static GLOBAL: Counting = Counting;

const BATCH: usize = 16;

/// Every QP's capabilities: room for two rounds, two gather / scatter entries, 64 inline
/// bytes.
const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 2,
    max_recv_sge: 2,
    max_inline_data: 64,
};

struct Side {
    hca: Hca,
    pd: PdHandle,
    cq: CqHandle,
    mr: MrInfo,
    qp: Qpn,
}

fn side(id: u32, ip: [u8; 4]) -> Side {
    let mut cfg = HcaConfig::new(id);
    cfg.ports[0].gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(256).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = hca.reg_mr(pd, vec![0u8; 1 << 16], access, None).unwrap();
    let qp = hca
        .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, CAP))
        .unwrap();
    Side {
        hca,
        pd,
        cq,
        mr,
        qp,
    }
}

fn pair() -> (Side, Side) {
    let (mut a, mut b) = (side(1, [10, 0, 0, 1]), side(2, [10, 0, 0, 2]));
    let ep = |s: &Side, ip, psn| EndpointInfo {
        qpn: s.qp,
        psn: Psn::new(psn),
        gid: gid_of_ipv4(ip),
        lid: 0,
    };
    let (ea, eb) = (ep(&a, [10, 0, 0, 1], 100), ep(&b, [10, 0, 0, 2], 900));
    // GID index 1: the address pushed above (index 0 is the port's default GID).
    let o = ConnectOptions {
        sgid_index: 1,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        ..ConnectOptions::default()
    };
    connect(&mut a.hca, a.qp, ea.psn, &eb, &o).unwrap();
    connect(&mut b.hca, b.qp, eb.psn, &ea, &o).unwrap();
    (a, b)
}

/// One round: `BATCH` messages of `wr` (and as many receives at B for SENDs), frames moved
/// until both sides are idle (timers fired as they fall due), both CQs drained.
fn round(
    a: &mut Side,
    b: &mut Side,
    wrs: &[SendWr],
    recvs: &[RecvWr],
    now: &mut Instant,
    buf: &mut Vec<u8>,
    wcs: &mut [WorkCompletion],
) -> usize {
    if !recvs.is_empty() {
        b.hca.post_recv(b.qp, recvs).unwrap();
    }
    a.hca.post_send(a.qp, wrs).unwrap();
    loop {
        let mut moved = false;
        while a.hca.poll_transmit(*now, buf) {
            moved = true;
            b.hca.handle_frame(*now, buf);
        }
        while b.hca.poll_transmit(*now, buf) {
            moved = true;
            a.hca.handle_frame(*now, buf);
        }
        if moved {
            continue;
        }
        let next = [a.hca.poll_timeout(), b.hca.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t.as_nanos() < now.as_nanos() + 1_000_000 => {
                *now = (*now).max(t);
                a.hca.handle_timeout(*now);
                b.hca.handle_timeout(*now);
            }
            _ => break,
        }
    }
    let mut done = 0;
    for s in [a, b] {
        loop {
            let n = s.hca.poll_cq_into(s.cq, wcs).unwrap();
            if n == 0 {
                break;
            }
            assert!(wcs[..n].iter().all(|w| w.status == WcStatus::Success));
            done += n;
        }
    }
    done
}

/// How a send WR names its 64 bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Payload {
    OneSge,
    TwoSges,
    Inline,
}

fn allocations_per_message(op: &str, payload: Payload) -> f64 {
    let (mut a, mut b) = pair();
    let remote = RemoteAddr::new(b.mr.addr + 0x1000, b.mr.rkey);
    let opcode = match op {
        "send" => WrOpcode::Send,
        "write" => WrOpcode::RdmaWrite { remote },
        _ => WrOpcode::RdmaRead { remote },
    };
    let wrs = batch(&a.mr, payload, |i| SendWr::new(i as u64, opcode).signaled());
    // Receive buffers as the payload is split: one entry, or two.
    let recvs = if op == "send" {
        receives(&b.mr, payload, 40, 24)
    } else {
        Vec::new()
    };
    let per_round = BATCH * if op == "send" { 2 } else { 1 };
    measure(&mut a, &mut b, &wrs, &recvs, per_round)
}

/// `BATCH` WRs made by `wr`, each given 64 bytes of `mr` (or inline bytes) as `payload` says.
fn batch(mr: &MrInfo, payload: Payload, wr: impl Fn(usize) -> SendWr) -> Vec<SendWr> {
    (0..BATCH)
        .map(|i| {
            let at = mr.addr + 64 * i as u64;
            match payload {
                Payload::OneSge => wr(i).with_sge(Sge::new(at, 64, mr.lkey)),
                Payload::TwoSges => wr(i).with_sge(Sge::new(at, 24, mr.lkey)).with_sge(Sge::new(
                    at + 24,
                    40,
                    mr.lkey,
                )),
                Payload::Inline => wr(i).with_inline(vec![i as u8; 64]),
            }
        })
        .collect()
}

/// `BATCH` receive WRs of `first + second` bytes of `mr` each: two scatter entries of those
/// sizes when `payload` is `TwoSges`, else one.
fn receives(mr: &MrInfo, payload: Payload, first: u32, second: u32) -> Vec<RecvWr> {
    (0..BATCH)
        .map(|i| {
            let at = mr.addr + 128 * i as u64;
            let sges = match payload {
                Payload::TwoSges => vec![
                    Sge::new(at, first, mr.lkey),
                    Sge::new(at + u64::from(first), second, mr.lkey),
                ],
                _ => vec![Sge::new(at, first + second, mr.lkey)],
            };
            RecvWr::new(i as u64, sges)
        })
        .collect()
}

/// Allocations per message over 500 rounds, after 200 rounds of warm-up that must each
/// complete `per_round` WRs.
fn measure(a: &mut Side, b: &mut Side, wrs: &[SendWr], recvs: &[RecvWr], per_round: usize) -> f64 {
    let mut now = Instant::ZERO;
    let mut buf = Vec::with_capacity(9000);
    let mut wcs = vec![WorkCompletion::default(); 64];
    for _ in 0..200 {
        let n = round(a, b, wrs, recvs, &mut now, &mut buf, &mut wcs);
        assert_eq!(n, per_round, "warm-up round");
    }
    let rounds = 500;
    let before = thread_allocations();
    for _ in 0..rounds {
        round(a, b, wrs, recvs, &mut now, &mut buf, &mut wcs);
    }
    let n = thread_allocations() - before;
    n as f64 / (rounds * BATCH) as f64
}

const QKEY: u32 = 0x1111_2222;

/// The sides of `pair()` with a UD QP each (in RTS) in place of the RC one, and A's address
/// handle for B.
fn ud_pair() -> (Side, Side, softib_core::verbs::AhHandle) {
    let (mut a, mut b) = pair();
    for s in [&mut a, &mut b] {
        let qp = s
            .hca
            .create_qp(s.pd, &QpInitAttr::new(QpType::Ud, s.cq, CAP))
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY;
        s.hca.modify_qp(qp, &init, m).unwrap();
        let rtr = QpAttr::to_state(QpState::Rtr);
        s.hca.modify_qp(qp, &rtr, QpAttrMask::STATE).unwrap();
        let rts = QpAttr::to_state(QpState::Rts);
        s.hca
            .modify_qp(qp, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
            .unwrap();
        s.qp = qp;
    }
    let av = AhAttr::global(1, gid_of_ipv4([10, 0, 0, 2]), 1);
    let ah = a.hca.create_ah(a.pd, &av).unwrap();
    (a, b, ah)
}

/// UD SENDs of 64 bytes, received into the 40-byte GRH area and the payload as two scatter
/// entries (the usual datagram receive) or as one.
fn ud_allocations_per_message(payload: Payload) -> f64 {
    let (mut a, mut b, ah) = ud_pair();
    let bq = b.qp;
    let wrs = batch(&a.mr, payload, |i| {
        SendWr::new(i as u64, WrOpcode::Send)
            .signaled()
            .with_ud(ah, bq, QKEY)
    });
    let recvs = receives(&b.mr, payload, 40, 64);
    measure(&mut a, &mut b, &wrs, &recvs, 2 * BATCH)
}

#[test]
fn the_steady_path_allocates_nothing() {
    let cases = [
        ("send", Payload::OneSge),
        ("write", Payload::OneSge),
        ("read", Payload::OneSge),
        ("send", Payload::TwoSges),
        ("write", Payload::TwoSges),
        ("read", Payload::TwoSges),
        ("send", Payload::Inline),
        ("write", Payload::Inline),
    ];
    for (op, payload) in cases {
        let per = allocations_per_message(op, payload);
        eprintln!("{op} ({payload:?}): {per:.3} heap allocations per 64-byte message");
        assert_eq!(
            per, 0.0,
            "{op} ({payload:?}): {per} allocations per message"
        );
    }
    // The engine runs on this thread, and only this thread's allocations count (the harness
    // allocates now and then on its own).
    for payload in [Payload::OneSge, Payload::TwoSges, Payload::Inline] {
        let per = ud_allocations_per_message(payload);
        eprintln!("UD send ({payload:?}): {per:.3} heap allocations per 64-byte message");
        assert_eq!(
            per, 0.0,
            "UD send ({payload:?}): {per} allocations per message"
        );
    }
}
