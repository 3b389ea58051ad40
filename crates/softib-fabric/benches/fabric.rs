//! Fabric throughput, each figure next to baselines measured in the same run (the machine is
//! shared and noisy; bare rates mean little):
//!
//! * **raw**: 64-byte UD SENDs from a toy [`UdSender`] to a counting [`Receiver`] over two
//!   default links (the workload of softib-sim's `raw_frame_rate`): frames delivered per wall
//!   second — target ≥ 6 M/s. Every frame is built with `softib_wire::roce::build` (ICRC
//!   included) by the sender, so this includes that endpoint work. The sender emits all its
//!   frames at once, so they are all in flight together: a fresh fabric first has to get that
//!   memory from the system (page faults, counted here as they are in softib-sim's figure).
//! * **raw, warm**: the same flood sent a second time through the same fabric, whose storage
//!   is then already in place, as in a long simulation.
//! * **build**: the same frames built into a reused buffer without any fabric: the endpoint's
//!   share of the raw figure.
//! * **template**: the raw workload with a sender that copies one prebuilt frame instead of
//!   building each one: the fabric's own cost per frame.
//! * **memcpy**: copying the same frame bytes into a ring of buffers, as the floor of what moving
//!   a frame can cost.
//!
//! `cargo bench -p softib-fabric --bench fabric [-- --quick]`; `-- --only raw [frames [rounds]]`
//! (or `warm`, `template`, `build`) runs one workload (once by default, for profilers such as
//! callgrind) and prints the median rate.

use std::hint::black_box;
use std::time::Instant;

use softib_fabric::toy::{write_ud_send, Addr, Receiver, Toy, UdSender};
use softib_fabric::{Endpoint, Fabric, LinkConfig, RunOutcome};

const PAYLOAD: usize = 64;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per frame of the raw workload; checks that every frame arrived.
fn raw(frames: u64) -> f64 {
    let mut f: Fabric<Toy> = Fabric::new(1);
    let (a, b) = (Addr::host(1), Addr::host(2));
    let tx = f.add_node(
        Toy::Sender(UdSender::new(a, b, frames, PAYLOAD)),
        a.mac,
        LinkConfig::default(),
    );
    let rx = f.add_node(
        Toy::Receiver(Receiver::counting()),
        b.mac,
        LinkConfig::default(),
    );
    let t = Instant::now();
    let out = f.run_until_idle(u64::MAX);
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(out, RunOutcome::Idle);
    assert_eq!(f.node(tx).as_sender().map(|s| s.sent()), Some(frames));
    assert_eq!(f.node(rx).as_receiver().map(|r| r.frames), Some(frames));
    black_box(f.trace_hash().expect("trace hash on"));
    dt / frames as f64
}

/// Seconds per frame of the raw workload run a second time on the same fabric.
fn raw_warm(frames: u64) -> f64 {
    let mut f: Fabric<Toy> = Fabric::new(1);
    let (a, b) = (Addr::host(1), Addr::host(2));
    let tx = f.add_node(
        Toy::Sender(UdSender::new(a, b, frames, PAYLOAD)),
        a.mac,
        LinkConfig::default(),
    );
    let rx = f.add_node(
        Toy::Receiver(Receiver::counting()),
        b.mac,
        LinkConfig::default(),
    );
    assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
    if let Some(s) = f.node_mut(tx).as_sender_mut() {
        s.add(frames);
    }
    let t = Instant::now();
    let out = f.run_until_idle(u64::MAX);
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(out, RunOutcome::Idle);
    assert_eq!(f.node(rx).as_receiver().map(|r| r.frames), Some(2 * frames));
    dt / frames as f64
}

/// Seconds per frame of building the raw workload's frames alone.
fn build(frames: u64) -> f64 {
    let (a, b) = (Addr::host(1), Addr::host(2));
    let payload: Vec<u8> = (0..PAYLOAD).map(|i| i as u8).collect();
    let mut out = Vec::new();
    let t = Instant::now();
    for psn in 0..frames {
        write_ud_send(&a, &b, psn as u32, black_box(&payload), &mut out);
        black_box(&mut out);
    }
    t.elapsed().as_secs_f64() / frames as f64
}

/// Sends `left` copies of one frame, as fast as it is polled; or counts what arrives.
enum Template {
    Sender { frame: Vec<u8>, left: u64 },
    Receiver { frames: u64 },
}

