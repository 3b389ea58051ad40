//! Simulator benchmarks, each a ratio against a baseline measured in the same run (the machine
//! is shared and noisy; bare times mean little):
//!
//! * RC WRITE of 1 MiB messages through the simulator (every packet built, ICRC'd, parsed and
//!   checked; every byte verified) against a plain memcpy of the same bytes — target ≥ 0.3×.
//! * 64-byte RC SENDs per wall second on one core — target ≥ 3 M/s — against raw 64-byte
//!   frames per second through the same fabric (toy UD sender to a counting receiver).
//! * 64-byte UD SENDs per wall second (every datagram verified at the receiver) against the
//!   64-byte RC SEND figure of the same run (ratio = UD rate / RC rate).
//!
//! `cargo bench -p softib-sim --bench sim [-- --quick]`. Idle-QP memory is measured by the
//! `qp_memory` test of softib-core.

use std::hint::black_box;
use std::time::Instant;

use softib_core::verbs::types::Mtu;
use softib_fabric::toy::{Addr, Receiver, Toy, UdSender};
use softib_fabric::{Fabric, LinkConfig};
use softib_sim::{run, OpKind, Service, SimConfig};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per byte of memcpy of `len`-byte messages from one region of `slots` slots to
/// another, slot by slot, as the simulator moves WRITE data between its two hosts' regions.
fn memcpy_rate(len: usize, slots: usize, total: usize) -> f64 {
    let src = vec![7u8; len * slots];
    let mut dst = vec![0u8; len * slots];
    let t = Instant::now();
    let mut done = 0;
    let mut i = 0;
    while done < total {
        let s = (i % slots) * len;
        dst[s..s + len].copy_from_slice(black_box(&src[s..s + len]));
        black_box(&mut dst);
        done += len;
        i += 1;
    }
    t.elapsed().as_secs_f64() / total as f64
}

/// Seconds per frame of raw 64-byte UD SEND frames through the fabric.
fn raw_frame_rate(frames: u64) -> f64 {
    let mut f: Fabric<Toy> = Fabric::new(1);
    let (a, b) = (Addr::host(1), Addr::host(2));
    let tx = f.add_node(
        Toy::Sender(UdSender::new(a, b, frames, 64)),
        a.mac,
        LinkConfig::default(),
    );
    f.add_node(
        Toy::Receiver(Receiver::counting()),
        b.mac,
        LinkConfig::default(),
    );
    f.kick(tx);
    let t = Instant::now();
    f.run_until_idle(u64::MAX);
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(f.node(tx).as_sender().map(|s| s.sent()), Some(frames));
    dt / frames as f64
}

fn sim_wall(cfg: &SimConfig) -> f64 {
    let r = run(cfg, None, &mut |_, _| {}).expect("scenario runs");
    assert!(r.verified, "{}", r.to_text());
    r.wall_time_s
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || !cfg!(not(debug_assertions));
    let rounds = if quick { 3 } else { 9 };
    let write_ops: u64 = if quick { 16 } else { 128 };
    let send_ops: u64 = if quick { 20_000 } else { 300_000 };
    if cfg!(debug_assertions) {
        eprintln!("note: debug build; figures are meaningless (use cargo bench)");
    }
    let write = SimConfig {
        op: OpKind::Write,
        size: 1 << 20,
        ops: write_ops,
        depth: 4,
        // 128 packets of 4 KiB (512 KiB) in flight: far above the path's bandwidth-delay
        // product (about 6 packets at 100 Gb/s and 1 us per link), and small enough that a
        // frame is still in the L2 cache when it is received.
        window_psns: 128,
        timeout: 10,
        mtu: Mtu::Mtu4096,
        ..SimConfig::default()
    };
    let send = SimConfig {
        op: OpKind::Send,
        size: 64,
        ops: send_ops,
        depth: 64,
        window_psns: 256,
        timeout: 10,
        ..SimConfig::default()
    };
    let ud_send = SimConfig {
        service: Service::Ud,
        ..send.clone()
    };
    let (mut w_sim, mut w_cpy, mut s_sim, mut s_raw) = (vec![], vec![], vec![], vec![]);
    let mut u_sim = vec![];
    for _ in 0..rounds {
        let bytes = (write.ops * u64::from(write.size)) as f64;
        w_sim.push(sim_wall(&write) / bytes);
        w_cpy.push(memcpy_rate(
            1 << 20,
            4 * write.depth as usize,
            bytes as usize,
        ));
        s_sim.push(sim_wall(&send) / send.ops as f64);
        s_raw.push(raw_frame_rate(send.ops));
        u_sim.push(sim_wall(&ud_send) / ud_send.ops as f64);
    }
    let us = median(u_sim);
    let (ws, wc, ss, sr) = (median(w_sim), median(w_cpy), median(s_sim), median(s_raw));
    println!(
        "{:<40} {:>14} {:>14} {:>8} {:>10}",
        "benchmark", "subject", "baseline", "ratio", "target"
    );
    println!(
        "{:<40} {:>10.2} GB/s {:>9.2} GB/s {:>8.3} {:>10}",
        "RC WRITE 1 MiB (sim) vs memcpy",
        1e-9 / ws,
        1e-9 / wc,
        wc / ws,
        ">= 0.3"
    );
    println!(
        "{:<40} {:>11.2} M/s {:>10.2} M/s {:>8.3} {:>10}",
        "RC SEND 64 B per wall s vs raw frames",
        1e-6 / ss,
        1e-6 / sr,
        sr / ss,
        ">= 3 M/s"
    );
    println!(
        "{:<40} {:>11.2} M/s {:>10.2} M/s {:>8.3} {:>10}",
        "UD SEND 64 B per wall s vs RC SEND 64 B",
        1e-6 / us,
        1e-6 / ss,
        ss / us,
        "-"
    );
}
