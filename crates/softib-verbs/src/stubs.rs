//! The rest of rdma-core's exported API, answered without aborting.
//!
//! - `ibv_cmd_*`, `execute_ioctl` and the `verbs_*` driver entry points serve rdma-core's
//!   kernel providers (libmlx5, libefa, ... import them). softib is not a kernel provider:
//!   they fail with EOPNOTSUPP (NULL for pointers), so a provider library linked by a program
//!   (Debian's perftest links libmlx5 and libefa) loads, and its devices simply never appear.
//! - Importing objects from another process's kernel context (`ibv_import_*`), dma-buf
//!   regions and ECE are kernel features softib has no counterpart for: EOPNOTSUPP.
//!
//! The argument lists are those of rdma-core 44; only the return type matters to the ABI of a
//! function that ignores its arguments, so each stub takes none.

use crate::util::{null_errno, ret_errno};

symver!(__ioctl_final_num_attrs);
/// Counts the attributes of an ioctl command buffer; softib issues none.
#[export_name = "softib___ioctl_final_num_attrs"]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: u32) -> u32 {
    num_attrs
}

symver!(__verbs_log);
#[export_name = "softib___verbs_log"]
pub extern "C" fn __verbs_log() {}

symver!(_verbs_init_and_alloc_context);
#[export_name = "softib__verbs_init_and_alloc_context"]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(execute_ioctl);
#[export_name = "softib_execute_ioctl"]
pub extern "C" fn execute_ioctl() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_advise_mr);
#[export_name = "softib_ibv_cmd_advise_mr"]
pub extern "C" fn ibv_cmd_advise_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_alloc_dm);
#[export_name = "softib_ibv_cmd_alloc_dm"]
pub extern "C" fn ibv_cmd_alloc_dm() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_alloc_mw);
#[export_name = "softib_ibv_cmd_alloc_mw"]
pub extern "C" fn ibv_cmd_alloc_mw() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_alloc_pd);
#[export_name = "softib_ibv_cmd_alloc_pd"]
pub extern "C" fn ibv_cmd_alloc_pd() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_attach_mcast);
#[export_name = "softib_ibv_cmd_attach_mcast"]
pub extern "C" fn ibv_cmd_attach_mcast() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_close_xrcd);
#[export_name = "softib_ibv_cmd_close_xrcd"]
pub extern "C" fn ibv_cmd_close_xrcd() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_ah);
#[export_name = "softib_ibv_cmd_create_ah"]
pub extern "C" fn ibv_cmd_create_ah() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_counters);
#[export_name = "softib_ibv_cmd_create_counters"]
pub extern "C" fn ibv_cmd_create_counters() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_cq);
#[export_name = "softib_ibv_cmd_create_cq"]
pub extern "C" fn ibv_cmd_create_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_cq_ex);
#[export_name = "softib_ibv_cmd_create_cq_ex"]
pub extern "C" fn ibv_cmd_create_cq_ex() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_flow);
#[export_name = "softib_ibv_cmd_create_flow"]
pub extern "C" fn ibv_cmd_create_flow() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_flow_action_esp);
#[export_name = "softib_ibv_cmd_create_flow_action_esp"]
pub extern "C" fn ibv_cmd_create_flow_action_esp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_qp);
#[export_name = "softib_ibv_cmd_create_qp"]
pub extern "C" fn ibv_cmd_create_qp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_qp_ex);
#[export_name = "softib_ibv_cmd_create_qp_ex"]
pub extern "C" fn ibv_cmd_create_qp_ex() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_qp_ex2);
#[export_name = "softib_ibv_cmd_create_qp_ex2"]
pub extern "C" fn ibv_cmd_create_qp_ex2() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_rwq_ind_table);
#[export_name = "softib_ibv_cmd_create_rwq_ind_table"]
pub extern "C" fn ibv_cmd_create_rwq_ind_table() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_srq);
#[export_name = "softib_ibv_cmd_create_srq"]
pub extern "C" fn ibv_cmd_create_srq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_srq_ex);
#[export_name = "softib_ibv_cmd_create_srq_ex"]
pub extern "C" fn ibv_cmd_create_srq_ex() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_create_wq);
#[export_name = "softib_ibv_cmd_create_wq"]
pub extern "C" fn ibv_cmd_create_wq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_dealloc_mw);
#[export_name = "softib_ibv_cmd_dealloc_mw"]
pub extern "C" fn ibv_cmd_dealloc_mw() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_dealloc_pd);
#[export_name = "softib_ibv_cmd_dealloc_pd"]
pub extern "C" fn ibv_cmd_dealloc_pd() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_dereg_mr);
#[export_name = "softib_ibv_cmd_dereg_mr"]
pub extern "C" fn ibv_cmd_dereg_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_ah);
#[export_name = "softib_ibv_cmd_destroy_ah"]
pub extern "C" fn ibv_cmd_destroy_ah() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_counters);
#[export_name = "softib_ibv_cmd_destroy_counters"]
pub extern "C" fn ibv_cmd_destroy_counters() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_cq);
#[export_name = "softib_ibv_cmd_destroy_cq"]
pub extern "C" fn ibv_cmd_destroy_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_flow);
#[export_name = "softib_ibv_cmd_destroy_flow"]
pub extern "C" fn ibv_cmd_destroy_flow() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_flow_action);
#[export_name = "softib_ibv_cmd_destroy_flow_action"]
pub extern "C" fn ibv_cmd_destroy_flow_action() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_qp);
#[export_name = "softib_ibv_cmd_destroy_qp"]
pub extern "C" fn ibv_cmd_destroy_qp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_rwq_ind_table);
#[export_name = "softib_ibv_cmd_destroy_rwq_ind_table"]
pub extern "C" fn ibv_cmd_destroy_rwq_ind_table() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_srq);
#[export_name = "softib_ibv_cmd_destroy_srq"]
pub extern "C" fn ibv_cmd_destroy_srq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_destroy_wq);
#[export_name = "softib_ibv_cmd_destroy_wq"]
pub extern "C" fn ibv_cmd_destroy_wq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_detach_mcast);
#[export_name = "softib_ibv_cmd_detach_mcast"]
pub extern "C" fn ibv_cmd_detach_mcast() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_free_dm);
#[export_name = "softib_ibv_cmd_free_dm"]
pub extern "C" fn ibv_cmd_free_dm() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_get_context);
#[export_name = "softib_ibv_cmd_get_context"]
pub extern "C" fn ibv_cmd_get_context() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_cq);
#[export_name = "softib_ibv_cmd_modify_cq"]
pub extern "C" fn ibv_cmd_modify_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_flow_action_esp);
#[export_name = "softib_ibv_cmd_modify_flow_action_esp"]
pub extern "C" fn ibv_cmd_modify_flow_action_esp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_qp);
#[export_name = "softib_ibv_cmd_modify_qp"]
pub extern "C" fn ibv_cmd_modify_qp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_qp_ex);
#[export_name = "softib_ibv_cmd_modify_qp_ex"]
pub extern "C" fn ibv_cmd_modify_qp_ex() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_srq);
#[export_name = "softib_ibv_cmd_modify_srq"]
pub extern "C" fn ibv_cmd_modify_srq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_modify_wq);
#[export_name = "softib_ibv_cmd_modify_wq"]
pub extern "C" fn ibv_cmd_modify_wq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_open_qp);
#[export_name = "softib_ibv_cmd_open_qp"]
pub extern "C" fn ibv_cmd_open_qp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_open_xrcd);
#[export_name = "softib_ibv_cmd_open_xrcd"]
pub extern "C" fn ibv_cmd_open_xrcd() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_poll_cq);
#[export_name = "softib_ibv_cmd_poll_cq"]
pub extern "C" fn ibv_cmd_poll_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_post_recv);
#[export_name = "softib_ibv_cmd_post_recv"]
pub extern "C" fn ibv_cmd_post_recv() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_post_send);
#[export_name = "softib_ibv_cmd_post_send"]
pub extern "C" fn ibv_cmd_post_send() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_post_srq_recv);
#[export_name = "softib_ibv_cmd_post_srq_recv"]
pub extern "C" fn ibv_cmd_post_srq_recv() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_context);
#[export_name = "softib_ibv_cmd_query_context"]
pub extern "C" fn ibv_cmd_query_context() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_device_any);
#[export_name = "softib_ibv_cmd_query_device_any"]
pub extern "C" fn ibv_cmd_query_device_any() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_mr);
#[export_name = "softib_ibv_cmd_query_mr"]
pub extern "C" fn ibv_cmd_query_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_port);
#[export_name = "softib_ibv_cmd_query_port"]
pub extern "C" fn ibv_cmd_query_port() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_qp);
#[export_name = "softib_ibv_cmd_query_qp"]
pub extern "C" fn ibv_cmd_query_qp() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_query_srq);
#[export_name = "softib_ibv_cmd_query_srq"]
pub extern "C" fn ibv_cmd_query_srq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_read_counters);
#[export_name = "softib_ibv_cmd_read_counters"]
pub extern "C" fn ibv_cmd_read_counters() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_reg_dm_mr);
#[export_name = "softib_ibv_cmd_reg_dm_mr"]
pub extern "C" fn ibv_cmd_reg_dm_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_reg_dmabuf_mr);
#[export_name = "softib_ibv_cmd_reg_dmabuf_mr"]
pub extern "C" fn ibv_cmd_reg_dmabuf_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_reg_mr);
#[export_name = "softib_ibv_cmd_reg_mr"]
pub extern "C" fn ibv_cmd_reg_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_req_notify_cq);
#[export_name = "softib_ibv_cmd_req_notify_cq"]
pub extern "C" fn ibv_cmd_req_notify_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_rereg_mr);
#[export_name = "softib_ibv_cmd_rereg_mr"]
pub extern "C" fn ibv_cmd_rereg_mr() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_cmd_resize_cq);
#[export_name = "softib_ibv_cmd_resize_cq"]
pub extern "C" fn ibv_cmd_resize_cq() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_import_device);
#[export_name = "softib_ibv_import_device"]
pub extern "C" fn ibv_import_device() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(ibv_import_dm);
#[export_name = "softib_ibv_import_dm"]
pub extern "C" fn ibv_import_dm() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(ibv_import_mr);
#[export_name = "softib_ibv_import_mr"]
pub extern "C" fn ibv_import_mr() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(ibv_import_pd);
#[export_name = "softib_ibv_import_pd"]
pub extern "C" fn ibv_import_pd() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(ibv_query_ece);
#[export_name = "softib_ibv_query_ece"]
pub extern "C" fn ibv_query_ece() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_reg_dmabuf_mr);
#[export_name = "softib_ibv_reg_dmabuf_mr"]
pub extern "C" fn ibv_reg_dmabuf_mr() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(ibv_set_ece);
#[export_name = "softib_ibv_set_ece"]
pub extern "C" fn ibv_set_ece() -> i32 {
    ret_errno(libc::EOPNOTSUPP)
}

symver!(ibv_unimport_dm);
#[export_name = "softib_ibv_unimport_dm"]
pub extern "C" fn ibv_unimport_dm() {}

symver!(ibv_unimport_mr);
#[export_name = "softib_ibv_unimport_mr"]
pub extern "C" fn ibv_unimport_mr() {}

symver!(ibv_unimport_pd);
#[export_name = "softib_ibv_unimport_pd"]
pub extern "C" fn ibv_unimport_pd() {}

symver!(verbs_init_cq);
#[export_name = "softib_verbs_init_cq"]
pub extern "C" fn verbs_init_cq() {}

symver!(verbs_open_device);
#[export_name = "softib_verbs_open_device"]
pub extern "C" fn verbs_open_device() -> *mut libc::c_void {
    null_errno(libc::EOPNOTSUPP)
}

symver!(verbs_register_driver_34);
#[export_name = "softib_verbs_register_driver_34"]
pub extern "C" fn verbs_register_driver_34() {}

symver!(verbs_set_ops);
#[export_name = "softib_verbs_set_ops"]
pub extern "C" fn verbs_set_ops() {}

symver!(verbs_uninit_context);
#[export_name = "softib_verbs_uninit_context"]
pub extern "C" fn verbs_uninit_context() {}
