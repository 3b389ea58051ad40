//! softib-fabric: a deterministic discrete-event Ethernet fabric for sans-IO RoCEv2 endpoints.
//!
//! Endpoints (softib's HCA, or the [`toy`] ones) implement [`Endpoint`]: they take frames and
//! timeouts and hand out frames, never reading a clock. A [`Fabric`] attaches them to one
//! non-blocking switch (a star), moves whole Ethernet frames between them over links with
//! latency, bandwidth, MTU and jitter ([`LinkConfig`], model in [`link`]), impairs them with
//! random [`Faults`] and scripted [`Rule`]s, and runs everything on virtual time: plain `u64`
//! nanoseconds from the start of the run.
//!
//! **Determinism.** One seed drives every random choice (each link direction draws from its own
//! stream of [`rng`]), the event queue breaks ties by scheduling order, and nothing depends on
//! wall-clock time, address hashing or thread scheduling: the same endpoints, configuration and
//! seed give the same run bit for bit, which [`Fabric::trace_hash`] summarises. The generator
//! and the digest are fixed forever; the order in which the fabric consumes random numbers is
//! documented in [`faults`] and changes only with a new softib-fabric version.
//!
//! **Driving it.** [`Fabric::step`], [`Fabric::run_until`], [`Fabric::run_until_idle`] and
//! [`Fabric::drive_bounded`] run events; after posting work to an endpoint through
//! [`Fabric::node_mut`] (or calling [`Fabric::kick`]) the next step polls it. Counters:
//! [`Fabric::stats`] per link direction, [`Fabric::totals`], [`Fabric::rule_stats`]; captures:
//! [`Fabric::capture_pcap`].
//!
//! # Quick start
//!
//! ```
//! use softib_fabric::toy::{Addr, Receiver, Toy, UdSender};
//! use softib_fabric::{Fabric, Faults, LinkConfig, RunOutcome};
//!
//! let (a, b) = (Addr::host(1), Addr::host(2));
//! let mut fabric = Fabric::new(7);
//! let link = LinkConfig::new(1_000, 10_000_000_000).with_faults(Faults {
//!     loss: 0.01,
//!     ..Faults::none()
//! });
//! let tx = fabric.add_node(Toy::Sender(UdSender::new(a, b, 1_000, 256)), a.mac, link.clone());
//! let rx = fabric.add_node(Toy::Receiver(Receiver::new()), b.mac, link);
//! assert_eq!(fabric.run_until_idle(u64::MAX), RunOutcome::Idle);
//! let got = fabric.node(rx).as_receiver().unwrap().frames;
//! assert!(got > 950 && got < 1_000);
//! assert_eq!(fabric.node(tx).as_sender().unwrap().sent(), 1_000);
//! ```

#![forbid(unsafe_code)]

pub mod endpoint;
mod events;
pub mod fabric;
pub mod faults;
pub mod hash;
pub mod link;
mod queue;
pub mod rng;
pub mod toy;

pub use endpoint::Endpoint;
pub use fabric::{Capture, Fabric, LinkLayer, NodeId, RunOutcome, SwitchStats, Totals};
pub use faults::{Action, BurstLoss, Faults, Match, Rule, RuleId, RuleStats};
pub use link::{serialisation_ns, Direction, LinkConfig, LinkStats};
