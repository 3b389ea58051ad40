//! UC under arbitrary loss, reordering and duplication, and under hostile packets.
//!
//! A stream of multi-packet SENDs (with immediate) and RDMA WRITEs with immediate goes from A
//! to B; the frames A emits are dropped, duplicated and shuffled before B sees them. Every
//! message's bytes are unique at every offset, so a completion that carried a partial message
//! or one spliced from two messages would show. Invariants:
//!
//! * every receive completion carries exactly one whole, intact message: its length, its
//!   immediate and every byte placed belong to the same message (never partial, never
//!   spliced);
//! * with loss only (the order kept), the completions are exactly the messages whose packets
//!   all arrived, each once, in order; the rest are lost (B counts those it saw part of);
//! * with reordering and duplication as well, a message completes no more often than its
//!   FIRST / ONLY packet arrived: a FIRST / ONLY is accepted whatever its PSN (C9-184), so a
//!   duplicated or late whole message is, as the IBA demands, delivered again or late;
//! * B never sends anything.
//!
//! Hostile packets (random UC headers, random PSNs, keys, addresses, lengths and bytes) into a
//! UC QP never panic and never write outside the posted receive buffers and the region that
//! grants remote write.

mod common;

use common::uc::uc_pair;
use common::{patch_transport, Dir, Pair};
use proptest::prelude::*;
use softib_core::setup::ConnectOptions;
use softib_core::time::Instant;
use softib_core::verbs::types::{AccessFlags, Mtu, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::{ExtHeaders, Opcode, Position};
use softib_wire::reth::Reth;
use softib_wire::roce::RocePacket;
use softib_wire::transport::TransportHeaders;

const MTU: usize = 256;
/// Bytes between messages in A's region, B's receive buffers and B's WRITE targets.
const SLOT: usize = 2048;
/// Where the WRITE targets start in B's region.
const WRITE_BASE: usize = 0x40000;

/// Byte `o` of message `m`: distinct from every other message's byte at the same offset.
fn byte(m: usize, o: usize) -> u8 {
    (o as u8) ^ (m as u8).wrapping_mul(0x9d) ^ ((o >> 8) as u8).wrapping_mul(3)
}

fn payload(m: usize, len: usize) -> Vec<u8> {
    (0..len).map(|o| byte(m, o)).collect()
}

#[derive(Debug, Clone, Copy)]
enum Msg {
    Send(usize),
    WriteImm(usize),
}

impl Msg {
    fn len(self) -> usize {
        match self {
            Msg::Send(n) | Msg::WriteImm(n) => n,
        }
    }
}

fn msg_strategy() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (0usize..=4 * MTU + 10).prop_map(Msg::Send),
        (0usize..=4 * MTU + 10).prop_map(Msg::WriteImm),
    ]
}

fn pair() -> Pair {
    let opts = ConnectOptions {
        path_mtu: Mtu::Mtu256,
        ..ConnectOptions::default()
    };
    uc_pair(0xff_fff0, 0x500, opts)
}

/// Posts `msgs` on A (message i's bytes at slot i of A's region, WRITEs to slot i of B's
/// WRITE area, immediate = i) and one receive per message on B (slot i of B's region); returns
/// the frames A emits, each with its message index and whether it starts a message.
fn emit(p: &mut Pair, msgs: &[Msg]) -> Vec<(Vec<u8>, usize, bool)> {
    for (i, m) in msgs.iter().enumerate() {
        let data = payload(i, m.len());
        p.a.hca.mr_write(p.a.mr.handle, i * SLOT, &data).unwrap();
        let sge = p.sge_a((i * SLOT) as u64, m.len() as u32);
        let op = match m {
            Msg::Send(_) => WrOpcode::SendWithImm(i as u32),
            Msg::WriteImm(_) => WrOpcode::RdmaWriteWithImm {
                remote: RemoteAddr::new(p.b.mr.addr + (WRITE_BASE + i * SLOT) as u64, p.b.mr.rkey),
                imm: i as u32,
            },
        };
        p.post_a(&[SendWr::new(i as u64, op).with_sge(sge).signaled()]);
    }
    // Two receives per message: a duplicated whole message may complete twice (C9-184).
    for j in 0..2 * msgs.len() {
        p.recv_b(1000 + j as u64, (j * SLOT) as u64, SLOT as u32);
    }
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    let mut i = 0usize;
    let mut left = 0usize;
    while p.a.hca.poll_transmit(Instant::ZERO, &mut buf) {
        let q = RocePacket::parse(&buf).unwrap();
        let info = q.transport.info().unwrap();
        let starts = matches!(info.position, Position::First | Position::Only);
        if starts {
            if frames.is_empty() {
                i = 0;
            } else {
                i += 1;
            }
            left = msgs[i].len().div_ceil(MTU).max(1);
        }
        assert!(left > 0, "A emitted more packets than the message has");
        left -= 1;
        frames.push((buf.clone(), i, starts));
    }
    // UC completes every send WQE once its last packet is out (C9-180).
    let done = p.a.done();
    assert_eq!(done.len(), msgs.len());
    assert!(done.iter().all(|(_, s)| *s == WcStatus::Success));
    frames
}

