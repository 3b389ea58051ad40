//! RC end to end between two HCAs on a direct, lossless wire.

mod common;

use common::{Dir, Pair};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::types::{Mtu, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::opcode::Opcode;
use softib_wire::roce::RocePacket;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Seed 004's worked example: PSN 100 / 2000, a 5 KB SEND over a 2 KB path MTU. B posts
/// its receive in INIT, so when it reaches RTR it tells A of the credit with an unsolicited
/// ACK (PSN 99 = A's first PSN - 1, MSN 0), and the SEND goes out in one go.
#[test]
fn worked_example_seed_004_send_5k_over_2k_mtu() {
    let opts = ConnectOptions {
        path_mtu: Mtu::Mtu2048,
        ..ConnectOptions::default()
    };
    let mut p = Pair::new_with_init(100, 2000, opts, |_, b| b.post_recv(77, 0, 8192));
    p.run(0);
    let data = pattern(5120, 7);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    let sge = Sge {
        addr: p.a.mr.addr,
        length: 5120,
        lkey: p.a.mr.lkey,
    };
    p.a.hca
        .post_send(
            p.a.qpn,
            &[SendWr::new(1, WrOpcode::Send).with_sge(sge).signaled()],
        )
        .unwrap();
    p.run(1_000_000_000);

    assert_eq!(
        p.trace(),
        vec![
            (Dir::BtoA, Opcode::RC_ACKNOWLEDGE.0, 99),
            (Dir::AtoB, Opcode::RC_SEND_FIRST.0, 100),
            (Dir::AtoB, Opcode::RC_SEND_MIDDLE.0, 101),
            (Dir::AtoB, Opcode::RC_SEND_LAST.0, 102),
            (Dir::BtoA, Opcode::RC_ACKNOWLEDGE.0, 102),
        ]
    );
    // Payload sizes 2048, 2048, 1024; AckReq only on the LAST.
    let pkts: Vec<_> = p
        .log
        .iter()
        .map(|(_, f)| RocePacket::parse(f).unwrap())
        .collect();
    let sizes: Vec<_> = pkts.iter().map(|p| p.transport.payload.len()).collect();
    assert_eq!(sizes, vec![0, 2048, 2048, 1024, 0]);
    let ack_req: Vec<_> = pkts
        .iter()
        .map(|p| p.transport.headers.bth.ack_req)
        .collect();
    assert_eq!(ack_req, vec![false, false, false, true, false]);
    // The unsolicited ACK: one credit (code 1) at MSN 0; the ACK of the SEND: MSN 1, and the
    // receive is used up (code 0).
    let aeth: Vec<_> = [0, 4]
        .map(|i| pkts[i].transport.headers.aeth.unwrap())
        .iter()
        .map(|a| (a.syndrome, a.msn.value()))
        .collect();
    assert_eq!(aeth, vec![(0x01, 0), (0x00, 1)]);

    let wa = p.a.hca.poll_cq(p.a.cq, 8).unwrap();
    assert_eq!(wa.len(), 1);
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let wb = p.b.hca.poll_cq(p.b.cq, 8).unwrap();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len),
        (77, WcStatus::Success, WcOpcode::Recv, 5120)
    );
    let mut got = vec![0u8; 5120];
    p.b.hca.mr_read(p.b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
    // Next PSNs: A 103, B's expected 103.
    assert_eq!(p.a.hca.query_qp(p.a.qpn).unwrap().sq_psn.value(), 103);
    assert_eq!(p.b.hca.query_qp(p.b.qpn).unwrap().rq_psn.value(), 103);
}

#[test]
fn write_read_and_atomics() {
    let mut p = Pair::new(0xfffffe, 5, ConnectOptions::default());
    let data = pattern(3000, 1);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    let remote = RemoteAddr {
        addr: p.b.mr.addr + 4096,
        rkey: p.b.mr.rkey,
    };
    let sge = |off: u64, len: u32| Sge {
        addr: p.a.mr.addr + off,
        length: len,
        lkey: p.a.mr.lkey,
    };
    // Seed the atomic target at B+64 with 40 (little-endian u64).
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    let target = p.b.mr.addr + 64;
    let rkey = p.b.mr.rkey;
    p.a.hca
        .post_send(
            p.a.qpn,
            &[
                SendWr::new(1, WrOpcode::RdmaWrite { remote })
                    .with_sge(sge(0, 3000))
                    .signaled(),
                SendWr::new(2, WrOpcode::RdmaRead { remote })
                    .with_sge(sge(8192, 3000))
                    .signaled(),
                SendWr::new(
                    3,
                    WrOpcode::AtomicFetchAdd {
                        remote_addr: target,
                        rkey,
                        add: 2,
                    },
                )
                .with_sge(sge(16384, 8))
                .signaled(),
                SendWr::new(
                    4,
                    WrOpcode::AtomicCmpSwp {
                        remote_addr: target,
                        rkey,
                        compare: 42,
                        swap: 99,
                    },
                )
                .with_sge(sge(16392, 8))
                .signaled(),
            ],
        )
        .unwrap();
    p.run(1_000_000_000);
    let wc = p.a.hca.poll_cq(p.a.cq, 8).unwrap();
    let ids: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    let mut got = vec![0u8; 3000];
    p.b.hca.mr_read(p.b.mr.handle, 4096, &mut got).unwrap();
    assert_eq!(got, data, "WRITE placed the data");
    p.a.hca.mr_read(p.a.mr.handle, 8192, &mut got).unwrap();
    assert_eq!(got, data, "READ brought it back");
    let mut v = [0u8; 8];
    p.a.hca.mr_read(p.a.mr.handle, 16384, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 40, "FAA returns the original");
    p.a.hca.mr_read(p.a.mr.handle, 16392, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 42, "CAS returns the original");
    p.b.hca.mr_read(p.b.mr.handle, 64, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 99, "CAS swapped 42 for 99");
    // PSNs wrapped through 2^24 without trouble: WRITE 3 PSNs from 0xfffffe, READ 3, 2 atomics.
    assert_eq!(
        p.a.hca.query_qp(p.a.qpn).unwrap().sq_psn.value(),
        (0xfffffe + 8) & 0xffffff
    );
}
