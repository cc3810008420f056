//! A retry helper for a service's outgoing calls (`clients/CONTRACT.md` section 5): jittered
//! exponential backoff, the server's `Retry-After` as the floor of the next wait, capped
//! attempts, and one idempotency key for every attempt of a non-idempotent call, so a retried
//! request is not charged or applied twice. Generic over the HTTP client: the call is any async
//! closure whose reply exposes a status and headers.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The header carrying [`Attempt::idempotency_key`].
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// What the helper needs of a reply.
pub trait Reply {
    fn status(&self) -> u16;
    /// The first value of a header, by case-insensitive name.
    fn header(&self, name: &str) -> Option<&str>;
}

/// One attempt of a call, handed to the closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The same on every attempt; set for non-idempotent methods (send it as `Idempotency-Key`).
    pub idempotency_key: Option<Arc<str>>,
}

/// Methods that RFC 9110 defines as idempotent: repeating them needs no key.
pub fn is_idempotent(method: &str) -> bool {
    ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
}

/// Statuses worth another attempt: the server asked for one or could not serve for now.
pub fn is_retryable(status: u16) -> bool {
    matches!(status, 408 | 425 | 429 | 500 | 502 | 503 | 504)
}

/// A fresh idempotency key: 128 random bits in hex.
pub fn new_idempotency_key() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// `Retry-After` as a wait from `now`: delay-seconds or an HTTP date (a date in the past is no
/// wait). `None` when the value is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More seconds than u64 holds is still "a very long time".
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The retry schedule: attempt n waits a uniform draw in [d/2, d] with d = min(`cap`,
/// `base` × 2^(n−1)), or the server's `Retry-After` when that is longer. A `Retry-After` beyond
/// `cap` ends the retries: the caller gets the reply rather than a request stuck for minutes.
#[derive(Debug)]
pub struct Retry {
    base: Duration,
    cap: Duration,
    max_attempts: u32,
    rng: Mutex<fastrand::Rng>,
}

impl Retry {
    pub fn new(base: Duration, cap: Duration, max_attempts: u32) -> Retry {
        Retry {
            base,
            cap,
            max_attempts: max_attempts.max(1),
            rng: Mutex::new(fastrand::Rng::new()),
        }
    }

    /// The same schedule with a seeded jitter, for reproducible runs.
    pub fn with_seed(self, seed: u64) -> Retry {
        Retry {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            ..self
        }
    }

    /// The backoff bound d before jitter, after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32
            .checked_pow(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait after failed attempt `attempt`, or `None` to stop (`Retry-After` above `cap`).
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if retry_after.is_some_and(|r| r > self.cap) {
            return None;
        }
        let d = self.backoff(attempt);
        let draw = self.rng.lock().unwrap_or_else(|p| p.into_inner()).f64();
        let jittered = d / 2 + d.mul_f64(draw) / 2;
        Some(jittered.max(retry_after.unwrap_or_default()))
    }

    /// Calls `call` until it returns a reply that is not retryable, the attempts run out, or the
    /// server asks for a wait beyond `cap`; returns the last result. Transport errors are
    /// retried too: the idempotency key makes that safe for non-idempotent methods.
    /// `idempotency_key` is the caller's own key, if it has one; otherwise one is generated for
    /// non-idempotent methods.
    pub async fn run<R, E, F, Fut>(
        &self,
        method: &str,
        idempotency_key: Option<String>,
        mut call: F,
    ) -> Result<R, E>
    where
        R: Reply,
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let key: Option<Arc<str>> = match idempotency_key {
            Some(k) => Some(k.into()),
            None if !is_idempotent(method) => Some(new_idempotency_key().into()),
            None => None,
        };
        let mut number = 1;
        loop {
            let result = call(Attempt {
                number,
                idempotency_key: key.clone(),
            })
            .await;
            let retry_after = match &result {
                Ok(reply) if !is_retryable(reply.status()) => return result,
                Ok(reply) => reply
                    .header("retry-after")
                    .and_then(|v| parse_retry_after(v, SystemTime::now())),
                Err(_) => None,
            };
            if number >= self.max_attempts {
                return result;
            }
            let Some(wait) = self.wait(number, retry_after) else {
                return result;
            };
            tokio::time::sleep(wait).await;
            number += 1;
        }
    }
}
