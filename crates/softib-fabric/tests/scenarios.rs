//! Scenarios with RoCEv2 toy endpoints: ordering, each fault, scripted rules, timeouts and
//! determinism.

use proptest::prelude::*;
use softib_fabric::toy::{write_ud_send, Addr, Pinger, Ponger, Receiver, Toy, UdSender};
use softib_fabric::{
    Action, BurstLoss, Direction, Endpoint, Fabric, Faults, LinkConfig, Match, NodeId, Rule,
    RunOutcome,
};
use softib_wire::opcode::Opcode;
use softib_wire::roce::RocePacket;

const GBPS10: u64 = 10_000_000_000;
const GBPS100: u64 = 100_000_000_000;

fn a() -> Addr {
    Addr::host(1)
}
fn b() -> Addr {
    Addr::host(2)
}

/// A sender (first node) to a receiver (second node); `up` is the sender's up direction,
/// `down` the receiver's down direction; the other two are perfect.
fn one_way(seed: u64, sender: UdSender, up: LinkConfig, down: LinkConfig) -> Fabric<Toy> {
    let mut f = Fabric::new(seed);
    f.add_node_with(Toy::Sender(sender), a().mac, up, LinkConfig::ideal());
    f.add_node_with(
        Toy::Receiver(Receiver::new()),
        b().mac,
        LinkConfig::ideal(),
        down,
    );
    f
}

fn tx_id(f: &Fabric<Toy>) -> NodeId {
    f.node_by_mac(a().mac).unwrap()
}

fn rx_id(f: &Fabric<Toy>) -> NodeId {
    f.node_by_mac(b().mac).unwrap()
}

fn rx(f: &Fabric<Toy>) -> &Receiver {
    f.nodes()
        .find_map(|(_, n)| n.as_receiver())
        .expect("a receiver")
}

fn psns(f: &Fabric<Toy>) -> Vec<u32> {
    rx(f)
        .arrivals
        .iter()
        .map(|a| a.psn.expect("RoCEv2"))
        .collect()
}

#[test]
fn fifo_under_jitter_without_reorder() {
    let cfg = LinkConfig::new(2_000, GBPS100).with_jitter(50_000);
    let sender = UdSender::new(a(), b(), 5_000, 64).paced(100);
    let mut f = one_way(11, sender, cfg.clone(), cfg);
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    let got = psns(&f);
    assert_eq!(got, (0..5_000).collect::<Vec<u32>>());
    let times: Vec<u64> = rx(&f).arrivals.iter().map(|a| a.time_ns).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    // The jitter did spread arrivals: gaps are not all the pacing interval.
    assert!(times.windows(2).any(|w| w[1] - w[0] != 100));
    assert_eq!(rx(&f).bad, 0);
}

#[test]
fn loss_rate_is_within_bounds() {
    const N: u64 = 100_000;
    let up = LinkConfig::new(100, 0).with_faults(Faults {
        loss: 0.1,
        ..Faults::none()
    });
    let mut f = Fabric::new(2024);
    let tx = f.add_node_with(
        Toy::Sender(UdSender::new(a(), b(), N, 0).paced(10)),
        a().mac,
        up,
        LinkConfig::ideal(),
    );
    let r = f.add_node(
        Toy::Receiver(Receiver::counting()),
        b().mac,
        LinkConfig::ideal(),
    );
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    let got = f.node(r).as_receiver().unwrap().frames;
    let lost = N - got;
    // Binomial(100000, 0.1): mean 10000, standard deviation ~95; allow 5 sigma.
    assert!((9_525..=10_475).contains(&lost), "lost {lost}");
    let s = f.stats(tx, Direction::Up);
    assert_eq!(s.dropped_loss, lost);
    assert_eq!(s.sent_frames, N);
    assert_eq!(s.delivered_frames, got);
}

