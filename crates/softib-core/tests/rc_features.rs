//! Work-request features end to end between two HCAs: inline data, immediate data, SEND with
//! invalidate, solicited events, fences and unsignaled work requests.

mod common;

use common::{Dir, Pair};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::types::{SendFlags, WcFlags, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::opcode::Opcode;
use softib_wire::roce::RocePacket;

fn pair() -> Pair {
    Pair::new(
        10,
        20,
        ConnectOptions {
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..ConnectOptions::default()
        },
    )
}

fn recv(p: &mut Pair, id: u64, off: u64, len: u32) {
    let sge = Sge {
        addr: p.b.mr.addr + off,
        length: len,
        lkey: p.b.mr.lkey,
    };
    p.b.hca
        .post_recv(p.b.qpn, &[RecvWr::new(id, vec![sge])])
        .unwrap();
}

fn a_packets(p: &Pair) -> Vec<(u8, bool, bool)> {
    p.log
        .iter()
        .filter(|(d, _)| *d == Dir::AtoB)
        .map(|(_, f)| {
            let q = RocePacket::parse(f).unwrap();
            let b = q.transport.headers.bth;
            (b.opcode.0, b.solicited, b.ack_req)
        })
        .collect()
}

#[test]
fn inline_send_with_immediate_lands_with_its_immediate() {
    let mut p = pair();
    recv(&mut p, 7, 0, 64);
    let wr = SendWr::new(1, WrOpcode::SendWithImm(0xdead_beef))
        .with_inline(b"inline payload".to_vec())
        .signaled();
    p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
    p.run(1_000_000_000);
    assert_eq!(a_packets(&p)[0].0, Opcode::RC_SEND_ONLY_WITH_IMMEDIATE.0);
    let wc = p.b.hca.poll_cq(p.b.cq, 4).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 14)
    );
    assert_eq!(wc[0].imm_data, Some(0xdead_beef));
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    let mut got = [0u8; 14];
    p.b.hca.mr_read(p.b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(&got, b"inline payload");
}

#[test]
fn write_with_immediate_consumes_a_receive_and_reports_it() {
    let mut p = pair();
    recv(&mut p, 9, 0, 16);
    p.a.hca.mr_write(p.a.mr.handle, 0, &[5u8; 3000]).unwrap();
    let remote = RemoteAddr {
        addr: p.b.mr.addr + 8192,
        rkey: p.b.mr.rkey,
    };
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWriteWithImm {
            remote,
            imm: 0x1234,
        },
    )
    .with_sge(Sge {
        addr: p.a.mr.addr,
        length: 3000,
        lkey: p.a.mr.lkey,
    })
    .signaled();
    p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
    p.run(1_000_000_000);
    let ops: Vec<u8> = a_packets(&p).iter().map(|x| x.0).collect();
    assert_eq!(
        ops,
        vec![
            Opcode::RC_RDMA_WRITE_FIRST.0,
            Opcode::RC_RDMA_WRITE_MIDDLE.0,
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE.0
        ]
    );
    let wc = p.b.hca.poll_cq(p.b.cq, 4).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].imm_data, wc[0].byte_len),
        (9, WcOpcode::RecvRdmaWithImm, Some(0x1234), 3000)
    );
    let mut got = vec![0u8; 3000];
    p.b.hca.mr_read(p.b.mr.handle, 8192, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 5));
}

#[test]
fn send_with_invalidate_revokes_the_remote_key() {
    let mut p = pair();
    recv(&mut p, 1, 0, 64);
    let rkey = p.b.mr.rkey;
    let wr = SendWr::new(1, WrOpcode::SendWithInv(rkey))
        .with_inline(vec![1; 8])
        .signaled();
    p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
    p.run(1_000_000_000);
    assert_eq!(a_packets(&p)[0].0, Opcode::RC_SEND_ONLY_WITH_INVALIDATE.0);
    let wc = p.b.hca.poll_cq(p.b.cq, 4).unwrap();
    assert_eq!(wc[0].invalidated_rkey, Some(rkey));
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_INV));
    // The key is gone: an RDMA WRITE through it now fails with a remote access error.
    let remote = RemoteAddr {
        addr: p.b.mr.addr,
        rkey,
    };
    let wr = SendWr::new(2, WrOpcode::RdmaWrite { remote })
        .with_inline(vec![2; 8])
        .signaled();
    p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
    p.run(2_000_000_000);
    let wc = p.a.hca.poll_cq(p.a.cq, 4).unwrap();
    let st: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
}

#[test]
fn solicited_event_sets_se_and_wakes_a_solicited_only_cq() {
    let mut p = pair();
    recv(&mut p, 1, 0, 4096);
    recv(&mut p, 2, 4096, 4096);
    p.b.hca.req_notify_cq(p.b.cq, true).unwrap();
    // An unsolicited 3000-byte SEND: no event; then a solicited one: SE on its last packet only.
    let s1 = SendWr::new(1, WrOpcode::Send).with_sge(Sge {
        addr: p.a.mr.addr,
        length: 3000,
        lkey: p.a.mr.lkey,
    });
    p.a.hca.post_send(p.a.qpn, &[s1]).unwrap();
    p.run(1_000_000_000);
    assert_eq!(
        p.b.hca.poll_completion_event(),
        None,
        "no event for an unsolicited message"
    );
    let s2 = SendWr::new(2, WrOpcode::Send)
        .with_sge(Sge {
            addr: p.a.mr.addr,
            length: 3000,
            lkey: p.a.mr.lkey,
        })
        .with_flags(SendFlags::SOLICITED);
    p.a.hca.post_send(p.a.qpn, &[s2]).unwrap();
    p.run(2_000_000_000);
    let se: Vec<bool> = a_packets(&p).iter().map(|x| x.1).collect();
    assert_eq!(se, vec![false, false, false, false, false, true]);
    assert_eq!(p.b.hca.poll_completion_event(), Some(p.b.cq));
}

