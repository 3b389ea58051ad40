//! `softib cm listen` and `softib cm probe` between two processes over UDP: the IB CM of two
//! softib devices connects (REQ, REP, RTU) and disconnects (DREQ, DREP), or the listener
//! rejects and the prober hears the REJ. (Against the Linux kernel's CM: scripts/interop-rxe.sh.)

mod procs;

use std::thread::sleep;
use std::time::Duration;

use procs::{finish, ok, spawn};

/// Runs a listener on `server` (rdma_cm port `ports.0`) and a probe from `client` to port
/// `ports.1`; returns both outputs.
fn exchange(
    server: &str,
    client: &str,
    ports: (&str, &str),
    listen_extra: &[&str],
    probe_extra: &[&str],
) -> (std::process::Output, std::process::Output) {
    let mut largs = vec![
        "cm",
        "listen",
        "--bind",
        server,
        "--port",
        ports.0,
        "--timeout-ms",
        "4000",
    ];
    largs.extend_from_slice(listen_extra);
    let l = spawn(&largs);
    sleep(Duration::from_millis(300));
    let mut pargs = vec![
        "cm",
        "probe",
        "--bind",
        client,
        "--peer",
        server,
        "--port",
        ports.1,
        "--timeout-ms",
        "10000",
    ];
    pargs.extend_from_slice(probe_extra);
    let p = spawn(&pargs);
    let po = finish(p, "cm probe");
    let lo = finish(l, "cm listen");
    (lo, po)
}

#[test]
fn connect_and_disconnect_between_two_softib_cms() {
    let (lo, po) = exchange(
        "127.0.0.61",
        "127.0.0.62",
        ("7201", "7201"),
        &["--accept"],
        &["--establish"],
    );
    let l = ok(&lo, "cm listen --accept");
    let p = ok(&po, "cm probe --establish");
    assert!(l.contains("event: ConnectRequest"), "{l}");
    assert!(
        l.contains("IP CM header: version 0 IPv4"),
        "the REQ carries rdma_cm's IP CM header: {l}"
    );
    assert!(l.contains("event: Established"), "{l}");
    assert!(l.trim_end().ends_with("disconnected"), "{l}");
    assert!(p.contains("event: ConnectReply"), "{p}");
    assert!(
        p.trim_end().ends_with("established, then disconnected"),
        "{p}"
    );
}

#[test]
fn a_rejected_request_is_reported() {
    let (lo, po) = exchange("127.0.0.63", "127.0.0.64", ("7202", "7202"), &[], &[]);
    let l = ok(&lo, "cm listen");
    assert!(l.trim_end().ends_with("rejected"), "{l}");
    assert_eq!(po.status.code(), Some(1), "a REJ is not an acceptance");
    let p = String::from_utf8_lossy(&po.stdout);
    assert!(p.contains("Rejected") && p.contains("reason 28"), "{p}");
}

#[test]
fn a_port_nobody_listens_on_is_an_invalid_service_id() {
    // The peer's CM listens on another port: it answers with REJ reason 8.
    let (lo, po) = exchange("127.0.0.65", "127.0.0.66", ("7204", "7203"), &[], &[]);
    assert_eq!(
        lo.status.code(),
        Some(1),
        "the listener saw no REQ for its port"
    );
    assert_eq!(po.status.code(), Some(1));
    let p = String::from_utf8_lossy(&po.stdout);
    assert!(p.contains("Rejected") && p.contains("reason 8,"), "{p}");
}
