//! Every documented bound of the core, with the texts error messages quote.
//!
//! A leaf: error texts (`error`), rule validation (`rule`), the parsers (`parse`) and the
//! algorithms all read these, so none of them imports another for a constant. The modules that
//! named them first re-export them (`rule::MAX_COUNT`, `reservations::MAX_ID_LEN`, ...), so those
//! paths keep working.

/// Microseconds in a day, for bounds written in days.
pub const DAY_US: u64 = 24 * 3600 * 1_000_000;

/// Largest `limit`, `BURST` and `COST` accepted (10^15).
pub const MAX_COUNT: u64 = 1_000_000_000_000_000;
/// Longest `period` accepted, and the longest time a full capacity may take to refill.
pub const MAX_PERIOD_US: u64 = 3650 * DAY_US;
pub const MAX_PERIOD_TEXT: &str = "3650d";
/// Largest `limit` for `ALGO log`, which keeps one entry per admitted request and propagates
/// the whole log with each admission (12 bytes an entry).
pub const MAX_LOG_LIMIT: u64 = 10_000;
/// Largest semaphore capacity (live leases per key), and the most leases a key may keep.
pub const MAX_SEMAPHORE_CAPACITY: u64 = 100_000;
/// How far ahead of this server's clock a state from elsewhere (`RESTORE`, `MIGRATE`, a client's
/// `RL.SETSTATE` or `RL.LEASESET`) may have counted: the clock skew tolerated between servers.
/// A state further ahead is refused, since no command on a clock within it could have made it.
pub const MAX_CLOCK_SKEW_US: u64 = 3600 * 1_000_000;
pub const MAX_CLOCK_SKEW_TEXT: &str = "1h";

/// Longest reservation id, in bytes.
pub const MAX_ID_LEN: usize = 256;
/// Most reservations one key keeps at once.
pub const MAX_RESERVATIONS: usize = 10_000;
/// How long a reservation is kept when `KEEP` is not given.
pub const DEFAULT_KEEP_US: u64 = 3600 * 1_000_000;
/// Longest `KEEP`.
pub const MAX_KEEP_US: u64 = 7 * DAY_US;
