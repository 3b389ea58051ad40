//! The device's clock: `CLOCK_MONOTONIC`, or `CLOCK_MONOTONIC_COARSE` where the precise clock
//! is slow to read.
//!
//! A busy-polling device reads its clock once a round, and once after each post. On a
//! machine whose kernel reads time through the vDSO from the TSC that costs tens of
//! nanoseconds. In a VM whose clock source is an emulated device (the HPET, the ACPI PM
//! timer), every read is a system call and an emulated device access: 2.7 µs in the qemu
//! guest of `../shared/interop/rxe-vm`, several per message on the critical path of a
//! ping-pong. The coarse clock is read from the vDSO there too (44 ns), but lags true time
//! by up to a tick of the kernel (4 ms at HZ=250). The HCA is told how much
//! ([`softib_core::hca::Hca::set_clock_lag`]) so that its timers never expire early.
//!
//! The clocks are read through the C library (`clock_gettime(3)`), which takes the vDSO where
//! there is one, and also runs under valgrind, which gives its programs no vDSO.

// The `libc` call of `ask`.
#![allow(unsafe_code)]

use std::time::Duration;

use libc::{clockid_t, timespec, CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE};
use softib_core::time::Instant;

/// Which clock a device reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockChoice {
    /// The coarse clock if reading the precise one costs more than [`SLOW_CLOCK_NS`], else
    /// the precise one.
    #[default]
    Auto,
    /// `CLOCK_MONOTONIC`.
    Precise,
    /// `CLOCK_MONOTONIC_COARSE`.
    Coarse,
}

impl std::str::FromStr for ClockChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<ClockChoice, String> {
        match s {
            "auto" => Ok(ClockChoice::Auto),
            "precise" => Ok(ClockChoice::Precise),
            "coarse" => Ok(ClockChoice::Coarse),
            other => Err(format!("clock {other:?}: auto, precise or coarse")),
        }
    }
}

impl std::fmt::Display for ClockChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockChoice::Auto => "auto",
            ClockChoice::Precise => "precise",
            ClockChoice::Coarse => "coarse",
        })
    }
}

/// A precise clock read that costs more than this makes [`ClockChoice::Auto`] choose the
/// coarse clock. A vDSO read from the TSC costs 20–50 ns; a system call alone costs more
/// than this.
pub const SLOW_CLOCK_NS: u64 = 500;

/// [`ClockChoice::Auto`] times [`PROBE_BATCHES`] batches of [`PROBE_READS`] precise reads
/// (after one to warm up) and takes the cheapest batch: a batch the thread was preempted in
/// does not count.
const PROBE_READS: u32 = 16;
const PROBE_BATCHES: u32 = 4;

/// A device's clock: nanoseconds since the device was made.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    coarse: bool,
    epoch_ns: u64,
    lag: Duration,
}

impl Clock {
    /// The clock `choice` asks for; [`ClockChoice::Auto`] measures the precise clock's cost
    /// first.
    pub fn new(choice: ClockChoice) -> Clock {
        let coarse = match choice {
            ClockChoice::Precise => false,
            ClockChoice::Coarse => true,
            ClockChoice::Auto => precise_read_ns() > SLOW_CLOCK_NS,
        };
        // Coarse readings lag by up to a tick, the clock's resolution; twice that allows for
        // a tick that comes late.
        let lag = if coarse {
            2 * Duration::from_nanos(resolution(CLOCK_MONOTONIC_COARSE))
                .max(Duration::from_millis(1))
        } else {
            Duration::ZERO
        };
        Clock {
            coarse,
            epoch_ns: read(CLOCK_MONOTONIC),
            lag,
        }
    }

    /// Now, on this clock.
    #[inline]
    pub fn now(&self) -> Instant {
        let id = if self.coarse {
            CLOCK_MONOTONIC_COARSE
        } else {
            CLOCK_MONOTONIC
        };
        Instant::from_nanos(read(id).saturating_sub(self.epoch_ns))
    }

    /// True for the coarse clock.
    pub fn is_coarse(&self) -> bool {
        self.coarse
    }

    /// How far a reading may lag true time: 0 for the precise clock.
    pub fn lag(&self) -> Duration {
        self.lag
    }
}

/// What one precise read costs, in nanoseconds: the average of the cheapest batch.
fn precise_read_ns() -> u64 {
    let _ = read(CLOCK_MONOTONIC);
    (0..PROBE_BATCHES)
        .map(|_| {
            let start = read(CLOCK_MONOTONIC);
            for _ in 0..PROBE_READS {
                std::hint::black_box(read(CLOCK_MONOTONIC));
            }
            read(CLOCK_MONOTONIC).saturating_sub(start) / u64::from(PROBE_READS + 1)
        })
        .min()
        .unwrap_or(0)
}

/// Clock `id` now, in nanoseconds (0 if it cannot be read; the two clocks here always can).
#[inline]
fn read(id: clockid_t) -> u64 {
    ask(libc::clock_gettime, id)
}

/// `CLOCK_BOOTTIME` now, in nanoseconds: one clock for every process of the host, running
/// through suspend (the host table's times, [`crate::host`]).
pub(crate) fn boot_ns() -> u64 {
    read(libc::CLOCK_BOOTTIME)
}

/// The resolution of clock `id`, in nanoseconds.
fn resolution(id: clockid_t) -> u64 {
    ask(libc::clock_getres, id)
}

/// What `f` (`clock_gettime` or `clock_getres`) says of clock `id`, in nanoseconds.
#[inline(always)]
fn ask(f: unsafe extern "C" fn(clockid_t, *mut timespec) -> libc::c_int, id: clockid_t) -> u64 {
    let mut t = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both functions write the one timespec they are given.
    unsafe { f(id, &mut t) };
    nanos(&t)
}

fn nanos(t: &timespec) -> u64 {
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_print() {
        for c in [ClockChoice::Auto, ClockChoice::Precise, ClockChoice::Coarse] {
            assert_eq!(c.to_string().parse::<ClockChoice>(), Ok(c));
        }
        assert!("fast".parse::<ClockChoice>().is_err());
    }

    #[test]
    fn precise_clock_has_no_lag_and_moves() {
        let c = Clock::new(ClockChoice::Precise);
        assert!(!c.is_coarse());
        assert_eq!(c.lag(), Duration::ZERO);
        let a = c.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.now().duration_since(a) >= Duration::from_millis(2));
    }

    #[test]
    fn coarse_clock_lags_within_its_bound() {
        let c = Clock::new(ClockChoice::Coarse);
        let p = Clock { coarse: false, ..c };
        assert!(c.is_coarse());
        assert!(c.lag() >= Duration::from_millis(2));
        for _ in 0..1000 {
            let coarse = c.now();
            let precise = p.now();
            // Read second, the precise reading is later; the coarse one lags it by at most
            // the lag the HCA is told.
            assert!(coarse <= precise, "{coarse:?} > {precise:?}");
            assert!(precise.duration_since(coarse) <= c.lag());
        }
        // It moves, a tick at a time.
        let a = c.now();
        std::thread::sleep(c.lag());
        assert!(c.now() > a);
    }
}