impl Endpoint for Template {
    fn handle_frame(&mut self, _now_ns: u64, _frame: &[u8]) {
        if let Template::Receiver { frames } = self {
            *frames += 1;
        }
    }
    fn poll_transmit(&mut self, _now_ns: u64, out: &mut Vec<u8>) -> bool {
        match self {
            Template::Sender { frame, left } if *left > 0 => {
                *left -= 1;
                out.extend_from_slice(frame);
                true
            }
            _ => false,
        }
    }
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
    fn handle_timeout(&mut self, _now_ns: u64) {}
}

/// Seconds per frame of the raw workload with a sender that copies a prebuilt frame.
fn template(frames: u64) -> f64 {
    let (a, b) = (Addr::host(1), Addr::host(2));
    let mut frame = Vec::new();
    write_ud_send(&a, &b, 0, &[0x5A; PAYLOAD], &mut frame);
    let mut f = Fabric::new(1);
    f.add_node(
        Template::Sender {
            frame,
            left: frames,
        },
        a.mac,
        LinkConfig::default(),
    );
    let rx = f.add_node(
        Template::Receiver { frames: 0 },
        b.mac,
        LinkConfig::default(),
    );
    let t = Instant::now();
    let out = f.run_until_idle(u64::MAX);
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(out, RunOutcome::Idle);
    assert!(matches!(f.node(rx), Template::Receiver { frames: n } if *n == frames));
    dt / frames as f64
}

/// Seconds per frame of copying the raw workload's frame into a ring of buffers.
fn memcpy(frames: u64) -> f64 {
    let (a, b) = (Addr::host(1), Addr::host(2));
    let mut frame = Vec::new();
    write_ud_send(&a, &b, 0, &[0x5A; PAYLOAD], &mut frame);
    let mut ring: Vec<Vec<u8>> = (0..1024).map(|_| Vec::with_capacity(frame.len())).collect();
    let t = Instant::now();
    for i in 0..frames as usize {
        let slot = &mut ring[i % 1024];
        slot.clear();
        slot.extend_from_slice(black_box(&frame));
        black_box(slot);
    }
    t.elapsed().as_secs_f64() / frames as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--only") {
        let what = args.get(i + 1).map(String::as_str).unwrap_or("raw");
        let frames = args
            .get(i + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(300_000);
        let rounds = args.get(i + 3).and_then(|n| n.parse().ok()).unwrap_or(1);
        let per = median(
            (0..rounds)
                .map(|_| match what {
                    "raw" => raw(frames),
                    "warm" => raw_warm(frames),
                    "template" => template(frames),
                    "build" => build(frames),
                    other => panic!("unknown workload {other}"),
                })
                .collect(),
        );
        println!("{what}: {frames} frames, {:.2} M frames/s", 1e-6 / per);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick") || cfg!(debug_assertions);
    if cfg!(debug_assertions) {
        eprintln!("note: debug build; figures are meaningless (use cargo bench)");
    }
    let (rounds, frames) = if quick { (3, 50_000) } else { (9, 300_000) };
    let (mut r, mut w, mut bld, mut tpl, mut cpy) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        r.push(raw(frames));
        w.push(raw_warm(frames));
        bld.push(build(frames));
        tpl.push(template(frames));
        cpy.push(memcpy(frames));
    }
    let (r, w, bld, tpl, cpy) = (median(r), median(w), median(bld), median(tpl), median(cpy));
    println!(
        "{:<44} {:>12} {:>10} {:>10}",
        "workload (64-byte payload frames)", "M frames/s", "ns/frame", "vs memcpy"
    );
    for (name, per) in [
        ("raw: toy UD sender -> counting receiver", r),
        ("raw, warm: the same, second flood", w),
        ("build: the same frames built, no fabric", bld),
        ("template: prebuilt frame through the fabric", tpl),
        ("memcpy: the frame copied into a ring", cpy),
    ] {
        println!(
            "{name:<44} {:>12.2} {:>10.1} {:>10.3}",
            1e-6 / per,
            per * 1e9,
            cpy / per
        );
    }
    println!(
        "fabric share of raw: {:.1} ns/frame (raw - build), {:.1} warm; raw vs build ratio \
         {:.3}, {:.3} warm; target raw >= 6 M frames/s: {} ({} warm)",
        (r - bld) * 1e9,
        (w - bld) * 1e9,
        bld / r,
        bld / w,
        if 1e-6 / r >= 6.0 { "met" } else { "not met" },
        if 1e-6 / w >= 6.0 { "met" } else { "not met" },
    );
}
