//! Seeded fault-matrix runs through the simulated fabric: for every operation and mixes of
//! loss, duplication, reordering and corruption, every posted RC (and XRC) operation completes
//! exactly once, in order, with intact data — or the QP reports an error completion; never a
//! silent loss or a duplicate delivery. XRC messages are checked in the SRQ they landed in.
//! Also: the same seed gives the same report.

use proptest::prelude::*;
use softib_core::verbs::types::Mtu;
use softib_sim::{run, OpKind, Service, SimConfig, SimReport};

fn cfg(op: OpKind, size: u32, ops: u64, seed: u64) -> SimConfig {
    SimConfig {
        op,
        size,
        ops,
        seed,
        mtu: Mtu::Mtu1024,
        depth: 8,
        ..SimConfig::default()
    }
}

/// The invariant: either everything verified, or the run ended in an error completion with
/// nothing delivered twice or corrupted.
fn check(c: &SimConfig) {
    let r = run(c, None, &mut |_, _| {}).unwrap();
    assert_eq!(
        r.verify_failures,
        0,
        "data or order mismatch: {c:?}\n{}",
        r.to_text()
    );
    assert!(r.completed <= r.posted && r.posted <= c.ops);
    if r.errors == 0 {
        assert!(
            r.verified,
            "no error completion but not verified: {c:?}\n{}",
            r.to_text()
        );
        assert_eq!(r.completed, c.ops);
    } else {
        // An error completes the failed WR and flushes the rest: every posted WR came back.
        assert_eq!(r.completed, r.posted, "{c:?}\n{}", r.to_text());
    }
}

/// C9-146 (an RC QP meets the reliable-service rules of 9.7) is an umbrella statement; its
/// observable meaning is this matrix: every operation, under every fault, exactly once, in
/// order and intact, or an error completion.
#[test]
fn c9_146_rc_every_op_under_every_fault() {
    let ops = [
        OpKind::Send,
        OpKind::Write,
        OpKind::Read,
        OpKind::Cas,
        OpKind::Faa,
    ];
    let faults = [
        (0.02, 0.0, 0.0, 0.0),
        (0.0, 0.05, 0.0, 0.0),
        (0.0, 0.0, 0.05, 0.0),
        (0.0, 0.0, 0.0, 0.02),
        (0.01, 0.01, 0.01, 0.01),
    ];
    for (i, op) in ops.into_iter().enumerate() {
        for (j, (loss, dup, reorder, corrupt)) in faults.into_iter().enumerate() {
            let c = SimConfig {
                loss,
                dup,
                reorder,
                corrupt,
                ..cfg(op, 2500, 300, (i * 10 + j) as u64)
            };
            let r = run(&c, None, &mut |_, _| {}).unwrap();
            assert!(r.verified, "{c:?}\n{}", r.to_text());
        }
    }
}

/// Every operation under 1 % of every fault at once, on the configuration `service` makes of
/// the base one: each run verified, and `check` looks at each report.
fn every_op_under_every_fault(
    seed: u64,
    service: impl Fn(SimConfig) -> SimConfig,
    check: impl Fn(OpKind, &SimReport),
) {
    let ops = [
        OpKind::Send,
        OpKind::Write,
        OpKind::Read,
        OpKind::Cas,
        OpKind::Faa,
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let c = service(SimConfig {
            loss: 0.01,
            dup: 0.01,
            reorder: 0.01,
            corrupt: 0.01,
            ..cfg(op, 2500, 300, seed + i as u64)
        });
        let r = run(&c, None, &mut |_, _| {}).unwrap();
        assert!(r.verified, "{c:?}\n{}", r.to_text());
        check(op, &r);
    }
}

/// o9-91.a1 (an XRC CA meets the XRC equivalents of C9-146..C9-149): the XRC run of the
/// matrix above — several initiators, each reaching every SRQ of the target's domain.
#[test]
fn o9_91_a1_xrc_every_op_under_every_fault() {
    let xrc = |c| SimConfig {
        service: Service::Xrc,
        qps: 2,
        srqs: 3,
        ..c
    };
    every_op_under_every_fault(100, xrc, |op, r| {
        if op == OpKind::Send {
            assert_eq!(r.per_srq, vec![100, 100, 100]);
        }
    });
}

