//! More bad input through the C ABI (the first cases are `tests/bad_input.rs`):
//! `tests/c/bad_verbs.c`, compiled against the installed `<infiniband/verbs.h>` and linked with
//! `-libverbs` against the built `libibverbs.so`, runs one case per test on softib
//! (`LD_LIBRARY_PATH`). The program exits 0 only if every bad call
//! failed the way rdma-core documents and the process went on; its stderr names each check
//! that did not hold.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The compiled program and the directory of the library, or why the tests cannot run.
fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| common::verbs_program("bad_verbs", &[]))
}

fn run_case(case: &str) {
    common::run_c_case(program(), case, &[], Duration::from_secs(120));
}

/// NULL and never-handed-out context/PD/CQ/QP/MR/SRQ/AH/channel (zeroed structs of the right
/// type) to every exported control verb, invalid ports and GID/P_Key indexes: NULL + errno, an
/// errno value, or -1 + errno as each man page says.
#[test]
fn bad_objects_never_handed_out() {
    run_case("null_objects");
}

/// Each object kind (AH, QP, SRQ, MR, CQ, channel, PD, context) destroyed twice: the second
/// call fails, the library still works.
#[test]
fn bad_double_destroy_every_kind() {
    run_case("double_destroy");
}

/// Destroyed PD/CQ/QP/SRQ/MR/channel given to the verbs that create on them or modify and
/// query them; a PD with a live MR is busy.
#[test]
fn bad_use_after_destroy() {
    run_case("use_after_destroy");
}

/// Atomics at addresses not 8-byte aligned: exactly IBV_WC_REM_INV_REQ_ERR (NAK Invalid
/// Request, IBA class C, as rxe), after a good atomic on the same pair; target and local
/// buffers unchanged.
#[test]
fn bad_atomic_misaligned() {
    run_case("atomic_misaligned");
}

/// The exported ibv_query_port@IBVERBS_1.1 fills struct _compat_ibv_port_attr (48 bytes),
/// not less and not more.
#[test]
fn compat_query_port_fills_the_old_layout() {
    run_case("compat_query_port");
}

/// ibv_reg_mr over unmapped, PROT_NONE or (with write access) read-only memory: NULL and
/// EFAULT, as rdma-core's page pinning gives, instead of a fault when a peer writes there.
#[test]
fn bad_reg_mr_inaccessible_memory() {
    run_case("reg_mr_bad_memory");
}

/// Destroying a channel with a CQ, a CQ or an SRQ with a QP, a PD with a QP: EBUSY, and the
/// objects still work.
#[test]
fn bad_destroy_busy_objects() {
    run_case("busy_objects");
}

/// ibv_modify_qp with invalid transitions, states, ports, P_Key or GID indexes, or missing
/// required attributes: an errno value, the QP's state unchanged.
#[test]
fn bad_modify_qp_transitions() {
    run_case("bad_modify_qp");
}

/// Unknown opcode, negative num_sge, oversized inline data, UD without or with a destroyed
/// AH, RDMA/atomics on UD: refused at post with bad_wr at the WR, no completion.
#[test]
fn bad_send_wr_fields() {
    run_case("bad_send_wr");
}

/// ibv_query_device_ex / ibv_create_cq_ex with reserved comp_mask or wc_flags bits: EINVAL.
#[test]
fn bad_extended_verbs_reserved_bits() {
    run_case("bad_extended");
}

/// ibv_free_device_list, ibv_ack_cq_events and ibv_ack_async_event given NULL do nothing.
#[test]
fn bad_void_verbs_tolerate_null() {
    run_case("void_verbs_tolerate_null");
}

/// A SEND gather entry past its MR's end, an RDMA READ into an MR without LOCAL_WRITE:
/// IBV_WC_LOC_PROT_ERR, nothing delivered or written.
#[test]
fn bad_local_protection() {
    run_case("local_protection");
}