#[test]
fn fence_holds_a_request_until_earlier_reads_complete() {
    let mut p = pair();
    let remote = RemoteAddr {
        addr: p.b.mr.addr,
        rkey: p.b.mr.rkey,
    };
    let read = SendWr::new(1, WrOpcode::RdmaRead { remote }).with_sge(Sge {
        addr: p.a.mr.addr + 4096,
        length: 8,
        lkey: p.a.mr.lkey,
    });
    let fenced = SendWr::new(2, WrOpcode::RdmaWrite { remote })
        .with_inline(vec![9; 8])
        .with_flags(SendFlags::FENCE);
    // Hold the READ response back: the fenced WRITE must not leave before it arrives.
    let mut held = true;
    p.filter = Box::new(move |d, f| {
        let op = RocePacket::parse(f).unwrap().transport.headers.bth.opcode;
        !(held && d == Dir::BtoA && op == Opcode::RC_RDMA_READ_RESPONSE_ONLY && {
            held = false;
            true
        })
    });
    p.a.hca.post_send(p.a.qpn, &[read, fenced]).unwrap();
    p.run(u64::MAX / 4);
    let ops: Vec<u8> = a_packets(&p).iter().map(|x| x.0).collect();
    // READ, (response lost, timeout) READ again, then only now the fenced WRITE.
    assert_eq!(
        ops,
        vec![
            Opcode::RC_RDMA_READ_REQUEST.0,
            Opcode::RC_RDMA_READ_REQUEST.0,
            Opcode::RC_RDMA_WRITE_ONLY.0
        ]
    );
}

#[test]
fn unsignaled_requests_complete_silently_unless_they_fail() {
    let mut p = pair();
    let remote = RemoteAddr {
        addr: p.b.mr.addr,
        rkey: p.b.mr.rkey,
    };
    let ok = SendWr::new(1, WrOpcode::RdmaWrite { remote }).with_inline(vec![1; 8]);
    let ok_signaled = SendWr::new(2, WrOpcode::RdmaWrite { remote })
        .with_inline(vec![1; 8])
        .signaled();
    p.a.hca.post_send(p.a.qpn, &[ok, ok_signaled]).unwrap();
    p.run(1_000_000_000);
    let wc = p.a.hca.poll_cq(p.a.cq, 4).unwrap();
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
    // An unsignaled WR that fails does report its error.
    let bad = RemoteAddr {
        addr: p.b.mr.addr,
        rkey: p.b.mr.rkey ^ 0x100,
    };
    let fail = SendWr::new(3, WrOpcode::RdmaWrite { remote: bad }).with_inline(vec![1; 8]);
    p.a.hca.post_send(p.a.qpn, &[fail]).unwrap();
    p.run(2_000_000_000);
    let wc = p.a.hca.poll_cq(p.a.cq, 4).unwrap();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::RemAccessErr)]
    );
}

#[test]
fn send_packets_straddling_sges_and_within_one_sge_arrive_intact() {
    // MTU 1024 (the pair's default); SGEs of 1500, 100 and 3000 bytes: packet 0 lies in the
    // first SGE (sent straight from the region), packets 1 and 2 straddle SGEs (gathered),
    // packets 3 and 4 lie in the last SGE.
    let mut p = pair();
    let data: Vec<u8> = (0..4600u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (s1, s2, s3) = (1500usize, 100usize, 3000usize);
    let offs = [0usize, 10_000, 20_000];
    for (&off, chunk) in offs.iter().zip([
        &data[..s1],
        &data[s1..s1 + s2],
        &data[s1 + s2..s1 + s2 + s3],
    ]) {
        p.a.hca.mr_write(p.a.mr.handle, off, chunk).unwrap();
    }
    let sges = vec![
        p.sge_a(offs[0] as u64, s1 as u32),
        p.sge_a(offs[1] as u64, s2 as u32),
        p.sge_a(offs[2] as u64, s3 as u32),
    ];
    recv(&mut p, 9, 0, 8192);
    p.post_a(&[SendWr::new(1, WrOpcode::Send).with_sg_list(sges).signaled()]);
    p.run(1_000_000_000);
    assert_eq!(a_packets(&p).len(), 5);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    let wc = p.b.wcs();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (9, WcStatus::Success, 4600)
    );
    assert_eq!(p.b.mem(0, 4600), data);
}

#[test]
fn send_from_an_unregistered_lkey_completes_with_a_local_protection_error() {
    let mut p = pair();
    recv(&mut p, 9, 0, 64);
    let mut sge = p.sge_a(0, 32);
    sge.lkey ^= 0x100;
    p.post_a(&[SendWr::new(1, WrOpcode::Send)
        .with_sg_list(vec![sge])
        .signaled()]);
    p.run(1_000_000_000);
    assert!(a_packets(&p).is_empty(), "nothing reaches the wire");
    assert_eq!(p.a.done(), vec![(1, WcStatus::LocProtErr)]);
}