#[test]
fn burst_loss_comes_in_runs() {
    const N: u64 = 100_000;
    let up = LinkConfig::new(100, 0).with_faults(Faults {
        burst: Some(BurstLoss {
            enter: 0.01,
            leave: 0.2,
            loss: 1.0,
        }),
        ..Faults::none()
    });
    let mut f = one_way(
        77,
        UdSender::new(a(), b(), N, 0).paced(10),
        up,
        LinkConfig::ideal(),
    );
    f.run_until_idle(u64::MAX);
    let got = psns(&f);
    let lost = N - got.len() as u64;
    // The chain is bad 0.01 / 0.21 of the time: 4762 frames expected.
    assert!((4_000..5_600).contains(&lost), "lost {lost}");
    assert_eq!(f.stats(tx_id(&f), Direction::Up).dropped_loss, lost);
    // Runs of consecutive losses last 1 / 0.2 = 5 frames on average.
    let mut runs = Vec::new();
    let mut prev: Option<u32> = None;
    for &p in &got {
        let gap = p - prev.map_or(0, |q| q + 1);
        if gap > 0 {
            runs.push(gap);
        }
        prev = Some(p);
    }
    let mean = f64::from(runs.iter().sum::<u32>()) / runs.len() as f64;
    assert!((4.5..5.5).contains(&mean), "mean run {mean}");
}

#[test]
fn duplicates_arrive_twice_right_behind_the_original() {
    let up = LinkConfig::new(1_000, GBPS10).with_faults(Faults {
        dup: 0.25,
        ..Faults::none()
    });
    let mut f = one_way(
        5,
        UdSender::new(a(), b(), 2_000, 32),
        up,
        LinkConfig::ideal(),
    );
    f.run_until_idle(u64::MAX);
    let got = psns(&f);
    let dups = f.stats(tx_id(&f), Direction::Up).duplicated;
    assert!(dups > 400 && dups < 600, "{dups}");
    assert_eq!(got.len() as u64, 2_000 + dups);
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(dedup, (0..2_000).collect::<Vec<u32>>());
    assert_eq!(rx(&f).bad, 0);
}

#[test]
fn reorder_lets_later_frames_overtake() {
    let up = LinkConfig::new(1_000, GBPS10).with_faults(Faults {
        reorder: 0.05,
        reorder_delay_ns: 20_000,
        ..Faults::none()
    });
    let mut f = one_way(
        9,
        UdSender::new(a(), b(), 2_000, 32).paced(1_000),
        up,
        LinkConfig::ideal(),
    );
    f.run_until_idle(u64::MAX);
    let got = psns(&f);
    let reordered = f.stats(tx_id(&f), Direction::Up).reordered;
    assert!(reordered > 50, "{reordered}");
    // Everything arrives, not in order.
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..2_000).collect::<Vec<u32>>());
    let inversions = got.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(
        inversions as u64 >= reordered / 2,
        "{inversions} vs {reordered}"
    );
    // A held-back frame arrives its hold later than it would have: 20 frames overtake it.
    let pos = |psn| got.iter().position(|&p| p == psn).unwrap();
    let late = (0..2_000u32).find(|&p| pos(p) > p as usize + 5).unwrap();
    assert!(pos(late) >= late as usize + 15, "{late} at {}", pos(late));
}

#[test]
fn corruption_is_caught_by_the_icrc() {
    for seed in 0..8 {
        let down = LinkConfig::new(1_000, GBPS10).with_faults(Faults {
            corrupt: 1.0,
            ..Faults::none()
        });
        let mut f = one_way(
            seed,
            UdSender::new(a(), b(), 500, 17),
            LinkConfig::ideal(),
            down,
        );
        f.run_until_idle(u64::MAX);
        let r = rx(&f);
        assert_eq!(r.frames, 500);
        assert_eq!(
            r.bad, 500,
            "seed {seed}: every corrupted frame must fail its check"
        );
        assert_eq!(f.stats(rx_id(&f), Direction::Down).corrupted, 500);
    }
    // Partial corruption: the bad count equals the corrupted count.
    let up = LinkConfig::ideal().with_faults(Faults {
        corrupt: 0.2,
        ..Faults::none()
    });
    let mut f = one_way(
        3,
        UdSender::new(a(), b(), 2_000, 100),
        up,
        LinkConfig::ideal(),
    );
    f.run_until_idle(u64::MAX);
    let corrupted = f.stats(tx_id(&f), Direction::Up).corrupted;
    assert!(corrupted > 300 && corrupted < 500, "{corrupted}");
    assert_eq!(rx(&f).bad, corrupted);
    // The Ethernet header is never touched, so every frame still reached its destination.
    assert_eq!(rx(&f).frames, 2_000);
}

