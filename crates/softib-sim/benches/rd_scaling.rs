//! RD's scaling argument, measured: N client QPs on node A talk to each of M server QPs on node
//! B. RC needs N × M connected QPs per node; RD keeps N (and M) QPs and carries every
//! conversation over K EE context pairs. Printed as ratios RD / RC, both measured in this run:
//!
//! * connection-state memory of node A per conversation, from the heap bytes of each kind of
//!   object (RC QP, EE context, RD QP) in RTS with empty queues, weighed by a counting
//!   allocator over 20 000 of each as the `qp_memory` test of softib-core weighs an idle RC
//!   QP: RC N × M QPs, RD N QPs and K EE contexts;
//! * goodput at 0.1 % frame loss on every link direction in the simulator, the same SENDs per
//!   conversation over RC QP pairs or K EE contexts (simulated time: the same on any machine
//!   for a seed; the mean of three seeds).
//!
//! `cargo bench -p softib-sim --bench rd_scaling`.

#[path = "../../softib-core/tests/alloc_count/mod.rs"]
mod alloc_count;

use alloc_count::{retained_by, Counting};
use softib_sim::run;
use softib_sim::scaling::{goodput_config, node, rc_state, rd_eecs, rd_qps};

#[global_allocator]
static GLOBAL: Counting = Counting;

const EECS: [u32; 4] = [1, 4, 16, 64];
const SEEDS: [u64; 3] = [1, 2, 3];

/// Objects weighed per kind: enough that the maps' growth steps average out.
const WEIGHED: u32 = 20_000;

/// Heap bytes per object of each kind (RC QP, EE context, RD QP), each in RTS with empty
/// queues, averaged over [`WEIGHED`] of them on a fresh node.
fn per_object() -> (f64, f64, f64) {
    let weigh = |build: &dyn Fn(&mut softib_core::Hca, _, _, _)| {
        let (mut hca, pd, cq) = node();
        let rdd = hca.alloc_rdd().expect("an RDD");
        let ((), b) = retained_by(|| build(&mut hca, pd, cq, rdd));
        b as f64 / f64::from(WEIGHED)
    };
    (
        weigh(&|h, pd, cq, _| rc_state(h, pd, cq, WEIGHED)),
        weigh(&|h, _, _, rdd| rd_eecs(h, rdd, WEIGHED)),
        weigh(&|h, pd, cq, rdd| rd_qps(h, pd, cq, rdd, WEIGHED)),
    )
}

/// Mean simulated goodput (Gb/s) over [`SEEDS`]; every run must verify its data.
fn goodput(conversations: u32, eecs: Option<u32>, size: u32, per_conv: u64) -> f64 {
    let g: f64 = SEEDS
        .iter()
        .map(|&seed| {
            let cfg = goodput_config(conversations, eecs, size, per_conv, 0.001, seed);
            let r = run(&cfg, None, &mut |_, _| {}).expect("scenario runs");
            assert!(r.verified, "{}", r.to_text());
            r.goodput_gbps
        })
        .sum();
    g / SEEDS.len() as f64
}

fn main() {
    if cfg!(debug_assertions) {
        eprintln!("note: debug build (use cargo bench); memory figures are the same");
    }
    println!("RD scaling: N client QPs on node A each talk to M server QPs on node B");
    println!("RC: N x M connected QPs per node; RD: N QPs and K EE contexts (node A)");
    println!();
    let (rc_qp, eec, rd_qp) = per_object();
    println!(
        "heap bytes per object in RTS, queues empty (mean of {WEIGHED}): RC QP {rc_qp:.0}, EE context {eec:.0}, RD QP {rd_qp:.0}"
    );
    println!("connection state of node A per conversation, bytes (RC: one QP; RD: (N QPs + K EE contexts) / (N x M)):");
    print!("  {:>9} {:>8}", "N x M", "RC");
    for k in EECS {
        print!(" {:>17}", format!("RD K={k} (ratio)"));
    }
    println!();
    for (n, m) in [(16u32, 16u32), (64, 64), (256, 256)] {
        print!("  {:>9} {rc_qp:>8.0}", format!("{n} x {m}"));
        for k in EECS {
            let b = (f64::from(n) * rd_qp + f64::from(k) * eec) / f64::from(n * m);
            print!(" {:>17}", format!("{b:.1} ({:.3}x)", b / rc_qp));
        }
        println!();
    }
    println!();
    let (n, m) = (16u32, 16u32);
    println!(
        "goodput at 0.1 % loss, {n} x {m} = {} conversations, SENDs, mean of {} seeds (simulated Gb/s):",
        n * m,
        SEEDS.len()
    );
    print!("  {:>7} {:>8}", "size", "RC");
    for k in EECS {
        print!(" {:>17}", format!("RD K={k} (ratio)"));
    }
    println!();
    for (size, per_conv) in [(4096u32, 64u64), (65536, 8)] {
        let rc = goodput(n * m, None, size, per_conv);
        print!("  {size:>7} {rc:>8.2}");
        for k in EECS {
            let rd = goodput(n * m, Some(k), size, per_conv);
            print!(" {:>17}", format!("{rd:.2} ({:.2}x)", rd / rc));
        }
        println!();
    }
}
