//! RD under seeded loss on both directions (the RD counterpart of `rc_lossy.rs` and
//! `xrc_lossy.rs`, with the same machinery, `lossy/mod.rs`): three RD QPs of A send mixes of
//! SEND, SEND with immediate, RDMA WRITE, WRITE with immediate, RDMA READ, FETCH_ADD and
//! COMPARE_SWAP to two RD QPs of B (each in its own PD, with its own CQ and region), all
//! through one pair of EE contexts, at random sizes and path MTUs; some messages carry a wrong
//! Q_Key. Every WR completes exactly once and in order on its QP, with intact data, or with an
//! error (the refused message, then its QP's flushes; or exhausted retries, which end the EE
//! context); messages land exactly once, in order per (sending QP, destination QP), and a
//! QP's failure costs the others nothing.

mod common;
mod lossy;

use lossy::{cases, Op, RdOp, RD_DESTS, RD_SENDERS};
use proptest::prelude::*;
use softib_core::verbs::types::Mtu;

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..5000).prop_map(Op::Send),
        (0u32..5000).prop_map(Op::SendImm),
        (0u32..9000).prop_map(Op::Write),
        (0u32..9000).prop_map(Op::WriteImm),
        (0u32..9000).prop_map(Op::Read),
        (1u64..1000).prop_map(Op::Faa),
        (0u64..1000).prop_map(Op::Cas),
    ]
}

/// A mix of `n` operations over every (sender, destination) pair.
fn mix(n: u32) -> Vec<RdOp> {
    (0..n)
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
            RdOp {
                op,
                from: i as usize % RD_SENDERS,
                to: (i as usize / RD_SENDERS) % RD_DESTS,
                bad_qkey: false,
            }
        })
        .collect()
}

#[test]
fn rd_lossless_mix_of_three_qps_over_one_ee_context() {
    let ops = mix(21);
    assert_eq!(lossy::run_rd(&ops, 0.0, 1, Mtu::Mtu1024), ops.len());
}

/// A message with a wrong Q_Key fails its QP (the refused message, then its later WRs
/// flushed); the other QPs' messages through the same EE context all arrive, lossless and
/// at 5 % loss.
#[test]
fn rd_one_qps_wrong_q_key_costs_the_others_nothing() {
    let mut ops = mix(21);
    // Sender 1's third operation (a SEND WITH IMMEDIATE to destination 0... any kind).
    ops[7].bad_qkey = true;
    let failed = ops.iter().skip(7).filter(|o| o.from == 1).count();
    for (loss, seeds) in [(0.0, 0..1), (0.05, 0..4)] {
        for seed in seeds {
            let ok = lossy::run_rd(&ops, loss, seed, Mtu::Mtu1024);
            assert_eq!(ok, ops.len() - failed, "loss {loss} seed {seed}");
        }
    }
}

#[test]
fn rd_five_percent_loss_mix() {
    let ops = mix(28);
    for seed in 0..4 {
        // At 5 % loss every operation must succeed (see rc_lossy.rs).
        let ok = lossy::run_rd(&ops, 0.05, seed, Mtu::Mtu1024);
        assert_eq!(ok, ops.len(), "seed {seed}: only {ok} operations succeeded");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]
    /// The reliable service's guarantees over RD, per (QP, EE context), under loss on both
    /// directions, with a refused message now and then.
    #[test]
    fn rd_exactly_once_in_order_intact_per_qp(
        ops in prop::collection::vec((op_strategy(), 0..RD_SENDERS, 0..RD_DESTS, prop::bool::weighted(0.05)), 1..16),
        loss in 0.0f64..0.3,
        seed in any::<u64>(),
        mtu in prop_oneof![Just(Mtu::Mtu256), Just(Mtu::Mtu1024), Just(Mtu::Mtu4096)],
    ) {
        let ops: Vec<RdOp> = ops
            .into_iter()
            .map(|(op, from, to, bad_qkey)| RdOp { op, from, to, bad_qkey })
            .collect();
        let _ = lossy::run_rd(&ops, loss, seed, mtu);
    }
}
