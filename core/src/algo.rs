//! [`Algo`], the algorithms a key may hold, and their [`Family`]: which convert into each other.
//!
//! A leaf, so that error texts (`error`) name the algorithms without importing `rule`, which
//! builds its errors from them. Parsing an `ALGO` argument returns an error, so it lives in
//! `rule` ([`Algo::parse`]); `rule` re-exports both types.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Gcra,
    Bucket,
    Window,
    Sliding,
    Log,
    /// Not a rate: the concurrency semaphore of `RL.ACQUIRE`, which shares the key type.
    Semaphore,
}

impl Algo {
    pub const ALL: [Algo; 6] = [
        Algo::Gcra,
        Algo::Bucket,
        Algo::Window,
        Algo::Sliding,
        Algo::Log,
        Algo::Semaphore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algo::Gcra => "gcra",
            Algo::Bucket => "bucket",
            Algo::Window => "window",
            Algo::Sliding => "sliding",
            Algo::Log => "log",
            Algo::Semaphore => "semaphore",
        }
    }

    /// Algorithms whose states convert into each other without inventing capacity.
    pub fn family(self) -> Family {
        match self {
            Algo::Gcra | Algo::Bucket => Family::Rate,
            Algo::Window | Algo::Sliding => Family::Window,
            Algo::Log => Family::Log,
            Algo::Semaphore => Family::Semaphore,
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Algo::Gcra => 0,
            Algo::Bucket => 1,
            Algo::Window => 2,
            Algo::Sliding => 3,
            Algo::Log => 4,
            Algo::Semaphore => 5,
        }
    }

    pub fn from_code(code: u8) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.code() == code)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Rate,
    Window,
    Log,
    Semaphore,
}
