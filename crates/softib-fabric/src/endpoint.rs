//! The sans-IO contract between the fabric and the things attached to it.

/// A network endpoint that the fabric drives: it consumes frames and timeouts and produces
/// frames, never touching a clock or a socket itself (the quinn-proto pattern).
///
/// Frames are whole Ethernet frames without FCS, exactly what a NIC puts on the wire (for
/// RoCEv2: Ethernet + IPv4/IPv6 + UDP 4791 + BTH ... ICRC). Times are virtual nanoseconds
/// since the start of the simulation.
///
/// The fabric calls, for one node at a time and never re-entrantly:
/// * [`handle_frame`](Endpoint::handle_frame) when a frame arrives,
/// * [`handle_timeout`](Endpoint::handle_timeout) when the deadline last reported by
///   [`poll_timeout`](Endpoint::poll_timeout) is reached,
///
/// and after each of those (and after [`crate::Fabric::kick`] / [`crate::Fabric::node_mut`]) it
/// drains [`poll_transmit`](Endpoint::poll_transmit) until it returns `false`, then asks
/// [`poll_timeout`](Endpoint::poll_timeout) again. An endpoint's deadline is only re-read at
/// those points.
pub trait Endpoint {
    /// A frame arrived at `now_ns`. The bytes are untrusted (they may be corrupted).
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]);

    /// Writes the next frame to send into `out` (which the fabric has cleared) and returns
    /// `true`, or returns `false` when there is nothing to send now.
    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool;

    /// The next time at which [`handle_timeout`](Endpoint::handle_timeout) should run, if any.
    /// A deadline in the past fires at the current time.
    fn poll_timeout(&self) -> Option<u64>;

    /// The deadline reported by [`poll_timeout`](Endpoint::poll_timeout) was reached.
    fn handle_timeout(&mut self, now_ns: u64);
}

impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        (**self).handle_frame(now_ns, frame)
    }
    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        (**self).poll_transmit(now_ns, out)
    }
    fn poll_timeout(&self) -> Option<u64> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now_ns: u64) {
        (**self).handle_timeout(now_ns)
    }
}
