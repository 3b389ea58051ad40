//! Measures how fast the fabric runs: events and delivered frames per second of wall time.
//!
//! `cargo run --release -p softib-fabric --example throughput [frames_per_sender]`
//!
//! Four paced UD senders (1 KiB payloads, each at line rate on 10 Gb/s links) stream to four
//! counting receivers with light loss, duplication and jitter, next to a ping / pong pair. The
//! senders build every frame with `softib_wire::roce::build` (ICRC included), so the figure
//! includes that endpoint work; the receivers only count.

use std::time::Instant;

use softib_fabric::toy::{Addr, Pinger, Ponger, Receiver, Toy, UdSender};
use softib_fabric::{Fabric, Faults, LinkConfig, RunOutcome};

fn main() {
    let per_sender: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(250_000);
    let cfg = LinkConfig::new(1_000, 10_000_000_000)
        .with_jitter(100)
        .with_faults(Faults {
            loss: 0.001,
            dup: 0.001,
            ..Faults::none()
        });
    let mut f = Fabric::new(1);
    for i in 0..4u8 {
        let (src, dst) = (Addr::host(10 + i), Addr::host(20 + i));
        // 1090-byte frames take 872 ns at 10 Gb/s.
        let s = UdSender::new(src, dst, per_sender, 1024).paced(872);
        f.add_node(Toy::Sender(s), src.mac, cfg.clone());
        f.add_node(Toy::Receiver(Receiver::counting()), dst.mac, cfg.clone());
    }
    let (p, q) = (Addr::host(1), Addr::host(2));
    f.add_node(
        Toy::Pinger(Pinger::new(p, q, 100_000, 1_000_000, 64)),
        p.mac,
        cfg.clone(),
    );
    f.add_node(Toy::Ponger(Ponger::new(q, p, 64)), q.mac, cfg);

    let start = Instant::now();
    let out = f.drive_bounded(u64::MAX);
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(out, RunOutcome::Idle);
    let t = f.totals();
    let events = f.events_processed();
    println!(
        "{events} events, {} frames delivered, {:.3} s virtual, in {secs:.3} s: \
         {:.2} M events/s, {:.2} M frames/s (trace hash {:016x})",
        t.delivered_frames,
        f.now() as f64 / 1e9,
        events as f64 / secs / 1e6,
        t.delivered_frames as f64 / secs / 1e6,
        f.trace_hash().expect("trace hash on"),
    );
}