/// A receive WR with a bad lkey or too small a buffer: the receiver's WR completes in error,
/// the requester gets the NAK's status, nothing is written.
#[test]
fn bad_recv_side_errors() {
    run_case("recv_side_errors");
}

/// More WRs than a send, receive or shared receive queue holds, and SRQ WRs above max_sge:
/// ENOMEM (EINVAL for the SGE count) with bad_wr at the first WR that did not fit.
#[test]
fn bad_queue_overflow() {
    run_case("queue_overflow");
}

/// The extended QP/CQ: ibv_wr_complete refuses a batch in RESET, with an operation the QP was
/// not created for, with too many SGEs or too much inline data, and then posts none of it; a
/// bad lkey completes with IBV_WC_LOC_PROT_ERR through ibv_start_poll.
#[test]
fn bad_extended_qp_batches() {
    run_case("extended_qp_errors");
}

/// CQ/QP/SRQ sizes above the device's limits, an unknown QP type, SRQ limits above the queue,
/// AHs with no such port or source GID or without the GRH RoCE needs, multicast on RC QPs or
/// to unicast GIDs, ibv_poll_cq with a negative count: refused, the process goes on.
#[test]
fn bad_create_limits_ah_and_multicast() {
    run_case("bad_create_limits");
}

/// Requester and target on contexts of two devices (two engines on two addresses, packets
/// over UDP): WRITE/READ/atomics outside the region, with a wrong rkey, or without the access
/// right give IBV_WC_REM_ACCESS_ERR, a misaligned atomic IBV_WC_REM_INV_REQ_ERR; the guard
/// bytes around the region, the region and the local buffer are unchanged. Two contexts of one
/// device share its GID.
#[test]
fn bad_remote_access_across_two_contexts() {
    common::run_c_case(
        program(),
        "two_contexts_remote_errors",
        &[
            ("SOFTIB_BIND", "127.0.41.1,127.0.41.2"),
            ("SOFTIB_TRANSPORT", "udp"),
        ],
        Duration::from_secs(120),
    );
}

/// ibv_close_device while a PD, MR, CQs, channel, SRQ and a connected pair with a SEND in
/// flight are alive: the close succeeds, destroying them afterwards does not crash, and a new
/// context works.
#[test]
fn bad_close_device_with_live_objects() {
    run_case("close_with_live_objects");
}

/// A QP on CQs, an SRQ or a PD of another context: NULL + EINVAL (the kernel looks handles up
/// in the caller's context); a UD SEND through an AH of another PD or another context
/// completes in error and delivers nothing (rxe: the AH's PD must be the QP's).
#[test]
fn bad_objects_of_another_context_or_pd() {
    run_case("cross_context_objects");
}

/// GID/P_Key/port queries outside their tables fail as ibv_query_gid_ex(3),
/// ibv_query_gid_table(3), ibv_query_pkey(3), ibv_get_pkey_index(3) and ibv_query_port(3) say.
#[test]
fn bad_query_ranges() {
    run_case("bad_query_ranges");
}

/// After an error completion the QP is in ERR: its receives and every later WR complete with
/// IBV_WC_WR_FLUSH_ERR in order, nothing reaches the peer; RESET and reconnecting revive it.
#[test]
fn bad_error_state_flushes() {
    run_case("error_state_flushes");
}

/// ibv_destroy_qp with WRs outstanding on both queues generates no completions for them (a CQ
/// the application keeps using never returns the dead QP's wr_ids); the other QPs on the same
/// CQs are unaffected.
#[test]
fn destroy_qp_completes_nothing_of_its_outstanding_wrs() {
    run_case("destroy_qp_with_outstanding_wrs");
}

/// UD: a datagram larger than GRH + receive buffer is dropped with the WQE kept (IBA C9-205;
/// rxe's IBV_WC_LOC_LEN_ERR accepted too), no byte past the buffer changes; a wrong Q_Key is
/// dropped; a datagram above the path MTU is refused or fails; nothing of them is received.
#[test]
fn bad_ud_datagrams() {
    run_case("ud_errors");
}

