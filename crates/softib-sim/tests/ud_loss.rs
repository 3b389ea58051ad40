//! UD through the simulated fabric: with loss, duplication, reordering and corruption every
//! datagram that arrives is intact, every send completes, and the report's accounting adds up
//! (each operation delivered once or counted lost; extra copies counted as duplicates).

use softib_core::verbs::types::Mtu;
use softib_sim::{run, OpKind, Service, SimConfig};

fn ud(
    ops: u64,
    size: u32,
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    seed: u64,
) -> SimConfig {
    SimConfig {
        service: Service::Ud,
        op: OpKind::Send,
        size,
        ops,
        qps: 2,
        depth: 8,
        mtu: Mtu::Mtu1024,
        loss,
        dup,
        reorder,
        corrupt,
        seed,
        ..SimConfig::default()
    }
}

#[test]
fn ud_clean_fabric_delivers_everything_once() {
    let c = ud(1000, 1024, 0.0, 0.0, 0.0, 0.0, 3);
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert_eq!((r.delivered, r.duplicates, r.lost), (1000, 0, 0));
    assert_eq!(r.bytes, 1000 * 1024);
    assert_eq!(r.requester.retransmitted_pkts, 0);
}

#[test]
fn ud_under_loss_counts_lost_datagrams() {
    for seed in 1..=4 {
        let c = ud(3000, 200, 0.05, 0.0, 0.0, 0.0, seed);
        let r = run(&c, None, &mut |_, _| {}).unwrap();
        assert!(r.verified, "{}", r.to_text());
        assert_eq!(r.verify_failures, 0);
        assert_eq!(r.completed, 3000, "every send completes, lost or not");
        assert_eq!(r.delivered + r.lost, 3000, "{}", r.to_text());
        assert_eq!(r.duplicates, 0);
        assert_eq!(
            r.lost, r.fabric.links.dropped_loss,
            "a datagram is lost exactly when the fabric drops it"
        );
        assert!(r.lost > 50 && r.lost < 400, "5% of 3000: {}", r.lost);
        assert!(r.to_text().contains("lost"));
    }
}

#[test]
fn ud_mixed_faults_every_arrival_intact() {
    let c = ud(2000, 64, 0.03, 0.05, 0.05, 0.02, 9);
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert_eq!(r.delivered + r.lost, 2000);
    assert!(
        r.duplicates > 0,
        "a duplicating fabric makes UD deliver twice"
    );
    assert!(
        r.responder.icrc_err > 0,
        "corrupted frames are dropped on the ICRC"
    );
    let text = r.to_text();
    assert!(
        text.contains("duplicates") && text.contains("drops (B)"),
        "{text}"
    );
    let j = r.to_json();
    assert_eq!(j["lost"], r.lost);
    assert_eq!(j["duplicates"], r.duplicates);
    assert_eq!(j["service"], "ud");
    // Same seed, same run.
    let again = run(&c, None, &mut |_, _| {}).unwrap();
    assert_eq!(
        (again.delivered, again.duplicates, again.lost),
        (r.delivered, r.duplicates, r.lost)
    );
}

#[test]
fn ud_rejects_other_operations_and_oversized_messages() {
    let mut c = ud(10, 64, 0.0, 0.0, 0.0, 0.0, 1);
    c.op = OpKind::Write;
    assert!(run(&c, None, &mut |_, _| {})
        .unwrap_err()
        .contains("send only"));
    let c = ud(10, 2048, 0.0, 0.0, 0.0, 0.0, 1);
    assert!(run(&c, None, &mut |_, _| {})
        .unwrap_err()
        .contains("--size"));
}
