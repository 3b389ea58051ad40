//! Hostile traffic: arbitrary RC packets — any opcode, PSN near or far from the expected one,
//! any RETH / AtomicETH / AETH / ImmDt / IETH contents, any payload and pad — with valid ICRCs,
//! handed to both ends of a connected pair, interleaved with real traffic. The HCA never panics,
//! never writes to memory whose keys grant no remote access, and whatever it sends still parses
//! with a valid ICRC.

mod common;

use common::{Dir, Pair};
use proptest::prelude::*;
use softib_core::setup::ConnectOptions;
use softib_core::verbs::types::AccessFlags;
use softib_core::verbs::wr::{RecvWr, Sge};
use softib_wire::aeth::Aeth;
use softib_wire::atomic_ack_eth::AtomicAckEth;
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::bth::Bth;
use softib_wire::feth::Feth;
use softib_wire::ieth::Ieth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::{ExtHeaders, Opcode};
use softib_wire::reth::Reth;
use softib_wire::roce::RocePacket;
use softib_wire::transport::TransportHeaders;
use softib_wire::{Msn, Psn};

#[derive(Debug, Clone)]
struct Hostile {
    to_b: bool,
    opcode: u8,
    psn_delta: i32,
    va_off: u64,
    rkey_kind: u8,
    len: u32,
    syndrome: u8,
    value: u64,
    payload: Vec<u8>,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        any::<bool>(),
        0u8..0x20,
        prop_oneof![-4i32..6, any::<i32>()],
        prop_oneof![0u64..8192, any::<u64>()],
        0u8..4,
        prop_oneof![0u32..9000, any::<u32>()],
        any::<u8>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..1100),
    )
        .prop_map(
            |(to_b, opcode, psn_delta, va_off, rkey_kind, len, syndrome, value, payload)| Hostile {
                to_b,
                opcode,
                psn_delta,
                va_off,
                rkey_kind,
                len,
                syndrome,
                value,
                payload,
            },
        )
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]
    #[test]
    fn hostile_packets_never_panic_or_touch_protected_memory(packets in prop::collection::vec(hostile(), 1..40)) {
        let mut p = Pair::new(0xfffff0, 0x10, ConnectOptions { max_rd_atomic: 4, max_dest_rd_atomic: 4, ..ConnectOptions::default() });
        // A region on each side whose keys grant no remote access: it must never change.
        let guard = |side: &mut common::Side| {
            side.hca.reg_mr(side.pd, vec![0xAA; 8192], AccessFlags::LOCAL_WRITE, None).unwrap()
        };
        let (ga, gb) = (guard(&mut p.a), guard(&mut p.b));
        for k in 0..8u64 {
            let sge = Sge { addr: p.b.mr.addr + k * 2048, length: 2048, lkey: p.b.mr.lkey };
            p.b.hca.post_recv(p.b.qpn, &[RecvWr::new(k, vec![sge])]).unwrap();
        }
        for h in &packets {
            let dir = if h.to_b { Dir::AtoB } else { Dir::BtoA };
            let (target, guard_key) = if h.to_b { (&p.b, gb) } else { (&p.a, ga) };
            let rkey = match h.rkey_kind {
                0 => target.mr.rkey,
                1 => guard_key.rkey,
                2 => guard_key.lkey,
                _ => h.value as u32,
            };
            let base = if h.rkey_kind == 1 || h.rkey_kind == 2 { guard_key.addr } else { target.mr.addr };
            let va = base.wrapping_add(h.va_off);
            let expected = if h.to_b {
                p.b.hca.query_qp(p.b.qpn).unwrap().rq_psn
            } else {
                p.a.hca.query_qp(p.a.qpn).unwrap().sq_psn
            };
            let psn = Psn::new((expected.value() as i64 + i64::from(h.psn_delta)) as u32);
            let op = Opcode(h.opcode);
            let Some(info) = op.info() else { continue };
            let mut hd = TransportHeaders::new(Bth { opcode: op, psn, ack_req: h.value & 1 == 1, ..Bth::default() });
            let f = info.headers;
            if f.contains(ExtHeaders::FETH) { hd.feth = Some(Feth { sel: (h.value & 3) as u8, plt: 1, ..Feth::default() }); }
            if f.contains(ExtHeaders::RETH) { hd.reth = Some(Reth { va, rkey, dma_len: h.len }); }
            if f.contains(ExtHeaders::ATOMIC_ETH) { hd.atomic_eth = Some(AtomicEth { va, rkey, swap_add: h.value, compare: h.value.rotate_left(7) }); }
            if f.contains(ExtHeaders::AETH) { hd.aeth = Some(Aeth { syndrome: h.syndrome, msn: Msn::new(h.value as u32) }); }
            if f.contains(ExtHeaders::ATOMIC_ACK_ETH) { hd.atomic_ack_eth = Some(AtomicAckEth { orig_remote_data: h.value }); }
            if f.contains(ExtHeaders::IMMDT) { hd.immdt = Some(ImmDt { imm: h.value as u32 }); }
            if f.contains(ExtHeaders::IETH) { hd.ieth = Some(Ieth { rkey }); }
            let payload: &[u8] = if info.payload { &h.payload } else { &[] };
            p.inject(dir, hd, payload);
            // Whatever either side sends in reply is well formed; deliver it.
            p.run(p.now.as_nanos() + 10_000_000_000);
        }
        p.run(p.now.as_nanos() + 100_000_000_000);
        for (_, f) in &p.log {
            let q = RocePacket::parse(f).expect("the HCA only sends well-formed packets");
            prop_assert!(q.icrc_ok());
        }
        for (side, g) in [(&p.a, ga), (&p.b, gb)] {
            prop_assert!(side.hca.mr_bytes(g.handle).unwrap().iter().all(|&b| b == 0xAA), "protected memory changed");
        }
    }
}
