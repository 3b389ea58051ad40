//! Virtual time.
//!
//! softib-core never reads a clock: every input that depends on time carries an [`Instant`]
//! supplied by the driver (the discrete-event simulator or the UDP driver, which maps the OS
//! clock onto it). An `Instant` is a count of nanoseconds since an arbitrary origin
//! ([`Instant::ZERO`]); spans are ordinary [`core::time::Duration`]s.
//!
//! Arithmetic never panics: additions are checked or saturating, and
//! [`Instant::duration_since`] saturates at zero.

use core::fmt;
use core::time::Duration;

/// A point in virtual time, in nanoseconds since [`Instant::ZERO`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin of virtual time.
    pub const ZERO: Instant = Instant(0);
    /// The last representable instant (about 584 years after [`Instant::ZERO`]).
    pub const MAX: Instant = Instant(u64::MAX);

    /// The instant `nanos` nanoseconds after [`Instant::ZERO`].
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since [`Instant::ZERO`].
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, or `None` if the result is past [`Instant::MAX`].
    #[inline]
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let ns = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(ns).map(Instant)
    }

    /// `self + d`, clamped to [`Instant::MAX`].
    #[inline]
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::MAX)
    }

    /// `self - d`, or `None` if the result is before [`Instant::ZERO`].
    #[inline]
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        let ns = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_sub(ns).map(Instant)
    }

    /// Time elapsed from `earlier` to `self`, or `None` if `earlier` is later than `self`.
    #[inline]
    pub fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later than `self`.
    #[inline]
    pub fn duration_since(self, earlier: Instant) -> Duration {
        self.checked_duration_since(earlier)
            .unwrap_or(Duration::ZERO)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instant({}ns)", self.0)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0 / 1_000_000_000;
        let ns = self.0 % 1_000_000_000;
        write!(f, "{s}.{ns:09}s")
    }
}

/// The IBA time unit of transport timers: 4.096 µs, exactly 4096 ns.
pub const TRANSPORT_TIMER_UNIT_NS: u64 = 4096;

/// Largest meaningful exponent of a 5-bit timer field (QP `timeout`, `alt_timeout`).
pub const MAX_TIMER_EXPONENT: u8 = 31;

/// The local ACK timeout encoded by a 5-bit exponent: 4.096 µs × 2^`exp` (IBA 9.7.6.1.3,
/// 11.2.4.2 "Local Ack Timeout"). `0` means infinite and yields `None`.
///
/// The result is exact in nanoseconds (4096 ns × 2^`exp`). The QP attribute is 5 bits wide and
/// `modify_qp` rejects larger values; an exponent above 31 is treated as 31 here.
pub fn transport_timer(exp: u8) -> Option<Duration> {
    if exp == 0 {
        return None;
    }
    let exp = exp.min(MAX_TIMER_EXPONENT);
    Some(Duration::from_nanos(TRANSPORT_TIMER_UNIT_NS << exp))
}

/// When a transport timer of exponent `exp` started at `now` expires, on a clock whose
/// readings may lag true time by up to `lag` ([`crate::hca::Hca::set_clock_lag`]); `None`
/// for the infinite timeout.
///
/// - It expires `lag` later than `now + Ttr`: never before Ttr has truly passed (C9-141's
///   lower bound).
/// - Ttr is at least `lag`: the smallest nonzero timeout such an HCA supports, which it
///   uses for smaller ones (C9-140). Expiring up to `lag` late, plus a tick of the clock,
///   then stays within C9-141's upper bound of 4 Ttr.
///
/// With `lag` 0 this is `now + Ttr`.
pub fn transport_deadline(now: Instant, exp: u8, lag: Duration) -> Option<Instant> {
    transport_timer(exp).map(|d| now.saturating_add(d.max(lag)).saturating_add(lag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_deadline_on_a_lagging_clock() {
        let t = Instant::from_nanos(1_000);
        let ttr = transport_timer(14).unwrap();
        assert_eq!(transport_deadline(t, 0, Duration::from_millis(8)), None);
        assert_eq!(
            transport_deadline(t, 14, Duration::ZERO),
            Some(t.saturating_add(ttr))
        );
        let lag = Duration::from_millis(8);
        assert_eq!(
            transport_deadline(t, 14, lag),
            Some(t.saturating_add(ttr + lag))
        );
        // Below the lag, Ttr is the lag (4.096 µs × 2^10 = 4.19 ms < 8 ms).
        assert_eq!(
            transport_deadline(t, 10, lag),
            Some(t.saturating_add(2 * lag))
        );
    }

    #[test]
    fn instant_arithmetic() {
        let t = Instant::from_nanos(1_000);
        assert_eq!(
            t.checked_add(Duration::from_nanos(24)),
            Some(Instant::from_nanos(1_024))
        );
        assert_eq!(Instant::MAX.checked_add(Duration::from_nanos(1)), None);
        assert_eq!(
            Instant::MAX.saturating_add(Duration::from_secs(1)),
            Instant::MAX
        );
        // A Duration wider than u64 nanoseconds does not wrap.
        assert_eq!(Instant::ZERO.checked_add(Duration::MAX), None);
        assert_eq!(Instant::ZERO.saturating_add(Duration::MAX), Instant::MAX);
        assert_eq!(t.checked_sub(Duration::from_nanos(1_001)), None);
        assert_eq!(
            t.checked_sub(Duration::from_nanos(1)),
            Some(Instant::from_nanos(999))
        );
        let later = Instant::from_nanos(5_000);
        assert_eq!(later.duration_since(t), Duration::from_nanos(4_000));
        assert_eq!(t.duration_since(later), Duration::ZERO);
        assert_eq!(t.checked_duration_since(later), None);
        assert!(t < later);
        assert_eq!(Instant::ZERO.as_nanos(), 0);
    }

    #[test]
    fn instant_display() {
        assert_eq!(
            Instant::from_nanos(1_500_000_007).to_string(),
            "1.500000007s"
        );
        assert_eq!(format!("{:?}", Instant::from_nanos(3)), "Instant(3ns)");
    }

    #[test]
    fn transport_timer_values() {
        assert_eq!(transport_timer(0), None);
        assert_eq!(transport_timer(1), Some(Duration::from_nanos(8_192)));
        // 14 is the usual rdma-core default: 4.096 µs × 16384 = 67.108864 ms.
        assert_eq!(transport_timer(14), Some(Duration::from_nanos(67_108_864)));
        // 31 is the largest 5-bit value: 4096 × 2^31 ns ≈ 2.4 h.
        assert_eq!(
            transport_timer(31),
            Some(Duration::from_nanos(4096u64 << 31))
        );
        assert_eq!(transport_timer(200), transport_timer(31));
        for e in 1..=31u8 {
            let d = transport_timer(e).unwrap();
            assert_eq!(d.as_nanos(), 4096u128 * (1u128 << e));
        }
    }
}
