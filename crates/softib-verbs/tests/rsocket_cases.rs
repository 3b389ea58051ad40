//! rsockets on softib: `tests/c/rsocket_cases.c`, compiled against the installed
//! `<rdma/rsocket.h>` and linked with `-lrdmacm -libverbs` against the built `librdmacm.so`
//! and `libibverbs.so`, runs one case per test (`LD_LIBRARY_PATH`), most of them as a server
//! process and a forked client process on two loopback addresses: a byte stream checked byte
//! by byte, MSG_PEEK and MSG_WAITALL and the vector calls, half and full close, non-blocking
//! sockets, rpoll/rselect beside an ordinary descriptor, riomap/riowrite, socket options,
//! calls that must fail with the documented errno, and eight connections at once. The program
//! exits 0 only if every check held; its stderr names each check that did not. Last, an
//! ordinary TCP program under rdma-core's rsocket preload library.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The compiled program and the directory of the libraries, or why the tests cannot run.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| {
        common::rdmacm_program(
            "rsocket_cases",
            &["infiniband/verbs.h", "rdma/rdma_cma.h", "rdma/rsocket.h"],
            &["-pthread"],
        )
    })
}

fn run_case(case: &str) {
    let (exe, libdir) = match program() {
        Ok(v) => v,
        Err(reason) => return common::skip(reason),
    };
    let (status, stderr) = common::run_limited(
        Command::new(exe)
            .arg(case)
            .env("LD_LIBRARY_PATH", libdir)
            .env("SOFTIB_CONFIG", "/nonexistent")
            .env_remove("SOFTIB_BIND"),
        Duration::from_secs(60),
    );
    let Some(status) = status else {
        panic!("{case}: no exit within 60 s\n{stderr}");
    };
    assert!(status.success(), "{case}: {status}\n{stderr}");
}

/// rbind to a loopback address with port 0 chooses a port (rgetsockname); 3 MiB in rsend
/// calls of random size (1 B .. 200 KiB) arrive intact through rrecv calls of random size
/// (1 B .. 256 KiB); a checksum echoed back and the server's rclose right after it still
/// reach the client (then end of stream); raccept, rgetpeername and rgetsockname agree on
/// both ends' addresses.
#[test]
fn rsocket_stream() {
    run_case("stream");
}

/// MSG_PEEK leaves the bytes for the next rrecv (also of a message partly read); MSG_WAITALL
/// waits for the full length across four sends; rwritev/rreadv and rsendmsg/rrecvmsg with
/// three iovecs each move the right bytes; rsendto with an address is EISCONN, without one it
/// sends; rrecvfrom names the peer; rwrite/rread.
#[test]
fn rsocket_peek_waitall() {
    run_case("peek_waitall");
}

/// SHUT_WR after N bytes: the server reads them, then 0 (end of stream, which stays), and
/// can still send to the half-closed client; after the peer's rclose, rrecv returns at once
/// (0 or -1), rpoll reports it and rsend fails with -1.
#[test]
fn rsocket_shutdown() {
    run_case("shutdown");
}

/// SOCK_NONBLOCK and rfcntl(F_SETFL, O_NONBLOCK) both show in F_GETFL; raccept with nothing
/// pending and rrecv with no data are EAGAIN; a non-blocking rconnect is EINPROGRESS (or, if the peer answered at once, already connected), then
/// rpoll(POLLOUT) and SO_ERROR 0; rsend of 8 MiB to a peer that does not read gives a
/// partial count, then EAGAIN, never a wait (MSG_DONTWAIT likewise on a blocking socket), and
/// POLLOUT again once the peer read the bytes, which arrive intact; an accepted socket starts
/// blocking (rdma-core's rsockets and accept(2) do not pass O_NONBLOCK on).
#[test]
fn rsocket_nonblocking() {
    run_case("nonblocking");
}

/// rpoll over an rsocket and a pipe: a 100 ms timeout with nothing ready returns 0 after it;
/// a write to the pipe wakes it with only the pipe's revents; the peer's data wakes it with
/// POLLIN on the rsocket only; rselect likewise with fd_sets and a timeval, and reports a
/// connected rsocket writable; rpoll on a listener reports POLLIN once a connection waits.
#[test]
fn rsocket_poll_select() {
    run_case("poll_select");
}

/// RDMA_IOMAPSIZE 4 on both sides (the accepted socket inherits the listener's); the
/// server's riomap of 1 MiB (PROT_WRITE, offset 0) goes out with its next rsend; the client's
/// riowrite of 1 MiB at 0 and 100 bytes at 4096 land there before its next message;
/// riowrite outside every mapping writes nothing; riounmap, then EINVAL for a buffer not
/// mapped (or unmapped already).
#[test]
fn rsocket_iomap() {
    run_case("iomap");
}

