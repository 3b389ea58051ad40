//! Recorded runs: the exact outcome (trace hash, event count, clock, every counter, what the
//! endpoints saw, a pcap capture) of scenarios that exercise every path of the fabric, pinned to
//! the values the fabric produced when they were recorded. Any change to event order, random
//! draws or timing changes these digests; the fabric's internals may change only as long as
//! they stay put (see "Determinism" in the crate docs).

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use softib_fabric::toy::{write_ud_send, Addr, Pinger, Ponger, Receiver, Toy, UdSender};
use softib_fabric::{
    Action, BurstLoss, Capture, Direction, Endpoint, Fabric, Faults, LinkConfig, LinkStats, Match,
    Rule, RunOutcome,
};

const GBPS10: u64 = 10_000_000_000;

/// FNV-1a over 64-bit words: a digest of a run's observable outcome.
#[derive(Default)]
struct Digest(u64, Vec<u64>);

impl Digest {
    fn new() -> Self {
        Digest(0xCBF2_9CE4_8422_2325, Vec::new())
    }
    fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    fn stats(&mut self, s: &LinkStats) {
        for w in [
            s.sent_frames,
            s.sent_bytes,
            s.delivered_frames,
            s.delivered_bytes,
            s.dropped_loss,
            s.dropped_link_down,
            s.dropped_mtu,
            s.dropped_rule,
            s.duplicated,
            s.reordered,
            s.delayed,
            s.corrupted,
            s.max_queue_delay_ns,
        ] {
            self.word(w);
        }
    }
    /// Everything the fabric reports about itself.
    fn fabric<E: Endpoint>(&mut self, f: &Fabric<E>) {
        self.word(f.trace_hash().expect("trace hash on"));
        self.word(f.events_processed());
        self.word(f.now());
        self.word(f.frames_in_flight() as u64);
        // Kept for the record: the headline numbers, readable in a failure message.
        self.1.extend([
            f.trace_hash().expect("trace hash on"),
            f.events_processed(),
            f.now(),
        ]);
        let t = f.totals();
        for w in [
            t.transmitted_frames,
            t.transmitted_bytes,
            t.delivered_frames,
            t.delivered_bytes,
            t.switch.forwarded,
            t.switch.flooded,
            t.switch.unknown_dst,
            t.switch.malformed,
        ] {
            self.word(w);
        }
        self.stats(&t.links);
        for (id, _) in f.nodes() {
            for d in [Direction::Up, Direction::Down] {
                self.stats(f.stats(id, d));
            }
        }
    }
    fn receiver(&mut self, r: &Receiver) {
        self.word(r.frames);
        self.word(r.bytes);
        self.word(r.bad);
        for a in &r.arrivals {
            self.word(a.time_ns);
            self.word(a.psn.map_or(u64::MAX, u64::from));
            self.word(a.src_qp.map_or(u64::MAX, u64::from));
            self.word(u64::from(a.icrc_ok));
            self.word(a.len as u64);
        }
    }
    fn toy(&mut self, t: &Toy) {
        match t {
            Toy::Sender(s) => {
                self.word(s.sent());
                self.word(s.received);
            }
            Toy::Receiver(r) => self.receiver(r),
            Toy::Pinger(p) => {
                self.word(u64::from(p.completed()));
                self.word(u64::from(p.retransmits));
                for &x in p.rtts.iter().chain(&p.timeouts_at) {
                    self.word(x);
                }
            }
            Toy::Ponger(p) => self.word(p.echoed),
        }
    }
    fn toys(&mut self, f: &Fabric<Toy>) {
        self.fabric(f);
        for (_, t) in f.nodes() {
            self.toy(t);
        }
    }
}

