//! Memory per idle RC QP, measured with a counting allocator over 100 000 QPs brought to RTS:
//! at most 1 KiB each (queues are empty and allocate nothing); then what a 1024-entry send
//! queue posted full of 64-byte SENDs adds.

mod alloc_count;

use alloc_count::{retained_by, Counting};

use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, QpType};
use softib_core::verbs::wr::{SendWr, Sge, WrOpcode};
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::{Psn, Qpn};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn idle_rc_qp_costs_at_most_1_kib() {
    const N: usize = 100_000;
    let mut hca = Hca::new(HcaConfig::new(1));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let remote = EndpointInfo {
        qpn: Qpn::new(0x11),
        psn: Psn::new(0),
        gid: gid_of_ipv4([10, 0, 0, 2]),
        lid: 0,
    };
    let ((), bytes) = retained_by(|| {
        for i in 0..N {
            let qpn = hca
                .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
                .unwrap();
            connect(
                &mut hca,
                qpn,
                Psn::new(i as u32),
                &remote,
                &ConnectOptions::default(),
            )
            .unwrap();
        }
    });
    let per_qp = bytes as f64 / N as f64;
    eprintln!("bytes per idle RC QP (in RTS, empty queues): {per_qp:.0}");
    assert!(per_qp <= 1024.0, "{per_qp} bytes per QP");
    assert_eq!(
        hca.query_qp(Qpn::new(0x11 + N as u32 - 1))
            .unwrap()
            .qp_state,
        softib_core::verbs::types::QpState::Rts
    );

    // A QP with a 1024-entry send queue posted full of 64-byte SENDs (one gather entry
    // each, nothing sent yet): the queued WQEs are what it adds.
    let cap = QpCap {
        max_send_wr: 1024,
        ..cap
    };
    let qpn = hca
        .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
        .unwrap();
    connect(
        &mut hca,
        qpn,
        Psn::new(0),
        &remote,
        &ConnectOptions::default(),
    )
    .unwrap();
    let mr = hca
        .reg_mr(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    let wrs: Vec<SendWr> = (0..1024u64)
        .map(|i| {
            SendWr::new(i, WrOpcode::Send)
                .signaled()
                .with_sge(Sge::new(mr.addr, 64, mr.lkey))
        })
        .collect();
    let ((), bytes) = retained_by(|| hca.post_send(qpn, &wrs).unwrap());
    let per_wqe = bytes as f64 / 1024.0;
    eprintln!(
        "a 1024-entry send queue posted full: {bytes} bytes ({per_wqe:.0} per WQE) on top of the idle QP"
    );
    assert!(per_wqe <= 256.0, "{per_wqe} bytes per queued send WQE");
}
