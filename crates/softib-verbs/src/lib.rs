//! softib-verbs: softib as a drop-in `libibverbs.so.1`.
//!
//! Programs built against rdma-core's libibverbs run on softib unchanged when this library is
//! first on the loader path (`softib run -- PROGRAM`, or `LD_LIBRARY_PATH=<repo>/lib`). The
//! library exports every symbol rdma-core 44 exports, at the same version nodes
//! (`symbols.tsv`, `build.rs`); the structures it fills are rdma-core's own, generated from
//! Debian's `<infiniband/verbs.h>` (`verbs_h.rs`, checked field by field against the header by
//! `tests/abi_layout.rs`).
//!
//! Each opened device is a [`softib_udp::Device`] (one HCA and one RoCEv2 UDP socket) behind a
//! mutex, shared by the application's threads and one progress thread per context: the
//! application's own calls (`ibv_post_send`, `ibv_poll_cq`) drive the engine while it polls,
//! and the progress thread answers the passive side (RDMA WRITE/READ/atomics, ACKs, timers)
//! and raises completion-channel and async events while the application sleeps.
//!
//! Every pointer from C is untrusted: NULL and objects this library did not hand out (or
//! already freed) are refused with the documented errno on every control verb (see
//! [`registry`]); the data path checks keys, bounds and access rights in the core.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![allow(clippy::missing_safety_doc)]

// `symver!`: the `.symver` alias of an exported symbol (see build.rs). Defined before the
// modules that use it.
include!(concat!(env!("OUT_DIR"), "/symver.rs"));

pub mod cma;
#[allow(dead_code, clippy::all)]
pub mod cma_h;
mod config;
mod context;
mod convert;
mod cq;
mod device;
mod ex;
mod fault;
mod kern;
#[allow(dead_code, clippy::all)]
pub mod kern_h;
mod misc;
mod mr;
mod qp;
mod rd;
pub mod registry;
mod stubs;
mod util;
#[allow(dead_code, clippy::all, unsafe_op_in_unsafe_fn)]
pub mod verbs_h;
mod xrc;

pub use config::{DeviceSpec, FIRST_LOOPBACK, LAST_LOOPBACK};