#[derive(Clone, Default)]
struct SharedBuf(Rc<RefCell<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn all_faults() -> Faults {
    Faults {
        loss: 0.04,
        burst: Some(BurstLoss {
            enter: 0.02,
            leave: 0.3,
            loss: 0.5,
        }),
        dup: 0.05,
        reorder: 0.05,
        reorder_delay_ns: 6_000,
        corrupt: 0.03,
        delay_ns: 150,
        jitter_ns: 700,
        down: vec![(200_000, 215_000), (400_000, 400_500)],
    }
}

/// Every fault on every link, ping / pong, paced and unpaced senders (with `payload`-byte
/// frames), rules, a switch latency and a full pcap capture.
fn chaos(seed: u64, payload: usize) -> Digest {
    let mut d = Digest::new();
    let cfg = LinkConfig::new(800, GBPS10)
        .with_jitter(250)
        .with_faults(all_faults());
    let mut f = Fabric::new(seed);
    let cap = SharedBuf::default();
    f.capture_pcap(Box::new(cap.clone()), Capture::DeliveredAndSent)
        .unwrap();
    f.set_switch_latency(120);
    let (a, b, c, e, r) = (
        Addr::host(1),
        Addr::host(2),
        Addr::host(3),
        Addr::host(5),
        Addr::host(4),
    );
    let p = f.add_node(
        Toy::Pinger(Pinger::new(a, b, 60, 15_000, 64)),
        a.mac,
        cfg.clone(),
    );
    let q = f.add_node(Toy::Ponger(Ponger::new(b, a, 64)), b.mac, cfg.clone());
    f.add_node(
        Toy::Sender(UdSender::new(c, r, 500, payload * 512 / 900).paced(650)),
        c.mac,
        cfg.clone(),
    );
    f.add_node(
        Toy::Sender(UdSender::new(e, r, 500, payload)),
        e.mac,
        cfg.clone(),
    );
    f.add_node_with(
        Toy::Receiver(Receiver::new()),
        r.mac,
        cfg.clone(),
        cfg.clone().with_mtu(payload + 100),
    );
    f.add_rule(Rule::new(
        Match {
            psn: Some(3),
            nth: Some(2),
            ..Default::default()
        },
        Action::Drop,
    ));
    f.add_rule(Rule::new(
        Match {
            psn: Some(17),
            ..Default::default()
        },
        Action::Delay(4_000),
    ));
    f.add_rule(Rule::new(
        Match {
            psn: Some(40),
            hop: Direction::Down,
            ..Default::default()
        },
        Action::Duplicate,
    ));
    f.add_rule(Rule::new(
        Match {
            dest_qp: Some(b.qpn),
            from: Some(p),
            to: Some(q),
            nth: Some(5),
            ..Default::default()
        },
        Action::Corrupt,
    ));
    assert_eq!(f.drive_bounded(2_000_000), RunOutcome::Idle);
    d.toys(&f);
    assert!(f.finish_pcap().unwrap().is_some());
    d.bytes(&cap.0.borrow());
    d
}

/// The raw flood: one unpaced sender, more frames than one poll may emit.
fn flood(frames: u64, payload: usize, link: LinkConfig) -> Digest {
    let mut d = Digest::new();
    let mut f = Fabric::new(3);
    let (a, b) = (Addr::host(1), Addr::host(2));
    f.add_node(
        Toy::Sender(UdSender::new(a, b, frames, payload)),
        a.mac,
        link.clone(),
    );
    f.add_node(Toy::Receiver(Receiver::counting()), b.mac, link);
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    d.toys(&f);
    d
}

/// Sends a fixed list of (time, frame); records what arrives and when timeouts fire.
#[derive(Default)]
struct Script {
    sends: Vec<(u64, Vec<u8>)>,
    next: usize,
    timers: Vec<u64>,
    log: Vec<u64>,
}

impl Endpoint for Script {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        self.log.push(now_ns);
        self.log.push(frame.len() as u64);
        self.log.push(
            frame
                .iter()
                .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b)),
        );
    }
    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        match self.sends.get(self.next) {
            Some((t, f)) if *t <= now_ns => {
                out.extend_from_slice(f);
                self.next += 1;
                true
            }
            _ => false,
        }
    }
    fn poll_timeout(&self) -> Option<u64> {
        let send = self.sends.get(self.next).map(|s| s.0);
        let timer = self.timers.first().copied();
        match (send, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn handle_timeout(&mut self, now_ns: u64) {
        self.log.push(u64::MAX - now_ns);
        if self.timers.first().is_some_and(|&t| t <= now_ns) {
            self.timers.remove(0);
        }
    }
}

fn raw_frame(dst: [u8; 6], src: [u8; 6], len: usize, tag: u8) -> Vec<u8> {
    let mut f = vec![tag; len];
    if len < 14 {
        return f;
    }
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12] = 0x88;
    f[13] = 0xB5;
    f
}

fn mac(n: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, n]
}