/// RD: six QPs sharing two EE context pairs, every operation under every fault at once:
/// each QP's messages exactly once, in order, intact.
#[test]
fn rd_every_op_under_every_fault() {
    let rd = |c| SimConfig {
        service: Service::Rd,
        qps: 6,
        eecs: 2,
        ..c
    };
    every_op_under_every_fault(200, rd, |_, r| assert_eq!(r.per_eec, vec![150, 150]));
}

#[test]
fn link_flaps_are_survived() {
    // Node A's link goes down in both directions twice, for 2 ms and 4 ms, while WRITEs and
    // READs are in flight; the transport timer (Ttr ≈ 1 ms, 7 retries) carries the QP over.
    for op in [OpKind::Write, OpKind::Read, OpKind::Faa] {
        let c = SimConfig {
            timeout: 8,
            link_down: vec![(20_000, 2_020_000), (3_000_000, 7_000_000)],
            ..cfg(op, 8192, 400, 3)
        };
        let r = run(&c, None, &mut |_, _| {}).unwrap();
        assert!(r.verified, "{c:?}\n{}", r.to_text());
        assert!(
            r.retrans_by_timeout >= 2,
            "the outages must be bridged by timeouts"
        );
        assert!(r.fabric.links.dropped_link_down > 0);
    }
    // An outage longer than 7 retries of Ttr ends in an error completion, never silence.
    let c = SimConfig {
        timeout: 8,
        link_down: vec![(20_000, 60_000_000)],
        ..cfg(OpKind::Write, 8192, 400, 3)
    };
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(!r.verified);
    assert_eq!(
        r.per_status.get("IBV_WC_RETRY_EXC_ERR"),
        Some(&1),
        "{}",
        r.to_text()
    );
    check(&c);
}

#[test]
fn same_seed_same_report() {
    let c = SimConfig {
        loss: 0.02,
        reorder: 0.02,
        ..cfg(OpKind::Read, 5000, 200, 42)
    };
    let a = run(&c, None, &mut |_, _| {}).unwrap();
    let b = run(&c, None, &mut |_, _| {}).unwrap();
    let (mut ja, mut jb) = (a.to_json(), b.to_json());
    ja["wall_time_s"] = 0.into();
    jb["wall_time_s"] = 0.into();
    assert_eq!(ja, jb);
    let d = run(&SimConfig { seed: 43, ..c }, None, &mut |_, _| {}).unwrap();
    assert_ne!(a.retransmissions, 0);
    assert!(a.sim_time_ns != d.sim_time_ns || a.retransmissions != d.retransmissions);
}

fn op_strategy() -> impl Strategy<Value = OpKind> {
    prop_oneof![
        Just(OpKind::Send),
        Just(OpKind::Write),
        Just(OpKind::Read),
        Just(OpKind::Cas),
        Just(OpKind::Faa)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// RC; XRC with initiators spread over 1 to 4 SRQs of the target's domain; RD with the QPs
    /// sharing 1 to 3 EE contexts.
    #[test]
    fn exactly_once_in_order_intact_or_error(
        service in prop_oneof![Just(Service::Rc), Just(Service::Xrc), Just(Service::Rd)],
        op in op_strategy(),
        size in 0u32..6000,
        ops in 1u64..120,
        depth in 1u32..12,
        qps in 1u32..4,
        srqs in 1u32..5,
        eecs in 1u32..4,
        loss in 0.0f64..0.15,
        dup in 0.0f64..0.1,
        reorder in 0.0f64..0.1,
        corrupt in 0.0f64..0.05,
        seed in any::<u64>(),
        mtu in prop_oneof![Just(Mtu::Mtu256), Just(Mtu::Mtu1024), Just(Mtu::Mtu4096)],
    ) {
        let c = SimConfig { service, op, size, ops, depth, qps, srqs, eecs, loss, dup, reorder, corrupt, seed, mtu, timeout: 6, ..SimConfig::default() };
        check(&c);
    }
}
