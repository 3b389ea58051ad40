//! softib-sim: softib scenarios on the deterministic fabric.
//!
//! Node A runs a stream of RC or UC operations towards node B over one or more QP pairs through
//! a simulated switch with configurable latency, bandwidth and faults. Every run verifies its own
//! data: every SEND and WRITE payload is checked at the responder, every READ and atomic result
//! at the requester, with per-operation patterns that expose loss, duplication and misplacement.
//! UC delivers what it can: messages that do not arrive whole are reported as lost.
//! The same configuration always gives the same report (apart from the wall time).

#![forbid(unsafe_code)]

pub mod config;
mod node;
mod pattern;
pub mod run;
pub mod scaling;
pub mod svg;

pub use config::{LinkLayer, OpKind, Service, SimConfig};
pub use node::SimNode;
pub use run::{build, run, QpReport, SimReport};