/// Broadcast, unknown destinations, malformed frames, MTU drops, moving and cancelled
/// timeouts, configuration changes between runs, `step`, `run_until`, `kick` and time limits.
fn driven(seed: u64) -> Digest {
    let mut d = Digest::new();
    let mut f = Fabric::new(seed);
    let cfg = LinkConfig::new(700, GBPS10)
        .with_mtu(1_200)
        .with_jitter(90)
        .with_faults(Faults {
            loss: 0.1,
            dup: 0.1,
            reorder: 0.1,
            reorder_delay_ns: 3_000,
            corrupt: 0.1,
            ..Faults::none()
        });
    let ids: Vec<_> = (1..=4u8)
        .map(|n| f.add_node(Script::default(), mac(n), cfg.clone()))
        .collect();
    for (k, &id) in ids.iter().enumerate() {
        let k = k as u8;
        let s = f.node_mut(id);
        s.sends = (0..300u64)
            .map(|i| {
                let dst = match i % 7 {
                    0 => [0xFF; 6],
                    1 => mac(9),
                    _ => mac(((u64::from(k) + 1 + i) % 4) as u8 + 1),
                };
                let len = match i % 11 {
                    0 => 5,
                    1 => 1_300,
                    _ => 60 + (i as usize * 37) % 900,
                };
                (
                    i * 400 + u64::from(k) * 33,
                    raw_frame(dst, mac(k + 1), len, i as u8),
                )
            })
            .collect();
        s.timers = vec![10_000 * u64::from(k + 1), 90_000];
    }
    assert!(f.step());
    d.word(f.next_event_time().unwrap_or(u64::MAX));
    f.run_until(30_000);
    f.node_mut(ids[0]).timers = vec![35_000, 95_000];
    f.run_until(33_000);
    f.node_mut(ids[1]).timers = vec![31_000];
    f.node_mut(ids[2]).timers.clear();
    f.link_mut(ids[3], Direction::Down).latency_ns = 100;
    f.link_mut(ids[0], Direction::Up).faults.loss = 0.3;
    f.set_switch_latency(250);
    for _ in 0..500 {
        f.step();
    }
    assert_eq!(f.run_until_idle(50_000), RunOutcome::TimeLimit);
    f.kick(ids[1]);
    f.run_for(1_000);
    assert_eq!(f.drive_bounded(1_000_000), RunOutcome::Idle);
    d.fabric(&f);
    for (_, s) in f.nodes() {
        for &w in &s.log {
            d.word(w);
        }
    }
    d
}

/// Frames larger than the fabric's storage chunks, back to back with small ones, unicast and
/// broadcast, on plain links and on links that duplicate and hold frames back.
fn large_frames(seed: u64) -> Digest {
    let mut d = Digest::new();
    let mut f = Fabric::new(seed);
    let plain = LinkConfig::new(300, 40_000_000_000).with_mtu(usize::MAX);
    let faulty = plain.clone().with_faults(Faults {
        dup: 0.3,
        reorder: 0.3,
        reorder_delay_ns: 50_000,
        ..Faults::none()
    });
    let ids = [
        f.add_node(Script::default(), mac(1), plain.clone()),
        f.add_node(Script::default(), mac(2), plain.clone()),
        f.add_node_with(Script::default(), mac(3), plain, faulty),
    ];
    let sizes = [
        70_000usize,
        10,
        200_000,
        65_512,
        65_536 - 24,
        65_536 - 23,
        14,
        300_000,
        1_500,
        64 * 1024 * 4 + 1,
    ];
    for (k, &id) in ids.iter().enumerate() {
        let k = k as u8;
        f.node_mut(id).sends = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let dst = if i % 4 == 3 {
                    [0xFF; 6]
                } else {
                    mac((k + 1 + i as u8) % 3 + 1)
                };
                (i as u64 * 3_000, raw_frame(dst, mac(k + 1), n, i as u8 ^ k))
            })
            .collect();
    }
    assert_eq!(f.drive_bounded(1_000_000), RunOutcome::Idle);
    d.fabric(&f);
    for (_, s) in f.nodes() {
        for &w in &s.log {
            d.word(w);
        }
    }
    d
}

fn check(name: &str, d: Digest, want: u64) {
    assert_eq!(
        d.0, want,
        "{name}: digest {:#018x}, headline (trace hash, events, now) {:x?}",
        d.0, d.1
    );
}

#[test]
fn chaos_runs_are_pinned() {
    check("chaos 1", chaos(1, 900), 0x41bc_d046_dc7a_c8b5);
    check("chaos 42", chaos(42, 900), 0x6961_e6c8_b625_31e9);
    check(
        "chaos 7, large frames",
        chaos(7, 2_900),
        0xbfc1_f9b1_93af_d792,
    );
}

#[test]
fn floods_are_pinned() {
    check(
        "flood 64 B",
        flood(70_000, 64, LinkConfig::default()),
        0x48af_a853_c34e_751c,
    );
    check(
        "flood with faults",
        flood(
            3_000,
            300,
            LinkConfig::new(1_000, GBPS10)
                .with_jitter(40)
                .with_faults(all_faults()),
        ),
        0x5273_dde0_6ea3_33f6,
    );
    check(
        "flood on ideal links",
        flood(2_000, 100, LinkConfig::ideal()),
        0x5141_884b_00eb_9bd2,
    );
}

#[test]
fn driven_runs_are_pinned() {
    check("driven 5", driven(5), 0x1ce6_734e_1e2f_f4a4);
    check("driven 6", driven(6), 0x93cc_2ea2_0e49_8ecf);
}

#[test]
fn large_frame_runs_are_pinned() {
    check("large frames 1", large_frames(1), 0x59f2_efb9_4ee8_0278);
    check("large frames 2", large_frames(2), 0x21e3_36cc_a5af_e3dc);
}

#[test]
fn a_ud_frame_is_what_it_was() {
    let mut out = Vec::new();
    write_ud_send(&Addr::host(1), &Addr::host(2), 77, &[9; 10], &mut out);
    let mut d = Digest::new();
    d.bytes(&out);
    check("UD frame", d, 0x36ad_c356_9b02_410d);
}
