//! rdma_cm programs on softib: `tests/c/cm_cases.c`, compiled against the installed
//! `<rdma/rdma_cma.h>` and linked with `-lrdmacm -libverbs` against the built `librdmacm.so`
//! and `libibverbs.so`, runs one case per test (`LD_LIBRARY_PATH`): a connection made and
//! used and closed, rejections (by the consumer, for a port nobody listens on, for a request
//! whose id is destroyed), a UD service found through SIDR, and calls that must fail with the
//! documented errno. The program exits 0 only if every check held; its stderr names each
//! check that did not.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The compiled program and the directory of the libraries, or why the tests cannot run.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| {
        common::rdmacm_program("cm_cases", &["infiniband/verbs.h", "rdma/rdma_cma.h"], &[])
    })
}

fn run_case(case: &str) {
    run_case_env(case, &[]);
}

fn run_case_env(case: &str, env: &[(&str, &str)]) {
    let (exe, libdir) = match program() {
        Ok(v) => v,
        Err(reason) => return common::skip(reason),
    };
    let (status, stderr) = common::run_limited(
        Command::new(exe)
            .arg(case)
            .env("LD_LIBRARY_PATH", libdir)
            .env("SOFTIB_CONFIG", "/nonexistent")
            .env_remove("SOFTIB_BIND")
            .envs(env.iter().copied()),
        Duration::from_secs(60),
    );
    let Some(status) = status else {
        panic!("{case}: no exit within 60 s\n{stderr}");
    };
    assert!(status.success(), "{case}: {status}\n{stderr}");
}

/// REQ (with private data behind the IP CM header), REP (private data), RTU; the QPs in RTS
/// towards each other; a SEND; DREQ/DREP with one DISCONNECTED each and the QP in ERR.
#[test]
fn cm_connect_use_disconnect() {
    run_case("establish");
}

/// REJ Consumer Defined (28) with private data and the QP in ERR; Invalid Service ID (8) for
/// an unlistened port; a request destroyed unanswered is rejected.
#[test]
fn cm_rejections() {
    run_case("reject");
}

/// SIDR: the service's QP and the rdma_cm Q_Key; a datagram through the event's AH.
#[test]
fn cm_ud_through_sidr() {
    run_case("ud");
}

/// NULL, strangers, foreign and busy addresses, oversized private data, calls out of order,
/// a non-blocking channel, double ack and destroy: the documented errno, never a crash.
#[test]
fn cm_bad_calls() {
    run_case("bad_calls");
}

/// A port another process of the host bound on the shared device's address is EADDRINUSE (in
/// its port space only), and free again once that process has exited.
#[test]
fn cm_ports_are_the_hosts() {
    run_case("ports");
}

/// A REQ to an address nobody holds ends UNREACHABLE (-ETIMEDOUT) after its retries; a DREQ
/// to a passive process killed after the connection was made ends DISCONNECTED. The CM's
/// timeouts are shortened (t = 14: 67 ms, 3 retries).
#[test]
fn cm_peer_vanishes() {
    run_case_env(
        "vanish",
        &[
            ("SOFTIB_CM_RESPONSE_TIMEOUT", "14"),
            ("SOFTIB_CM_RETRIES", "3"),
        ],
    );
}

/// A DISCONNECTED event comes after the completions of what the peer sent before its DREQ
/// were polled (libfabric's ofi_rxm reads its event channel between two polls of its CQ, and
/// closed the connection over them); an event whose completions are never polled still comes.
#[test]
fn cm_disconnected_after_the_data_before_it() {
    run_case("disconnect_after_data");
}

/// librdmacm's one context per device: with one device (on a loopback address of its own),
/// `rdma_get_devices` lists it once and every id is on that context: bound to its address, to
/// a loopback address no device holds (named the device, at its own address), resolved, or a
/// request; a PD of the listed context makes the request's QP (libfabric's verbs domain).
#[test]
fn cm_one_context_per_device() {
    run_case_env("devices", &[("SOFTIB_BIND", "127.0.94.1")]);
}

/// A loopback address when no device is on a loopback address of its family (the one device
/// on `::1`): bound to no device, as the kernel binds loopback addresses; its port held as the
/// wildcard's; its listen hears the device.
#[test]
fn cm_loopback_without_device() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        return common::skip("this host has no IPv6 loopback address");
    }
    run_case_env("loopback_no_device", &[("SOFTIB_BIND", "::1")]);
}