/// Checks every completion on B against the messages; returns the message index of each
/// completion, in completion order.
fn check_completions(p: &mut Pair, msgs: &[Msg]) -> Vec<usize> {
    let mut out = Vec::new();
    for wc in p.b.wcs() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let m = wc
            .imm_data
            .expect("every message carries its index as immediate") as usize;
        assert!(m < msgs.len());
        let len = msgs[m].len();
        assert_eq!(
            wc.byte_len as usize, len,
            "message {m} complete, never partial"
        );
        let want = payload(m, len);
        match msgs[m] {
            Msg::Send(_) => {
                assert_eq!(wc.opcode, WcOpcode::Recv);
                let slot = (wc.wr_id - 1000) as usize;
                assert_eq!(
                    p.b.mem(slot * SLOT, len),
                    want,
                    "message {m} intact in its buffer"
                );
            }
            Msg::WriteImm(_) => {
                assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
                assert_eq!(
                    p.b.mem(WRITE_BASE + m * SLOT, len),
                    want,
                    "message {m} intact"
                );
            }
        }
        out.push(m);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Loss only: exactly the messages whose every packet arrived complete, once, in order.
    #[test]
    fn uc_loss_delivers_whole_messages_in_order(
        msgs in prop::collection::vec(msg_strategy(), 1..10),
        keep in prop::collection::vec(prop::bool::weighted(0.8), 64),
    ) {
        let mut p = pair();
        let frames = emit(&mut p, &msgs);
        let mut arrived = vec![0usize; msgs.len()];
        let mut total = vec![0usize; msgs.len()];
        for (k, (f, m, _)) in frames.iter().enumerate() {
            total[*m] += 1;
            if keep[k % keep.len()] {
                arrived[*m] += 1;
                p.inject_frame(Dir::AtoB, f);
            }
        }
        let got = check_completions(&mut p, &msgs);
        let want: Vec<usize> = (0..msgs.len()).filter(|&m| arrived[m] == total[m]).collect();
        prop_assert_eq!(got, want);
        prop_assert!(p.drain(Dir::BtoA).is_empty());
        // Every message whose FIRST B accepted but that did not complete is counted as
        // dropped, once, by the time a later packet shows it broken (the last one may still
        // be in progress).
        let started: Vec<bool> = (0..msgs.len())
            .map(|m| {
                frames
                    .iter()
                    .enumerate()
                    .any(|(k, (_, mm, st))| *mm == m && *st && keep[k % keep.len()])
            })
            .collect();
        let broken = (0..msgs.len()).filter(|&m| started[m] && arrived[m] < total[m]).count();
        let dropped = p.b.hca.counters().uc_msgs_dropped as usize;
        prop_assert!(
            dropped <= broken && dropped + 1 >= broken,
            "dropped {} broken {}",
            dropped,
            broken
        );
    }

    /// Loss, duplication and reordering: every completion is one whole intact message, and a
    /// message completes at most as often as its FIRST / ONLY arrived.
    #[test]
    fn uc_loss_dup_reorder_never_partial_or_spliced(
        msgs in prop::collection::vec(msg_strategy(), 1..10),
        plan in prop::collection::vec((0u8..=2, 0u32..8), 64),
    ) {
        let mut p = pair();
        let frames = emit(&mut p, &msgs);
        // Copies of each frame, each at a position jittered by up to 7 slots.
        let mut order = Vec::new();
        for (k, _) in frames.iter().enumerate() {
            let (copies, jitter) = plan[k % plan.len()];
            for c in 0..u32::from(copies) {
                order.push((k as u32 * 4 + jitter + c * 5, k));
            }
        }
        order.sort();
        let mut starts_seen = vec![0usize; msgs.len()];
        for &(_, k) in &order {
            let (f, m, starts) = &frames[k];
            if *starts {
                starts_seen[*m] += 1;
            }
            p.inject_frame(Dir::AtoB, f);
        }
        let got = check_completions(&mut p, &msgs);
        for (m, &n) in starts_seen.iter().enumerate() {
            let times = got.iter().filter(|&&g| g == m).count();
            prop_assert!(
                times <= n,
                "message {} completed {} times, FIRST/ONLY seen {}",
                m,
                times,
                n
            );
        }
        // Without duplicates and reordering of a message's own packets nothing is lost that
        // arrived whole: a message whose packets all arrived once, consecutively and in order
        // completes.
        let mut run = Vec::new();
        for &(_, k) in &order {
            run.push(k);
        }
        for (m, _) in msgs.iter().enumerate() {
            let mine: Vec<usize> = (0..frames.len()).filter(|&k| frames[k].1 == m).collect();
            let whole = run.windows(mine.len()).any(|w| w == mine.as_slice());
            if whole {
                prop_assert!(got.contains(&m), "message {} arrived whole and in order", m);
            }
        }
        prop_assert!(p.drain(Dir::BtoA).is_empty());
    }
}

