//! The scaling argument RD exists for, kept true (the figures: `cargo bench -p softib-sim
//! --bench rd_scaling`): 64 × 64 conversations cost node A at most 1/20 of RC's connection
//! state over 16 EE contexts, and at 0.1 % loss 16 EE contexts carry 256 conversations' 4 KiB
//! SENDs at least 0.9× as fast as 256 RC QP pairs (simulated time: deterministic per seed).
//! One test, so nothing else allocates while the counting allocator weighs.

#[path = "../../softib-core/tests/alloc_count/mod.rs"]
mod alloc_count;

use alloc_count::{retained_by, Counting};
use softib_sim::run;
use softib_sim::scaling::{goodput_config, node, rc_state, rd_eecs, rd_qps};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn rd_carries_many_conversations_on_little_state_at_rc_goodput() {
    let (n, m, k) = (64u32, 64u32, 16u32);
    let (mut hca, pd, cq) = node();
    let ((), rc) = retained_by(|| rc_state(&mut hca, pd, cq, n * m));
    drop(hca);
    let (mut hca, pd, cq) = node();
    let rdd = hca.alloc_rdd().unwrap();
    let ((), rd) = retained_by(|| {
        rd_eecs(&mut hca, rdd, k);
        rd_qps(&mut hca, pd, cq, rdd, n);
    });
    drop(hca);
    eprintln!("node A connection state for {n} x {m} conversations: RC {rc} bytes, RD ({k} EE contexts) {rd} bytes");
    assert!(rd > 0 && rc > 0);
    assert!(
        (rd as f64) <= rc as f64 / 20.0,
        "RD {rd} bytes vs RC {rc} bytes"
    );

    let goodput = |eecs| {
        let cfg = goodput_config(256, eecs, 4096, 16, 0.001, 7);
        let r = run(&cfg, None, &mut |_, _| {}).expect("scenario runs");
        assert!(r.verified, "{}", r.to_text());
        assert!(
            r.retransmissions > 0,
            "0.1 % loss lost nothing: {}",
            r.to_text()
        );
        r.goodput_gbps
    };
    let (rc, rd) = (goodput(None), goodput(Some(k)));
    eprintln!("goodput at 0.1 % loss, 256 conversations of 4 KiB SENDs: RC {rc:.2} Gb/s, RD over {k} EE contexts {rd:.2} Gb/s");
    assert!(rd >= 0.9 * rc, "RD {rd} Gb/s vs RC {rc} Gb/s");
}
