//! XRC through the C ABI: `tests/c/xrc_cases.c`, compiled against the installed
//! `<infiniband/verbs.h>` and linked with `-libverbs` against the built `libibverbs.so`, runs
//! one case per test on softib (`LD_LIBRARY_PATH`). The program exits 0 only if every check
//! held; its stderr names each one that did not. Everything here happens within one process
//! (one context's QPs reach each other through its own GID); `tests/xrc_tools.rs` runs
//! Debian's XRC programs between two processes.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The compiled program and the directory of the library, or why the tests cannot run.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| common::verbs_program("xrc_cases", &[]))
}

fn run_case(case: &str) {
    common::run_c_case(
        program(),
        case,
        &[("SOFTIB_CONFIG", "/nonexistent")],
        Duration::from_secs(60),
    );
}

/// `ibv_open_xrcd`: comp_mask without FD or OFLAGS (EINVAL) or with unknown bits
/// (EOPNOTSUPP), a closed fd (EBADF), a file with no domain without O_CREAT (EAGAIN), O_EXCL
/// on an existing one (EINVAL); opens of one file share the domain until the last close;
/// private domains for fd -1; `ibv_close_xrcd` EBUSY while an SRQ made through the handle
/// lives, EINVAL twice or for a handle never handed out; another context's domain refused.
/// `IBV_DEVICE_XRC` in the device capabilities.
#[test]
fn xrc_domains() {
    run_case("domains");
}

/// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: each missing piece (CQ, XRCD, PD) EINVAL,
/// unknown bits or a tag-matching SRQ EOPNOTSUPP, NULL or never-handed-out domain or CQ
/// EINVAL; `ibv_get_srq_num` numbers every SRQ (NULL output, unknown SRQ: EINVAL);
/// modify/query/post on an XRC SRQ; an RC QP refuses an XRC SRQ; its CQ and domain busy.
#[test]
fn xrc_srqs() {
    run_case("srqs");
}

/// XRC_RECV needs its domain (EINVAL without) and takes no send ops (EOPNOTSUPP), ignores
/// the PD, CQs and capabilities it does not have and names none of them in its `ibv_qp` or
/// `ibv_query_qp`; XRC_SEND needs a PD and a send CQ and has no receive queue; posting to the
/// missing queues fails with `bad_wr` set; RC's full modify masks are accepted as the kernel
/// accepts them; the domain is busy while the target lives.
#[test]
fn xrc_qps() {
    run_case("qps");
}

/// `ibv_open_qp`: every missing comp_mask bit, a reserved bit, a wrong type, NULL or another
/// domain, a number that is no target QP of the domain: the documented errno. An opened QP
/// is the same QP (state UNKNOWN until queried); it outlives its creator's destroy and goes
/// with its last holder.
#[test]
fn xrc_open_qp() {
    run_case("open_qp");
}

/// Traffic within one process: SENDs (three packets each) to two SRQs of one domain (made
/// through two handles of one file) land in each SRQ with its own CQ and the target's QP
/// number; the `ibv_wr_*` interface with `ibv_wr_set_xrc_srqn` (SEND, RDMA WRITE, RDMA READ);
/// a target kept by `ibv_open_qp` after its creator's destroy; an SRQ of another domain named
/// draws IBV_WC_REM_INV_RD_REQ_ERR and every holder of the target gets IBV_EVENT_QP_REQ_ERR.
#[test]
fn xrc_traffic() {
    run_case("traffic");
}