#[test]
fn link_down_interval_drops_exactly_the_frames_it_touches() {
    // One frame per µs, 500 ns on the wire; the sender's up direction is down in [20 µs, 40 µs).
    // A frame sent at t is lost when [t, t + 500] meets the interval: t in [19.5 µs, 40 µs).
    let up = LinkConfig::new(500, 0).with_faults(Faults {
        down: vec![(20_000, 40_000)],
        ..Faults::none()
    });
    let mut f = one_way(
        1,
        UdSender::new(a(), b(), 100, 8).paced(1_000),
        up,
        LinkConfig::ideal(),
    );
    f.run_until_idle(u64::MAX);
    let want: Vec<u32> = (0..20).chain(40..100).collect();
    assert_eq!(psns(&f), want);
    assert_eq!(f.stats(tx_id(&f), Direction::Up).dropped_link_down, 20);
    // A frame sent at 19 µs arrives at 19.5 µs, before the link goes down.
    assert_eq!(rx(&f).arrivals[19].time_ns, 19_500);
}

/// Sends UD frames with the given PSNs, all at once.
struct PsnList {
    psns: Vec<u32>,
    next: usize,
}

impl Endpoint for PsnList {
    fn handle_frame(&mut self, _: u64, _: &[u8]) {}
    fn poll_transmit(&mut self, _: u64, out: &mut Vec<u8>) -> bool {
        let Some(&psn) = self.psns.get(self.next) else {
            return false;
        };
        self.next += 1;
        write_ud_send(&a(), &b(), psn, &[psn as u8; 4], out);
        true
    }
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
    fn handle_timeout(&mut self, _: u64) {}
}

enum Either {
    Tx(PsnList),
    Rx(Receiver),
}

impl Endpoint for Either {
    fn handle_frame(&mut self, now: u64, f: &[u8]) {
        match self {
            Either::Tx(e) => e.handle_frame(now, f),
            Either::Rx(e) => e.handle_frame(now, f),
        }
    }
    fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> bool {
        match self {
            Either::Tx(e) => e.poll_transmit(now, out),
            Either::Rx(e) => e.poll_transmit(now, out),
        }
    }
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
    fn handle_timeout(&mut self, _: u64) {}
}

#[test]
fn scripted_rule_drops_the_third_packet_with_a_psn() {
    let mut f = Fabric::new(0);
    let list = vec![0, 1, 2, 3, 3, 4, 3, 5, 3];
    let tx = f.add_node(
        Either::Tx(PsnList {
            psns: list,
            next: 0,
        }),
        a().mac,
        LinkConfig::new(100, GBPS10),
    );
    let r = f.add_node(
        Either::Rx(Receiver::new()),
        b().mac,
        LinkConfig::new(100, GBPS10),
    );
    let drop3 = f.add_rule(Rule::new(
        Match {
            psn: Some(3),
            nth: Some(3),
            ..Default::default()
        },
        Action::Drop,
    ));
    // Rules that must not fire: wrong opcode, wrong hop direction for the sender filter.
    let other_op = f.add_rule(Rule::new(
        Match {
            opcode: Some(Opcode::RC_SEND_ONLY.0),
            ..Default::default()
        },
        Action::Drop,
    ));
    let wrong_hop = f.add_rule(Rule::new(
        Match {
            from: Some(r),
            ..Default::default()
        },
        Action::Drop,
    ));
    // On the receiver's down direction: duplicate the frame with PSN 5 addressed to it.
    let dup5 = f.add_rule(Rule::new(
        Match {
            psn: Some(5),
            dest_qp: Some(b().qpn),
            to: Some(r),
            hop: Direction::Down,
            ..Default::default()
        },
        Action::Duplicate,
    ));
    f.run_until_idle(u64::MAX);
    let Either::Rx(rcv) = f.node(r) else {
        unreachable!()
    };
    let got: Vec<u32> = rcv.arrivals.iter().map(|a| a.psn.unwrap()).collect();
    assert_eq!(got, [0, 1, 2, 3, 3, 4, 5, 5, 3]);
    assert_eq!(f.rule_stats(drop3).matched, 4);
    assert_eq!(f.rule_stats(drop3).applied, 1);
    assert_eq!(f.rule_stats(other_op).matched, 0);
    assert_eq!(f.rule_stats(wrong_hop).matched, 0);
    assert_eq!(f.rule_stats(dup5).applied, 1);
    assert_eq!(f.stats(tx, Direction::Up).dropped_rule, 1);
    assert_eq!(f.stats(r, Direction::Down).duplicated, 1);
}

