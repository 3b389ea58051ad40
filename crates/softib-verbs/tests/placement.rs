//! RDMA WRITEs placed by their same-host sender, through the C ABI: `tests/c/placement.c`,
//! compiled against the installed `<infiniband/verbs.h>` and run on the built
//! `libibverbs.so` with `SOFTIB_STATS=1`. The program checks the memory (what lands, and
//! that nothing lands in a deregistered region, under a wrong R_Key, in another PD's region
//! or for a QP in ERR); this test checks from the counters printed at exit that the WRITEs
//! were placed by the sender where they may be, and not where they may not.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| common::verbs_program("placement", &[]))
}

/// Runs a case; the sum of a counter over the devices' printed statistics, or `None` when
/// the program cannot be built here (skipped).
fn run_case(case: &str, counter: &str) -> Option<u64> {
    let (exe, libdir) = match program() {
        Ok(v) => v,
        Err(reason) => {
            common::skip(reason);
            return None;
        }
    };
    let mut cmd = Command::new(exe);
    cmd.arg(case)
        .env("LD_LIBRARY_PATH", libdir)
        .env("SOFTIB_STATS", "1")
        .env_remove("SOFTIB_BIND");
    let (status, stderr) = common::run_limited(&mut cmd, Duration::from_secs(60));
    let status = status.unwrap_or_else(|| panic!("{case}: no exit within 60 s\n{stderr}"));
    assert!(status.success(), "{case}: {status}\n{stderr}");
    let key = format!("{counter}: ");
    let total = stderr
        .lines()
        .filter(|l| l.contains("runtime DeviceStats"))
        .filter_map(|l| {
            let at = l.find(&key)? + key.len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        stderr.contains("runtime DeviceStats"),
        "{case}: no statistics\n{stderr}"
    );
    Some(total)
}

#[test]
fn placed_writes_land_whole_and_alone() {
    // 200 WRITEs after a warm-up (a QP's first WRITE takes the general path, which never
    // places), each the only one outstanding: all placed by the sender, all taken as placed
    // by the responder.
    if let Some(n) = run_case("lands", "tx_placed") {
        assert_eq!(n, 200, "WRITEs placed by the sender");
    }
    if let Some(n) = run_case("lands", "rx_placed") {
        assert_eq!(n, 200, "WRITEs taken as placed by the responder");
    }
    if let Some(n) = run_case("lands", "placement_refused") {
        assert_eq!(n, 0, "peers refused");
    }
}

#[test]
fn refused_placement_leaves_every_write_to_the_responder() {
    // process_vm_writev refused by a seccomp filter, as a container's default profile does
    // (EPERM) or where the call is missing (ENOSYS): the 200 WRITEs all land, none placed,
    // and after the first refusal the sender stops trying (the peer is counted once).
    for case in ["denied_eperm", "denied_enosys"] {
        if let Some(n) = run_case(case, "tx_placed") {
            assert_eq!(n, 0, "{case}: WRITEs placed by the sender");
        }
        if let Some(n) = run_case(case, "rx_placed") {
            assert_eq!(n, 0, "{case}: WRITEs taken as placed by the responder");
        }
        if let Some(n) = run_case(case, "placement_refused") {
            assert_eq!(n, 1, "{case}: peers refused");
        }
    }
}

#[test]
fn the_responder_does_not_copy_a_placed_write_again() {
    // The program writes over each placed WRITE before the responder handles it; its bytes
    // stay. Most of the 50 WRITEs are placed in the post itself (the others, sent later by
    // the progress thread, are handled before the program sees them).
    if let Some(n) = run_case("not_again", "tx_placed") {
        assert!(n >= 25, "only {n} of 50 WRITEs placed");
    }
}

#[test]
fn nothing_is_placed_after_deregistration() {
    // The five WRITEs before `ibv_dereg_mr` are placed; the one after it is not (the program
    // checks that it fails and leaves the bytes).
    if let Some(n) = run_case("dereg", "tx_placed") {
        assert_eq!(n, 5);
    }
}

#[test]
fn nothing_is_placed_after_rereg_withdraws_remote_write() {
    // The five WRITEs before `ibv_rereg_mr` are placed; the one after it, refused, is not.
    if let Some(n) = run_case("rereg_access", "tx_placed") {
        assert_eq!(n, 5);
    }
}

#[test]
fn placement_follows_a_rereg_to_new_memory() {
    // Five WRITEs placed into the old range, one into the new range after `ibv_rereg_mr`
    // (the region published again at its new address); the one at the old range is refused.
    if let Some(n) = run_case("rereg_translation", "tx_placed") {
        assert_eq!(n, 6);
    }
}

#[test]
fn nothing_is_placed_under_a_wrong_rkey_or_pd() {
    for case in ["bad_rkey", "other_pd"] {
        if let Some(n) = run_case(case, "tx_placed") {
            assert_eq!(n, 0, "{case}");
        }
    }
}

#[test]
fn nothing_is_placed_for_a_qp_in_error() {
    if let Some(n) = run_case("qp_error", "tx_placed") {
        assert_eq!(n, 0);
    }
}

/// Each line of `SOFTIB_STATS` reaches stderr in one write(2), so that the output of other
/// processes on the same stream (MPI ranks) cannot split it, nor a launcher that tags what it
/// forwards (`mpirun --tag-output`, `mpiexec -l`) tag it piece by piece: stderr is a datagram
/// socket here, where every write is one datagram.
#[test]
fn every_stats_line_is_one_write() {
    let (exe, libdir) = match program() {
        Ok(v) => v,
        Err(reason) => return common::skip(reason),
    };
    let (mine, theirs) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let mut child = Command::new(exe)
        .arg("lands")
        .env("LD_LIBRARY_PATH", libdir)
        .env("SOFTIB_STATS", "1")
        .env_remove("SOFTIB_BIND")
        .stderr(std::os::fd::OwnedFd::from(theirs))
        .spawn()
        .unwrap();
    // Read while it runs: a datagram socket queues only a few datagrams unread.
    mine.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut writes = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        match mine.recv(&mut buf) {
            Ok(n) => writes.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => {
                if let Some(st) = child.try_wait().unwrap() {
                    while let Ok(n) = mine.recv(&mut buf) {
                        writes.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    }
                    break st;
                }
            }
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("no exit within 60 s: {writes:?}");
        }
    };
    assert!(status.success(), "{status}: {writes:?}");
    let stats: Vec<&String> = writes.iter().filter(|w| w.starts_with("softib ")).collect();
    assert!(
        stats.iter().any(|w| w.contains("runtime DeviceStats")),
        "no statistics in {writes:?}"
    );
    for w in writes
        .iter()
        .filter(|w| w.contains("DeviceStats") || w.contains("Counters"))
    {
        assert!(
            w.starts_with("softib ") && w.ends_with("}\n") && w.matches('\n').count() == 1,
            "a statistics line in pieces: {w:?}\nall writes: {writes:?}"
        );
    }
}
