//! Property tests of the UD data path: arbitrary packets into a UD QP never panic and never
//! write outside the posted receive buffers; under random loss, duplication and reordering
//! every delivered message is intact (a duplicated packet is delivered twice: UD has no
//! duplicate detection).

mod ud_common;

use proptest::prelude::*;
use softib_core::verbs::types::{WcOpcode, WcStatus};
use softib_core::MCAST_QPN;
use softib_wire::Qpn;
use ud_common::*;

/// Receive buffers posted on node 1: (offset, length) in its region.
const BUFFERS: [(u64, u32); 4] = [(4096, 40), (8192, 100), (16384, 1064), (32768, 300)];
/// The region bytes outside the buffers start as this and must stay so.
const CANARY: u8 = 0xEE;
/// Bytes of node 1's region the test watches.
const WATCHED: usize = 40 * 1024;

#[derive(Debug, Clone)]
struct Hostile {
    opcode: u8,
    dest: u8,
    qkey: Option<u32>,
    pkey: u16,
    psn: u32,
    payload: Vec<u8>,
    /// (position in the transport bytes, XOR mask) applied before the ICRC is recomputed.
    flips: Vec<(usize, u8)>,
    /// Bytes cut off the end of the frame (0: none).
    truncate: usize,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        prop_oneof![Just(0x64u8), Just(0x65), any::<u8>()],
        0u8..4,
        prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        prop_oneof![Just(0xffffu16), any::<u16>()],
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..1200),
        prop::collection::vec((0usize..64, 1u8..=255), 0..3),
        prop_oneof![4 => Just(0usize), 1 => 1usize..80],
    )
        .prop_map(
            |(opcode, dest, qkey, pkey, psn, payload, flips, truncate)| Hostile {
                opcode,
                dest,
                qkey,
                pkey,
                psn,
                payload,
                flips,
                truncate,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ud_hostile_packets_stay_inside_posted_buffers(packets in prop::collection::vec(hostile(), 1..24)) {
        let mut net = Net::new(2);
        let a = net.ud_qp(0, QKEY);
        let b = net.ud_qp(1, QKEY);
        let mr = net.nodes[1].mr.handle;
        net.nodes[1].hca.mr_write(mr, 0, &[CANARY; WATCHED]).unwrap();
        let group = softib_core::gid_of_ipv4([239, 0, 0, 1]);
        net.nodes[1].hca.attach_mcast(b, group, 0).unwrap();
        let mut posted: Vec<(u64, (u64, u32))> = Vec::new();
        let mut next_wr = 0u64;
        let mut delivered = Vec::new();
        for p in &packets {
            // Keep the receive queue stocked with the four buffers, in turn.
            if net.nodes[1].hca.qp(b).unwrap().recv_queue().len() < 2 {
                let (off, len) = BUFFERS[(next_wr % 4) as usize];
                net.post_recv(1, b, next_wr, off, len);
                posted.push((next_wr, (off, len)));
                next_wr += 1;
            }
            let (dest, to) = match p.dest {
                0 | 1 => (b, net.nodes[1].gid),
                2 => (Qpn::new(MCAST_QPN), group),
                _ => (Qpn::new(p.psn & 0xff_ffff), net.nodes[1].gid),
            };
            let mut h = ud_headers(dest, p.qkey.unwrap_or(QKEY), a, p.psn & 0xff_ffff);
            h.bth.pkey = p.pkey;
            let mut f = net.frame(0, to, h, &p.payload);
            patch_transport(&mut f, |t| {
                t[0] = p.opcode;
                for &(at, x) in &p.flips {
                    let n = t.len();
                    t[at % n] ^= x;
                }
            });
            let keep = f.len().saturating_sub(p.truncate).max(1);
            f.truncate(keep);
            let now = net.now;
            net.nodes[1].hca.handle_frame(now, &f);
            let mut out = Vec::new();
            prop_assert!(!net.nodes[1].hca.poll_transmit(now, &mut out), "UD never answers");
            delivered.extend(net.poll(1));
        }
        // Every completion names a posted WR and fits its buffer.
        for wc in &delivered {
            prop_assert_eq!(wc.opcode, WcOpcode::Recv);
            let (_, (_, len)) = posted.iter().find(|(id, _)| *id == wc.wr_id).unwrap();
            if wc.status == WcStatus::Success {
                prop_assert!(wc.byte_len >= 40 && wc.byte_len <= *len);
            }
        }
        // No byte outside a posted buffer changed.
        let now_bytes = net.read(1, 0, WATCHED);
        let inside = |i: u64| posted.iter().any(|(_, (off, len))| i >= *off && i < off + u64::from(*len));
        for (i, &byte) in now_bytes.iter().enumerate() {
            if !inside(i as u64) {
                prop_assert_eq!(byte, CANARY, "byte {} outside every receive buffer changed", i);
            }
        }
    }

    #[test]
    fn ud_lossy_fabric_delivers_intact_messages(
        lens in prop::collection::vec(4usize..1024, 1..40),
        fate in prop::collection::vec(0u8..10, 40),
        order in prop::collection::vec(any::<u32>(), 80),
    ) {
        let mut net = Net::new(2);
        let a = net.ud_qp(0, QKEY);
        let b = net.ud_qp(1, QKEY);
        let ah = net.ah(0, 1);
        // Enough receives for every copy; each 40 + 1024 bytes, 2 KiB apart.
        for i in 0..2 * lens.len() as u64 {
            net.post_recv(1, b, i, 2048 * i, 1064);
        }
        // Each message starts with its id, so a delivered buffer names the message it holds.
        let message = |id: usize, len: usize| -> Vec<u8> {
            let mut m = (id as u32).to_be_bytes().to_vec();
            m.extend((4..len).map(|j| (id as u8) ^ (j as u8).wrapping_mul(31)));
            m
        };
        for (id, &len) in lens.iter().enumerate() {
            net.send(0, a, ah, b, QKEY, id as u64, 2048 * id as u64, &message(id, len));
        }
        // Take every frame off node 0, then lose (fate 0..2), duplicate (fate 9) and reorder.
        let mut frames = Vec::new();
        let mut buf = Vec::new();
        while net.nodes[0].hca.poll_transmit(net.now, &mut buf) {
            frames.push(buf.clone());
        }
        prop_assert_eq!(frames.len(), lens.len());
        let mut wire: Vec<(u32, usize)> = Vec::new();
        let mut copies = vec![0usize; lens.len()];
        for (id, _) in frames.iter().enumerate() {
            let n = match fate[id] { 0 | 1 => 0, 9 => 2, _ => 1 };
            copies[id] = n;
            for k in 0..n {
                wire.push((order[2 * id + k], id));
            }
        }
        wire.sort();
        for &(_, id) in &wire {
            net.deliver(0, &frames[id].clone());
        }
        let wcs = net.poll(1);
        prop_assert_eq!(wcs.len(), wire.len(), "every copy that arrived is delivered");
        let mut seen = vec![0usize; lens.len()];
        for wc in &wcs {
            prop_assert_eq!(wc.status, WcStatus::Success);
            let got = net.read(1, 2048 * wc.wr_id + 40, wc.byte_len as usize - 40);
            let id = u32::from_be_bytes(got[..4].try_into().unwrap()) as usize;
            prop_assert!(id < lens.len());
            prop_assert_eq!(&got, &message(id, lens[id]), "message {} intact", id);
            seen[id] += 1;
        }
        // Lost messages never arrive; duplicated ones arrive twice.
        prop_assert_eq!(seen, copies);
        // Sender side: every send completed successfully, lost or not.
        let s = net.poll(0);
        prop_assert_eq!(s.len(), lens.len());
        prop_assert!(s.iter().all(|w| w.status == WcStatus::Success));
    }
}