#[test]
fn delay_and_corrupt_rules() {
    let mut f = one_way(
        0,
        UdSender::new(a(), b(), 10, 8).paced(1_000),
        LinkConfig::new(100, 0),
        LinkConfig::ideal(),
    );
    f.add_rule(Rule::new(
        Match {
            psn: Some(2),
            ..Default::default()
        },
        Action::Delay(3_500),
    ));
    f.add_rule(Rule::new(
        Match {
            psn: Some(7),
            ..Default::default()
        },
        Action::Corrupt,
    ));
    f.run_until_idle(u64::MAX);
    assert_eq!(psns(&f)[..6], [0, 1, 3, 4, 5, 2]);
    let r = rx(&f);
    let late = r.arrivals.iter().find(|a| a.psn == Some(2)).unwrap();
    assert_eq!(late.time_ns, 2_000 + 100 + 3_500);
    let bad: Vec<_> = r.arrivals.iter().filter(|a| !a.icrc_ok).collect();
    assert_eq!(bad.len(), 1);
    // The corrupted bit may be in the BTH itself, so identify the frame by its time.
    assert_eq!(bad[0].time_ns, 7_100);
    assert_eq!(f.stats(tx_id(&f), Direction::Up).delayed, 1);
}

#[test]
fn ping_retransmits_after_its_timeout() {
    let mut f = Fabric::new(0);
    let cfg = LinkConfig::new(1_000, GBPS10);
    let p = f.add_node(
        Toy::Pinger(Pinger::new(a(), b(), 5, 50_000, 100)),
        a().mac,
        cfg.clone(),
    );
    let q = f.add_node(Toy::Ponger(Ponger::new(b(), a(), 100)), b().mac, cfg);
    // Lose the first transmission of ping 2, and the first echo of ping 3.
    f.add_rule(Rule::new(
        Match {
            psn: Some(2),
            from: Some(p),
            nth: Some(1),
            ..Default::default()
        },
        Action::Drop,
    ));
    f.add_rule(Rule::new(
        Match {
            psn: Some(3),
            from: Some(q),
            nth: Some(1),
            ..Default::default()
        },
        Action::Drop,
    ));
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    let pinger = f.node(p).as_pinger().unwrap();
    assert!(pinger.done());
    assert_eq!(pinger.retransmits, 2);
    // 166-byte frames (14 + 20 + 8 + 12 + 8 + 100 + 4): 133 ns to serialise at 10 Gb/s (132.8,
    // rounded up); one way = 2 * (133 + 1000) = 2266 ns; a round trip 4532 ns.
    let rtt = 4_532;
    assert_eq!(pinger.rtts, [rtt; 5]);
    let ping2_sent = 2 * rtt;
    let ping3_sent = ping2_sent + 50_000 + rtt;
    assert_eq!(
        pinger.timeouts_at,
        [ping2_sent + 50_000, ping3_sent + 50_000]
    );
    assert_eq!(f.node(q).as_ponger().unwrap().echoed, 6);
}