/// ibv_rate_to_mult / mult_to_ibv_rate / ibv_rate_to_mbps / mbps_to_ibv_rate for every rate
/// and for values outside the enum, and the enum strings for unknown values, as rdma-core 44.
#[test]
fn bad_rates_and_strings_out_of_range() {
    run_case("rates_and_strings");
}

/// An atomic whose local buffer is not 8 bytes is refused at post or fails, the target
/// unchanged.
#[test]
fn bad_atomic_local_length() {
    run_case("atomic_local_length");
}

/// num_sge far above max_send_sge / max_recv_sge / the SRQ's max_sge (up to INT_MAX) with a
/// two-entry list just before an unmapped page: refused with bad_wr at the WR before the list
/// is read (as rdma-core's rxe provider), never a fault; ibv_wr_set_sge_list likewise.
#[test]
fn bad_huge_num_sge_is_refused_before_reading_the_list() {
    run_case("huge_num_sge");
}

/// A UD reply addressed with `ibv_create_ah_from_wc` from the request's completion: the
/// network header area of RoCEv2 over IPv4 (20 zero bytes, then the IPv4 header) names the
/// sender's GID and the GID the request went to.
#[test]
fn ud_reply_from_wc() {
    run_case("ud_reply_from_wc");
}

/// ibv_read_sysfs_file reads at most `size` bytes once (not /dev/zero to its end), strips the
/// newline, fails on contents that fill the buffer without one and on a missing file.
#[test]
fn bad_read_sysfs_file_bounds() {
    run_case("read_sysfs_file");
}

/// ibv_create_cq / ibv_create_cq_ex with a comp_vector at or past num_comp_vectors (or
/// negative) or more than max_cqe entries: NULL and EINVAL, as the kernel returns; the last
/// vector and max_cqe work.
#[test]
fn bad_cq_comp_vector_and_size() {
    run_case("bad_cq_comp_vector");
}

/// ibv_create_qp_ex with IBV_QP_INIT_ATTR_CREATE_FLAGS: flags 0 creates the QP; a known flag
/// softib does not implement is EOPNOTSUPP, an unknown one EINVAL.
#[test]
fn create_qp_ex_create_flags() {
    run_case("create_qp_flags");
}

/// A QP moved to RESET or destroyed leaves none of its unpolled completions in its CQs (as
/// mlx4 and mlx5 clean them); another QP's stay, and so does an SRQ's receive completion.
#[test]
fn reset_cleans_the_qps_completions() {
    run_case("reset_cleans_cqs");
}

/// ibv_resize_cq right after UD sends posted while the application polls (when softib defers
/// sends to the next poll): their completions are counted, so resizing below them is EINVAL.
#[test]
fn resize_cq_counts_the_completions_of_deferred_sends() {
    run_case("resize_after_posts");
}

/// What middleware passes and expects as mlx5 and rxe give it: a flow label beyond 20 bits
/// (UCX's ~0) taken with its low 20 bits kept, in `ibv_create_ah` and `ibv_modify_qp`; the L3
/// header type of a UD receive over RoCEv2/IPv4 in `wc.sl` (2, as mlx5 reports it); a CQ of
/// mlx5's 4 194 303 entries.
#[test]
fn middleware_conventions() {
    run_case("middleware_conventions");
}

/// A receive posted into registered memory the program then unmapped (UCX's UD teardown)
/// completes into fresh pages instead of killing the process; the program's own access to
/// that memory still faults, into its own SIGSEGV handler if it has one.
#[test]
fn unmapped_registered_memory() {
    run_case("unmapped_registered_memory");
}

/// Async events of a destroyed QP: an unread one is never delivered, and `ibv_destroy_qp`
/// waits for the acks of those read (rdma-core's ibv_get_async_event(3)).
#[test]
fn destroyed_qp_events_are_not_delivered_and_destroy_waits_for_acks() {
    run_case("destroyed_qp_events");
}