/// rsetsockopt/rgetsockopt round trips as rdma-core: SO_RCVBUF/SO_SNDBUF doubled (and the
/// send buffer's floor), TCP_NODELAY, SO_KEEPALIVE with TCP_KEEPIDLE (0 is EINVAL),
/// SO_REUSEADDR, SO_LINGER, RDMA_SQSIZE/RQSIZE/INLINE/IOMAPSIZE; unknown options and levels
/// are ENOTSUP; SOL_RDMA after connecting (or on an accepted socket) is EINVAL; 200 KiB pass
/// through the shrunken buffers and queues, and the connection works after a keepalive.
#[test]
fn rsocket_options() {
    run_case("options");
}

/// SOCK_DGRAM, AF_UNIX, SOCK_SEQPACKET, a stream over UDP are ENOTSUP and AF_IB is
/// EAFNOSUPPORT; every call on a descriptor that is not an rsocket (9999, a pipe, -1) is
/// EBADF and leaves a pipe open; on an unconnected socket rsend/rrecv are ENOTCONN, NULL
/// buffers EFAULT, rshutdown how=42 EINVAL; bind errors (foreign address, twice, a port in
/// use); rconnect to a port nobody listens on is ECONNREFUSED, reported once by SO_ERROR.
#[test]
fn rsocket_bad_calls() {
    run_case("bad_calls");
}

/// Eight client threads connect at once to one listener; each sends 256 KiB in 32 KiB
/// pieces and gets every piece echoed back intact (a thread per accepted socket); all close,
/// and the listener's rclose returns promptly.
#[test]
fn rsocket_many() {
    run_case("many");
}

/// One thread blocked in rrecv, another rclose()s the socket: the blocked call returns at once
/// (0, or -1 with EBADF or ENOTCONN) instead of crashing on the freed socket, and the number
/// is no rsocket afterwards (EBADF).
#[test]
fn rsocket_close_while_blocked() {
    run_case("close_while_blocked");
}

/// Where Debian's librdmacm1 installs rdma-core's rsocket preload library.
const RSPRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

/// An ordinary TCP program (`tests/c/tcp_sum.c`: socket, bind, listen, accept, connect,
/// read, write, shutdown; no RDMA header) under rdma-core's rsocket preload library, unmodified,
/// on softib's librdmacm: 8 MiB and the end of the stream reach the server, its byte count
/// and sum come back. Both processes' connection managers report the connection (had the
/// preload fallen back to the kernel's TCP, they would report nothing).
#[test]
fn rsocket_preload_runs_a_tcp_program() {
    let (_, libdir) = match program() {
        Ok(v) => v,
        Err(reason) => return common::skip(reason),
    };
    if !std::path::Path::new(RSPRELOAD).exists() {
        return common::skip(&format!(
            "{RSPRELOAD} is not installed (Debian: librdmacm1)"
        ));
    }
    let dir = common::scratch("rsocket_preload");
    let exe = dir.join("tcp_sum");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/tcp_sum.c");
    if let Err(e) = common::cc(&src, &exe, &[]) {
        panic!("{e}");
    }
    // An address and port no other test uses.
    let addr = "127.0.0.77";
    let port = (20000 + std::process::id() % 20000).to_string();
    let env = |c: &mut Command| {
        c.env("LD_LIBRARY_PATH", libdir)
            .env("LD_PRELOAD", RSPRELOAD)
            .env("SOFTIB_CONFIG", "/nonexistent")
            .env("SOFTIB_CM_DEBUG", "1")
            .env_remove("SOFTIB_BIND");
    };
    let mut s = Command::new(&exe);
    s.args(["s", addr, &port]);
    env(&mut s);
    let server = std::thread::spawn(move || common::run_limited(&mut s, Duration::from_secs(60)));
    // The server listens through softib's CM within a moment; a client that comes early is
    // refused, so it tries again.
    let mut client = (None, String::new());
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let mut c = Command::new(&exe);
        c.args(["c", addr, &port]);
        env(&mut c);
        client = common::run_limited(&mut c, Duration::from_secs(60));
        if client.0.is_some_and(|st| st.success()) || !client.1.contains("connect") {
            break;
        }
    }
    let (sst, serr) = server.join().unwrap();
    let (cst, cerr) = client;
    assert!(
        cst.is_some_and(|st| st.success()),
        "client: {cst:?}\n{cerr}\nserver: {sst:?}\n{serr}"
    );
    assert!(
        sst.is_some_and(|st| st.success()),
        "server: {sst:?}\n{serr}"
    );
    assert!(
        serr.contains("Established") && cerr.contains("Established"),
        "no rsocket connection in softib's CM traces:\nserver:\n{serr}\nclient:\n{cerr}"
    );
}