/// Ping/pong and two senders to one receiver over links with every fault on.
fn chaos(seed: u64) -> (u64, Vec<u64>) {
    let faults = Faults {
        loss: 0.05,
        dup: 0.05,
        reorder: 0.05,
        reorder_delay_ns: 7_000,
        corrupt: 0.02,
        delay_ns: 100,
        jitter_ns: 900,
        down: vec![(300_000, 320_000)],
        ..Faults::none()
    };
    let cfg = LinkConfig::new(800, GBPS10)
        .with_jitter(200)
        .with_faults(faults);
    let mut f = Fabric::new(seed);
    let (c, d) = (Addr::host(3), Addr::host(4));
    f.add_node(
        Toy::Pinger(Pinger::new(a(), b(), 50, 20_000, 64)),
        a().mac,
        cfg.clone(),
    );
    f.add_node(Toy::Ponger(Ponger::new(b(), a(), 64)), b().mac, cfg.clone());
    f.add_node(
        Toy::Sender(UdSender::new(c, d, 400, 512).paced(700)),
        c.mac,
        cfg.clone(),
    );
    let e = Addr::host(5);
    f.add_node(
        Toy::Sender(UdSender::new(e, d, 400, 900)),
        e.mac,
        cfg.clone(),
    );
    f.add_node(Toy::Receiver(Receiver::new()), d.mac, cfg);
    assert_eq!(f.drive_bounded(1_000_000), RunOutcome::Idle);
    let t = f.totals();
    (
        f.trace_hash().expect("trace hash on"),
        vec![
            t.delivered_frames,
            t.links.dropped_loss,
            t.links.duplicated,
            t.links.reordered,
            t.links.corrupted,
            t.links.dropped_link_down,
            f.now(),
        ],
    )
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let (h1, s1) = chaos(42);
    let (h2, s2) = chaos(42);
    assert_eq!(h1, h2);
    assert_eq!(s1, s2);
    let (h3, _) = chaos(43);
    assert_ne!(h1, h3);
    // Every fault actually happened.
    assert!(s1[1..6].iter().all(|&c| c > 0), "{s1:?}");
}

#[test]
fn posting_work_through_node_mut_is_picked_up() {
    let mut f = one_way(
        0,
        UdSender::new(a(), b(), 0, 8),
        LinkConfig::ideal(),
        LinkConfig::ideal(),
    );
    let tx = tx_id(&f);
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    assert_eq!(rx(&f).frames, 0);
    f.run_until(1_000);
    f.node_mut(tx).as_sender_mut().unwrap().add(3);
    f.run_until_idle(u64::MAX);
    assert_eq!(psns(&f), [0, 1, 2]);
    assert!(rx(&f).arrivals.iter().all(|a| a.time_ns == 1_000));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn random_configurations_never_panic_and_conserve_frames(
        seed in any::<u64>(),
        latency in 0u64..5_000,
        bw in prop_oneof![Just(0u64), 1_000_000u64..400_000_000_000],
        mtu in prop_oneof![Just(usize::MAX), 0usize..1_200],
        jitter in 0u64..10_000,
        loss in 0.0f64..0.5,
        dup in 0.0f64..0.5,
        reorder in prop_oneof![Just(0.0f64), 0.0f64..0.5],
        reorder_delay in 0u64..50_000,
        corrupt in 0.0f64..0.5,
        down in proptest::collection::vec((0u64..200_000, 0u64..50_000), 0..3),
        count in 0u64..150,
        payload in 0usize..1_100,
        pace in 0u64..3_000,
        switch_latency in 0u64..2_000,
        rule_psn in 0u32..150,
        rule_nth in proptest::option::of(1u32..3),
        rule_action in 0u8..4,
        burst in proptest::option::of((0.0f64..0.2, 0.0f64..1.0, 0.0f64..1.0)),
    ) {
        let faults = Faults {
            loss, dup, reorder, reorder_delay_ns: reorder_delay, corrupt,
            delay_ns: latency / 2,
            jitter_ns: jitter / 2,
            down: down.iter().map(|&(s, l)| (s, s + l)).collect(),
            burst: burst.map(|(enter, leave, loss)| BurstLoss { enter, leave, loss }),
        };
        let cfg = LinkConfig { latency_ns: latency, bandwidth_bps: bw, mtu, jitter_ns: jitter, faults };
        let mut f = Fabric::new(seed);
        f.set_switch_latency(switch_latency);
        let (c, d, e) = (Addr::host(3), Addr::host(4), Addr::host(5));
        let mut ids = vec![
            f.add_node(Toy::Sender(UdSender::new(a(), d, count, payload).paced(pace)), a().mac, cfg.clone()),
            f.add_node(Toy::Sender(UdSender::new(c, d, count, payload / 2)), c.mac, cfg.clone()),
            f.add_node(Toy::Pinger(Pinger::new(b(), e, 3, 30_000, payload)), b().mac, cfg.clone()),
            f.add_node(Toy::Ponger(Ponger::new(e, b(), 10)), e.mac, cfg.clone()),
        ];
        let r = f.add_node(Toy::Receiver(Receiver::new()), d.mac, cfg.clone());
        ids.push(r);
        let action = match rule_action {
            0 => Action::Drop,
            1 => Action::Duplicate,
            2 => Action::Corrupt,
            _ => Action::Delay(5_000),
        };
        f.add_rule(Rule::new(Match { psn: Some(rule_psn), nth: rule_nth, ..Default::default() }, action));
        // A pinger whose pings cannot get through (MTU, loss) retries for ever: bound by events.
        let out = f.drive_bounded(30_000);
        prop_assert!(out == RunOutcome::Idle || out == RunOutcome::EventLimit);
        for &id in &ids {
            for dir in [Direction::Up, Direction::Down] {
                let s = f.stats(id, dir);
                prop_assert!(s.sent_frames + s.duplicated >= s.delivered_frames + s.dropped());
            }
        }
        let t = f.totals();
        prop_assert_eq!(
            t.links.sent_frames + t.links.duplicated,
            t.links.delivered_frames + t.links.dropped() + f.frames_in_flight() as u64
        );
        if out == RunOutcome::Idle {
            prop_assert_eq!(f.frames_in_flight(), 0);
            prop_assert_eq!(f.node(ids[0]).as_sender().unwrap().sent(), count);
        }
        // FIFO: without the reorder fault and delay rules, each sender's intact frames reach
        // the receiver in PSN order (a duplicate right behind its original).
        let rcv = f.node(r).as_receiver().unwrap();
        prop_assert_eq!(rcv.frames, t.delivered_frames - delivered_elsewhere(&f, &ids[..4]));
        if reorder == 0.0 && rule_action != 3 {
            for src in [a().qpn, c.qpn] {
                let seq: Vec<u32> = rcv.arrivals.iter()
                    .filter(|x| x.icrc_ok && x.src_qp == Some(src))
                    .map(|x| x.psn.unwrap())
                    .collect();
                prop_assert!(seq.windows(2).all(|w| w[0] <= w[1]), "{:?}", seq);
            }
        }
    }
}

