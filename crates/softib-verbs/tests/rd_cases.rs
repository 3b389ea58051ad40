//! RD through softib's C extension `<softib/rd.h>`: `tests/c/rd_cases.c`, compiled against the
//! installed `<infiniband/verbs.h>` and this crate's `include/softib/rd.h`, and linked with
//! `-libverbs` against the built `libibverbs.so` (whose `softib_*` symbols are at
//! `SOFTIB_1.0`), runs one case per test on softib (`LD_LIBRARY_PATH`). The program exits 0
//! only if every check held; its stderr names each one that did not. The cases cover the
//! objects, their state machines, receives, `softib_post_rd_send` and its bad input, and
//! messages that really move between RD QPs through a pair of EE contexts (`rd_data`).

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The compiled program and the directory of the library, or why the tests cannot run.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| {
        let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include");
        common::verbs_program("rd_cases", &[&format!("-I{}", include.display())])
    })
}

fn run_case(case: &str) {
    common::run_c_case(
        program(),
        case,
        &[
            ("SOFTIB_CONFIG", "/nonexistent"),
            // A path MTU above the port's is refused: the port's is 1024 here.
            ("SOFTIB_MTU", "1024"),
        ],
        Duration::from_secs(60),
    );
}

/// Domains and the life cycle of every object: NULL, memory never handed out, an object of
/// another kind, a destroyed one (EINVAL each); `softib_dealloc_rdd` EBUSY while EE contexts
/// belong to the domain; distinct 24-bit EECNs, never 0; `softib_eec_num` 0 + EINVAL for
/// anything else; a closed context makes no domain.
#[test]
fn rd_domains() {
    run_case("domains");
}

/// The EE context walk RESET → INIT → RTR → RTS → ERR → RESET (and again to RTS, and RTS →
/// RESET) between two EE contexts naming each other in `dest_qp_num`, each step's attributes
/// read back by `softib_query_eec`; every required attribute missing, the disallowed ones
/// (access flags, Q_Key, SQ PSN before RTS), out-of-range values (port, state, an MTU above
/// the port's, a 25-bit EECN, unknown mask bits) and illegal transitions: EINVAL, the state unchanged.
#[test]
fn rd_eec_states() {
    run_case("eec_states");
}

/// `softib_create_rd_qp`: bad PD, domain, CQ, attributes, type and capabilities (EINVAL, the
/// domain left empty); `ibv_create_qp(_ex)` refuses `SOFTIB_QPT_RD` (EINVAL). The QP is an
/// ordinary `ibv_qp` of type `SOFTIB_QPT_RD`: RD's transition table through `ibv_modify_qp`
/// (Q_Key at INIT, no path, no SQ PSN), `ibv_query_qp`, `ibv_post_recv` (a bad WR stops the
/// chain; receives flush into the CQ on ERR, none at destroy), `ibv_post_send` EINVAL with
/// `bad_wr` in every state, `softib_post_rd_send`'s bad input (QP, EE context, each kind of bad
/// WR: EINVAL, `bad_wr`, nothing posted; a list stops at its bad WR; a WR waiting for an EE
/// context in RESET, or posted in ERR, flushes), an SRQ; domain, PD, CQ and SRQ busy while
/// the QP lives.
#[test]
fn rd_qps() {
    run_case("rd_qps");
}

/// Two contexts: each EE context is its own HCA's (modify and destroy never reach the other's,
/// even with the same EECN); a domain, PD or CQ of another context is refused (EINVAL), and
/// so is an EE context of another context in `softib_post_rd_send`.
#[test]
fn rd_contexts() {
    run_case("contexts");
}

/// Data through RD in one context (its QPs reach each other through its own socket): two EE
/// contexts connected to each other at the context's GID and three RD QPs. SENDs with and
/// without immediate from two QPs to two QPs through one EE context (destinations from
/// `wr.ud`) and back through the other (a destination array, the sender's own Q_Key); RDMA
/// WRITE, READ, fetch-and-add and WRITE with immediate; completions (`qp_num`, `src_qp`,
/// `byte_len`, immediate) and bytes checked. A wrong Q_Key fails that QP
/// (`IBV_WC_REM_INV_RD_REQ_ERR`, SQE, later WRs flushed) while the other QP's next message
/// arrives and the EE contexts stay in RTS; a bad R_Key (`IBV_WC_REM_ACCESS_ERR`); an EE
/// context of another domain (`IBV_WC_LOC_QP_OP_ERR`, o9-34).
#[test]
fn rd_data() {
    run_case("rd_data");
}
