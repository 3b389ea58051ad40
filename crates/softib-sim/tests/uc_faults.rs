//! UC through the simulated fabric under loss, reordering, duplication and corruption: every
//! message the responder receives is intact (the run verifies), every operation is either
//! received or counted as lost, and the responder's drop counters account for what it threw
//! away. Without faults nothing is lost.

use softib_core::verbs::types::Mtu;
use softib_sim::{run, OpKind, Service, SimConfig};

fn cfg(op: OpKind, size: u32, seed: u64) -> SimConfig {
    SimConfig {
        service: Service::Uc,
        op,
        size,
        ops: 600,
        seed,
        mtu: Mtu::Mtu1024,
        depth: 8,
        ..SimConfig::default()
    }
}

#[test]
fn uc_without_faults_delivers_everything() {
    for op in [OpKind::Send, OpKind::Write] {
        for size in [0, 100, 1024, 5000] {
            let r = run(&cfg(op, size, 3), None, &mut |_, _| {}).unwrap();
            assert!(r.verified, "{}", r.to_text());
            assert_eq!((r.delivered, r.lost, r.duplicates), (600, 0, 0));
            assert_eq!(r.completed, 600);
            assert_eq!(r.bytes, 600 * u64::from(size));
            assert_eq!(r.responder.uc_msgs_dropped, 0);
            assert_eq!(r.responder.sent_pkts, 0, "a UC responder never sends");
        }
    }
}

#[test]
fn uc_loss_reorder_dup_every_message_intact_or_lost() {
    for op in [OpKind::Send, OpKind::Write] {
        for seed in 1..4 {
            let c = SimConfig {
                loss: 0.02,
                reorder: 0.02,
                dup: 0.02,
                corrupt: 0.01,
                ..cfg(op, 3000, seed)
            };
            let r = run(&c, None, &mut |_, _| {}).unwrap();
            let text = r.to_text();
            assert!(r.verified, "{text}");
            assert_eq!(r.verify_failures, 0, "{text}");
            // The requester completes every WQE once its last packet is out (C9-180).
            assert_eq!((r.completed, r.errors), (600, 0), "{text}");
            assert_eq!(r.delivered + r.lost, 600, "{text}");
            assert!(r.lost > 0 && r.delivered > 300, "{text}");
            let d = &r.responder;
            assert!(d.uc_psn_gaps > 0 && d.uc_msgs_dropped > 0, "{text}");
            assert!(d.icrc_err > 0, "{text}");
            assert_eq!(r.responder.sent_pkts, 0);
            // The report shows the loss and the reasons.
            assert!(text.contains(&format!("{} lost", r.lost)), "{text}");
            assert!(text.contains("uc_out_of_order="), "{text}");
            let j = r.to_json();
            assert_eq!(j["lost"], r.lost);
            assert_eq!(
                j["drop_counters"]["responder"]["uc_msgs_dropped"],
                d.uc_msgs_dropped
            );
        }
    }
}

#[test]
fn uc_loss_only_loses_only_messages_with_a_lost_packet() {
    // Single-packet messages under loss alone: each lost frame loses exactly its message, and
    // nothing else is dropped.
    let c = SimConfig {
        loss: 0.05,
        ..cfg(OpKind::Send, 512, 9)
    };
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert_eq!(r.lost, r.fabric.links.dropped_loss, "{}", r.to_text());
    assert_eq!(r.responder.uc_msgs_dropped, 0);
    assert_eq!(r.duplicates, 0);
}

#[test]
fn uc_rejects_read_and_atomics() {
    for op in [OpKind::Read, OpKind::Cas, OpKind::Faa] {
        assert!(run(&cfg(op, 8, 1), None, &mut |_, _| {}).is_err());
    }
}