fn delivered_elsewhere(f: &Fabric<Toy>, ids: &[NodeId]) -> u64 {
    ids.iter()
        .map(|&id| f.stats(id, Direction::Down).delivered_frames)
        .sum()
}

#[test]
fn icrc_still_checks_out_on_clean_links() {
    let mut f = one_way(
        0,
        UdSender::new(a(), b(), 10, 1_000),
        LinkConfig::default(),
        LinkConfig::default(),
    );
    f.run_until_idle(u64::MAX);
    for arr in &rx(&f).arrivals {
        assert!(arr.icrc_ok);
        assert_eq!(arr.len, 14 + 20 + 8 + 12 + 8 + 1_000 + 4);
    }
    let mut buf = Vec::new();
    write_ud_send(&a(), &b(), 0, &[0; 1_000], &mut buf);
    assert!(RocePacket::parse_verified(&buf).is_ok());
}

#[test]
fn switching_the_trace_hash_off_changes_nothing_else() {
    let lossy = LinkConfig {
        faults: Faults {
            loss: 0.1,
            ..Faults::none()
        },
        ..LinkConfig::default()
    };
    let run = |hash: bool| {
        let mut f = one_way(
            7,
            UdSender::new(a(), b(), 200, 64),
            lossy.clone(),
            LinkConfig::ideal(),
        );
        if !hash {
            f.without_trace_hash();
        }
        f.kick(tx_id(&f));
        f.run_until_idle(u64::MAX);
        (f.trace_hash(), psns(&f), f.events_processed(), f.now())
    };
    let (with, without) = (run(true), run(false));
    assert!(with.0.is_some());
    assert_eq!(without.0, None);
    assert_eq!(
        (&with.1, with.2, with.3),
        (&without.1, without.2, without.3)
    );
    assert!(with.1.len() < 200, "the loss applied");
}
