//! XRC under seeded loss on both directions (the XRC counterpart of `rc_lossy.rs`, with the
//! same machinery, `lossy/mod.rs`): A's XRC initiator sends mixes of SEND, SEND with
//! immediate, RDMA WRITE, WRITE with immediate, RDMA READ, FETCH_ADD and COMPARE_SWAP, each to
//! one of two XRC SRQs of B's domain (each in its own PD, with its own CQ and region), at
//! random sizes and path MTUs. Every operation completes exactly once, in order, with intact
//! data, or the QP reports an error completion; every SRQ receives its own messages exactly
//! once, in order, intact, on its own CQ.

mod common;
mod lossy;

use common::Svc;
use lossy::{cases, Op};
use proptest::prelude::*;
use softib_core::verbs::types::Mtu;

fn op_strategy() -> impl Strategy<Value = (Op, usize)> {
    let op = prop_oneof![
        (0u32..5000).prop_map(Op::Send),
        (0u32..5000).prop_map(Op::SendImm),
        (0u32..9000).prop_map(Op::Write),
        (0u32..9000).prop_map(Op::WriteImm),
        (0u32..9000).prop_map(Op::Read),
        (1u64..1000).prop_map(Op::Faa),
        (0u64..1000).prop_map(Op::Cas),
    ];
    (op, 0usize..2)
}

fn run(ops: &[(Op, usize)], loss: f64, seed: u64, mtu: Mtu) -> usize {
    lossy::run(Svc::Xrc, ops, loss, seed, mtu)
}

#[test]
fn xrc_lossless_mix_over_two_srqs() {
    use Op::*;
    let ops = [
        (Send(100), 0),
        (SendImm(2500), 1),
        (Write(5000), 0),
        (WriteImm(3000), 1),
        (Read(3000), 1),
        (Faa(5), 0),
        (Cas(8), 1),
        (Send(0), 1),
        (Read(0), 0),
        (WriteImm(0), 0),
        (Cas(3), 0),
        (Faa(7), 1),
    ];
    assert_eq!(run(&ops, 0.0, 1, Mtu::Mtu1024), ops.len());
}

#[test]
fn xrc_five_percent_loss_mix_over_two_srqs() {
    let ops: Vec<(Op, usize)> = (0..40u32)
        .map(|i| {
            let op = match i % 7 {
                0 => Op::Send(1000 + i * 37),
                1 => Op::SendImm(i),
                2 => Op::Write(4000 + i),
                3 => Op::WriteImm(2000 + i),
                4 => Op::Read(2500 + i),
                5 => Op::Faa(u64::from(i)),
                _ => Op::Cas(u64::from(i)),
            };
            (op, (i as usize / 3) % 2)
        })
        .collect();
    for seed in 0..6 {
        // At 5 % loss every operation must succeed (see rc_lossy.rs).
        let ok = run(&ops, 0.05, seed, Mtu::Mtu1024);
        assert_eq!(ok, ops.len(), "seed {seed}: only {ok} operations succeeded");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]
    /// o9-91.a1 asks XRC to meet 9.7 as RC does (C9-146): the reliable service's guarantees
    /// over every operation, under loss on both directions.
    #[test]
    fn o9_91_a1_xrc_exactly_once_in_order_intact_per_srq(ops in prop::collection::vec(op_strategy(), 1..16), loss in 0.0f64..0.3, seed in any::<u64>(), mtu in prop_oneof![Just(Mtu::Mtu256), Just(Mtu::Mtu1024), Just(Mtu::Mtu4096)]) {
        let _ = run(&ops, loss, seed, mtu);
    }
}
