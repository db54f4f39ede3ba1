//! The core's two clocks, as two types that do not mix.
//!
//! The core reads no clock: every call that needs time takes it as an input. Hosts have two
//! clocks, and the core uses both, for different things:
//!
//! - [`Mono`]: milliseconds on the host's **monotonic** clock (`performance.now()`,
//!   `tokio::time::Instant` since the host started). It never jumps, so deadlines, timers,
//!   backoffs and `poll_timeout` are computed on it. Its origin is arbitrary: a `Mono` means
//!   nothing outside the process that took it, so it is never written to disk or the wire as a
//!   timestamp.
//! - [`Wall`]: milliseconds since the Unix epoch, UTC, on the host's **wall** clock
//!   (`Date.now()`, `SystemTime`). It can jump (NTP, a user setting the clock), so it is never
//!   used to time a wait; it is what timestamps written to disk or the wire carry (frames and
//!   receipts, chat lines, expiry times a restarted process must still understand).
//!
//! Keeping them as distinct newtypes makes passing one where the other is meant a compile
//! error; there is no conversion between them. Durations are plain `u64` milliseconds: an
//! instant plus a duration is an instant of the same clock, the difference of two instants of
//! one clock is a duration. Both serialize as the bare number (`#[serde(transparent)]`), so
//! every wire and disk format is the one a `u64` had.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

macro_rules! instant {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(u64);

        impl $name {
            /// The clock's origin (0 ms).
            pub const ZERO: Self = Self(0);
            /// The latest instant this type holds (`u64::MAX` ms); additions saturate at it.
            pub const MAX: Self = Self(u64::MAX);

            /// The instant `ms` milliseconds after this clock's origin (a host wraps its clock
            /// reading with it, at the binding).
            #[must_use]
            pub const fn from_ms(ms: u64) -> Self {
                Self(ms)
            }

            /// The milliseconds since this clock's origin (a host unwraps with it, at the
            /// binding or to arm a timer).
            #[must_use]
            pub const fn as_ms(self) -> u64 {
                self.0
            }

            /// `self + ms`, saturating at [`Self::MAX`].
            #[must_use]
            pub const fn plus(self, ms: u64) -> Self {
                Self(self.0.saturating_add(ms))
            }

            /// `self - ms`, saturating at [`Self::ZERO`].
            #[must_use]
            pub const fn minus(self, ms: u64) -> Self {
                Self(self.0.saturating_sub(ms))
            }

            /// The milliseconds from `earlier` to `self`; 0 when `earlier` is not earlier.
            #[must_use]
            pub const fn since(self, earlier: Self) -> u64 {
                self.0.saturating_sub(earlier.0)
            }
        }

        /// An instant plus a duration in milliseconds (saturating).
        impl Add<u64> for $name {
            type Output = Self;
            fn add(self, ms: u64) -> Self {
                self.plus(ms)
            }
        }

        /// An instant minus a duration in milliseconds (saturating at the origin).
        impl Sub<u64> for $name {
            type Output = Self;
            fn sub(self, ms: u64) -> Self {
                self.minus(ms)
            }
        }

        impl AddAssign<u64> for $name {
            fn add_assign(&mut self, ms: u64) {
                *self = self.plus(ms);
            }
        }

        /// The bare number of milliseconds, as the wire and disk formats write it.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

instant! {
    /// An instant on the host's monotonic clock, in milliseconds from an arbitrary origin:
    /// what deadlines, timers and `poll_timeout` are measured on. Never a timestamp to persist.
    Mono
}

instant! {
    /// An instant on the host's wall clock: milliseconds since the Unix epoch, UTC. What
    /// timestamps written to disk or the wire carry; never used to time a wait.
    Wall
}

/// One reading of both host clocks, for a call that needs both: a wait or deadline it arms
/// (on [`Mono`]) and a timestamp it writes (on [`Wall`]). The host takes the two readings
/// together; the core never derives one from the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// The monotonic reading: what deadlines and timers are computed on.
    pub mono: Mono,
    /// The wall-clock reading: what written timestamps carry.
    pub wall: Wall,
}

impl Now {
    /// Both readings, taken together by the host.
    #[must_use]
    pub const fn new(mono: Mono, wall: Wall) -> Self {
        Self { mono, wall }
    }

    /// This reading `ms` milliseconds later on both clocks (simulated time in tests and
    /// vectors).
    #[must_use]
    pub const fn plus(self, ms: u64) -> Self {
        Self {
            mono: self.mono.plus(ms),
            wall: self.wall.plus(ms),
        }
    }

    /// The wall-clock time of a monotonic instant `at` taken in this process: this reading's
    /// wall time minus how long ago `at` was (an `at` later than the reading maps to its wall
    /// time). For persisting when something the core timed on [`Mono`] happened.
    #[must_use]
    pub const fn wall_of(self, at: Mono) -> Wall {
        if at.as_ms() >= self.mono.as_ms() {
            self.wall.plus(at.since(self.mono))
        } else {
            self.wall.minus(self.mono.since(at))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_serializes_as_the_bare_number() {
        let t = Mono::from_ms(1_000);
        assert_eq!((t + 500).as_ms(), 1_500);
        assert_eq!(Mono::MAX + 1, Mono::MAX);
        assert_eq!(t.minus(2_000), Mono::ZERO);
        assert_eq!((t + 250).since(t), 250);
        assert_eq!(t.since(t + 250), 0);
        let w = Wall::from_ms(1_790_000_000_123);
        assert_eq!(serde_json::to_string(&w).unwrap(), "1790000000123");
        assert_eq!(
            serde_json::from_str::<Wall>("42").unwrap(),
            Wall::from_ms(42)
        );
        assert_eq!(format!("{t}"), "1000");
    }

    #[test]
    fn a_monotonic_instant_maps_to_the_wall_time_of_the_same_reading() {
        let now = Now::new(Mono::from_ms(10_000), Wall::from_ms(1_790_000_000_000));
        assert_eq!(
            now.wall_of(Mono::from_ms(9_750)),
            Wall::from_ms(1_789_999_999_750)
        );
        assert_eq!(
            now.wall_of(Mono::from_ms(10_040)),
            Wall::from_ms(1_790_000_000_040)
        );
        assert_eq!(now.plus(5).wall_of(now.mono.plus(5)), now.wall.plus(5));
    }
}