// ----- hostile packets ----------------------------------------------------------------------

/// B's layout for the hostile test: the receive buffers live in `guard`, a region without
/// remote access; the main region grants remote write. Everything else in `guard` must stay.
const RECV_AT: [(usize, usize); 2] = [(1024, 300), (4096, 2000)];
const GUARD_LEN: usize = 16384;
const GUARD_BYTE: u8 = 0xe5;

#[derive(Debug, Clone)]
struct Hostile {
    opcode: u8,
    psn_delta: i32,
    random_psn: Option<u32>,
    len: usize,
    pad: u8,
    va_pick: u8,
    va_off: i64,
    key_pick: u8,
    dma_len: u32,
    imm: u32,
    seed: u8,
    /// Bytes of the transport part to overwrite after building (offset, value).
    flips: Vec<(u16, u8)>,
}

fn hostile_strategy() -> impl Strategy<Value = Hostile> {
    (
        prop_oneof![8 => 0x20u8..=0x2b, 1 => any::<u8>()],
        -3i32..4,
        prop::option::weighted(0.1, any::<u32>()),
        0usize..=MTU + 8,
        0u8..4,
        0u8..4,
        -64i64..64,
        0u8..4,
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        prop::collection::vec((any::<u16>(), any::<u8>()), 0..3),
    )
        .prop_map(
            |(
                opcode,
                psn_delta,
                random_psn,
                len,
                pad,
                va_pick,
                va_off,
                key_pick,
                dma_len,
                imm,
                seed,
                flips,
            )| Hostile {
                opcode,
                psn_delta,
                random_psn,
                len,
                pad,
                va_pick,
                va_off,
                key_pick,
                dma_len,
                imm,
                seed,
                flips,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn uc_hostile_packets_never_panic_or_write_out_of_bounds(
        pkts in prop::collection::vec(hostile_strategy(), 1..40),
    ) {
        let mut p = pair();
        let guard = p
            .b
            .hca
            .reg_mr(p.b.pd, vec![GUARD_BYTE; GUARD_LEN], AccessFlags::LOCAL_WRITE, None)
            .unwrap();
        // A third region: remote write allowed by the key but in another PD.
        let other_pd = p.b.hca.alloc_pd().unwrap();
        let foreign = p
            .b
            .hca
            .reg_mr(
                other_pd,
                vec![GUARD_BYTE; 4096],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                None,
            )
            .unwrap();
        for (i, (off, len)) in RECV_AT.iter().enumerate() {
            for _ in 0..4 {
                let sge = Sge {
                    addr: guard.addr + *off as u64,
                    length: *len as u32,
                    lkey: guard.lkey,
                };
                p.b.hca.post_recv(p.b.qpn, &[RecvWr::new(i as u64, vec![sge])]).unwrap();
            }
        }
        let mut epsn = p.rq_psn_b();
        for h in &pkts {
            let info = Opcode(h.opcode).info();
            let mut t = TransportHeaders::new(softib_wire::bth::Bth {
                opcode: Opcode(h.opcode),
                psn: softib_wire::Psn::new(
                    h.random_psn.unwrap_or(epsn.wrapping_add(h.psn_delta as u32)) & 0xff_ffff,
                ),
                ..Default::default()
            });
            let Some(info) = info else { continue };
            if info.headers.contains(ExtHeaders::RETH) {
                let va = match h.va_pick {
                    0 => p.b.mr.addr,
                    1 => p.b.mr.addr + common::MR_LEN as u64,
                    2 => guard.addr,
                    _ => foreign.addr,
                }
                .wrapping_add(h.va_off as u64);
                let rkey = match h.key_pick {
                    0 => p.b.mr.rkey,
                    1 => guard.rkey,
                    2 => foreign.rkey,
                    _ => h.imm,
                };
                // Mostly a DMA length the packet's payload can match (ONLY: the payload; FIRST:
                // several PMTUs), so that WRITEs get as far as the R_Key and bounds checks.
                let r = (h.len + h.pad as usize) % 4;
                let len = if h.len >= r { h.len - r } else { h.len + 4 - r };
                let dma_len = match h.dma_len % 4 {
                    0 | 1 => len as u32,
                    2 => (h.dma_len >> 2) % 4 * MTU as u32 + (h.dma_len >> 4) % MTU as u32,
                    _ => h.dma_len,
                };
                t.reth = Some(Reth { va, rkey, dma_len });
            }
            if info.headers.contains(ExtHeaders::IMMDT) {
                t.immdt = Some(ImmDt { imm: h.imm });
            }
            let ours = (ExtHeaders::RETH | ExtHeaders::IMMDT).bits();
            if info.headers.bits() & !ours != 0 || !info.payload {
                // Headers this generator does not fill in (other services).
                continue;
            }
            // The builder needs payload + pad to be a multiple of 4.
            let r = (h.len + h.pad as usize) % 4;
            let len = if h.len >= r { h.len - r } else { h.len + 4 - r };
            let data: Vec<u8> = (0..len).map(|o| (o as u8) ^ h.seed).collect();
            let mut f = p.frame_with_pad(Dir::AtoB, t, &data, Some(h.pad));
            if !h.flips.is_empty() {
                // Transport bytes (BTH through pad): the frame may be padded to the Ethernet
                // minimum, so the length comes from the IPv4 total length.
                let n = 14 + usize::from(u16::from_be_bytes([f[16], f[17]])) - common::BTH_AT - 4;
                patch_transport(&mut f, |tb| {
                    for &(at, v) in &h.flips {
                        // Keep DestQP so the packet still reaches the QP.
                        let at = usize::from(at) % n;
                        if !(5..8).contains(&at) {
                            tb[at] = v;
                        }
                    }
                });
            }
            p.inject_frame(Dir::AtoB, &f);
            epsn = p.rq_psn_b();
        }
        prop_assert!(p.drain(Dir::BtoA).is_empty());
        // Nothing outside the receive buffers in the guard region changed.
        let g = p.b.hca.mr_bytes(guard.handle).unwrap().to_vec();
        for (o, &b) in g.iter().enumerate() {
            let in_recv = RECV_AT.iter().any(|&(off, len)| o >= off && o < off + len);
            if !in_recv {
                prop_assert_eq!(b, GUARD_BYTE, "guard byte {} written", o);
            }
        }
        let fr = p.b.hca.mr_bytes(foreign.handle).unwrap();
        prop_assert!(fr.iter().all(|&b| b == GUARD_BYTE), "region of another PD written");
        // Completions only for receive WQEs that were posted, with lengths inside them.
        for wc in p.b.wcs() {
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                prop_assert!((wc.byte_len as usize) <= RECV_AT[wc.wr_id as usize].1);
            }
        }
    }
}
