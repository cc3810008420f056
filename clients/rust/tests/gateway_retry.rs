// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use redis_rl_client::gateway::retry::{
    is_idempotent, new_idempotency_key, parse_retry_after, Attempt, Reply, Retry,
};
use tokio::time::Instant;

/// A scripted reply: what any HTTP client's response reduces to for the helper.
#[derive(Debug, Clone)]
struct Scripted {
    status: u16,
    retry_after: Option<&'static str>,
}

impl Reply for Scripted {
    fn status(&self) -> u16 {
        self.status
    }
    fn header(&self, name: &str) -> Option<&str> {
        name.eq_ignore_ascii_case("retry-after")
            .then_some(self.retry_after)
            .flatten()
    }
}

type Script = VecDeque<Result<Scripted, &'static str>>;

/// Runs `retry` over a script, returning the result, the attempts seen and when each began.
async fn play(
    retry: &Retry,
    method: &str,
    key: Option<String>,
    script: Script,
) -> (Result<Scripted, &'static str>, Vec<(Attempt, Duration)>) {
    let t0 = Instant::now();
    let script = Arc::new(Mutex::new(script));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let result = retry
        .run(method, key, |attempt| {
            let script = script.clone();
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push((attempt, t0.elapsed()));
                script
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("the script ran out")
            }
        })
        .await;
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

fn reply(status: u16, retry_after: Option<&'static str>) -> Result<Scripted, &'static str> {
    Ok(Scripted {
        status,
        retry_after,
    })
}

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn backs_off_exponentially_with_jitter_and_a_cap() {
    let retry = Retry::new(MS * 100, MS * 300, 5).with_seed(7);
    assert_eq!(
        (1..=5).map(|n| retry.backoff(n)).collect::<Vec<_>>(),
        [MS * 100, MS * 200, MS * 300, MS * 300, MS * 300]
    );
    let script: Script = [
        reply(503, None),
        Err("reset"),
        reply(502, None),
        reply(504, None),
        reply(503, None),
    ]
    .into();
    let (result, seen) = play(&retry, "GET", None, script).await;
    assert_eq!(
        result.unwrap().status,
        503,
        "the last reply when attempts run out"
    );
    assert_eq!(seen.len(), 5);
    for (i, pair) in seen.windows(2).enumerate() {
        let waited = pair[1].1 - pair[0].1;
        let d = retry.backoff(i as u32 + 1);
        assert!(
            waited >= d / 2 && waited <= d,
            "wait {i}: {waited:?} not in [{:?}, {d:?}]",
            d / 2
        );
    }
    assert!(
        seen.iter().all(|(a, _)| a.idempotency_key.is_none()),
        "GET needs no key"
    );
    assert_eq!(
        seen.iter().map(|(a, _)| a.number).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_the_floor_and_beyond_the_cap_stops() {
    let retry = Retry::new(MS * 100, Duration::from_secs(5), 5).with_seed(1);
    let script: Script = [reply(429, Some("3")), reply(200, None)].into();
    let (result, seen) = play(&retry, "GET", None, script).await;
    assert_eq!(result.unwrap().status, 200);
    assert_eq!(seen[1].1, Duration::from_secs(3));

    // A jittered backoff longer than Retry-After wins.
    let retry = Retry::new(Duration::from_secs(2), Duration::from_secs(5), 5).with_seed(1);
    let script: Script = [reply(503, Some("0")), reply(200, None)].into();
    let (_, seen) = play(&retry, "GET", None, script).await;
    assert!(seen[1].1 >= Duration::from_secs(1) && seen[1].1 <= Duration::from_secs(2));

    let script: Script = [reply(429, Some("60"))].into();
    let (result, seen) = play(&retry, "GET", None, script).await;
    assert_eq!(result.unwrap().retry_after, Some("60"));
    assert_eq!(
        seen.len(),
        1,
        "a wait beyond the cap is the caller's to decide"
    );
}

#[tokio::test(start_paused = true)]
async fn non_retryable_replies_return_at_once() {
    let retry = Retry::new(MS * 100, MS * 300, 5);
    for status in [200, 201, 400, 401, 404, 409] {
        let (result, seen) = play(&retry, "GET", None, [reply(status, None)].into()).await;
        assert_eq!((result.unwrap().status, seen.len()), (status, 1));
    }
}

#[tokio::test(start_paused = true)]
async fn one_idempotency_key_for_every_attempt_of_a_post() {
    let retry = Retry::new(MS, MS * 10, 3);
    let script: Script = [Err("reset"), reply(503, None), reply(201, None)].into();
    let (result, seen) = play(&retry, "POST", None, script).await;
    assert_eq!(result.unwrap().status, 201);
    let keys: Vec<_> = seen
        .iter()
        .map(|(a, _)| a.idempotency_key.clone())
        .collect();
    let first = keys[0].clone().expect("a POST gets a key");
    assert_eq!(first.len(), 32);
    assert!(keys.iter().all(|k| k.as_ref() == Some(&first)));

    // The caller's own key is kept; a fresh call gets a fresh key.
    let (_, seen) = play(
        &retry,
        "PATCH",
        Some("abc".into()),
        [reply(200, None)].into(),
    )
    .await;
    assert_eq!(seen[0].0.idempotency_key.as_deref(), Some("abc"));
    let (_, seen) = play(&retry, "POST", None, [reply(200, None)].into()).await;
    assert_ne!(seen[0].0.idempotency_key.as_deref(), Some(&*first));
    assert_ne!(new_idempotency_key(), new_idempotency_key());
    assert!(is_idempotent("put") && is_idempotent("DELETE") && !is_idempotent("POST"));

    // Transport errors alone exhaust the attempts and surface the last error.
    let (result, seen) = play(&retry, "POST", None, [Err("a"), Err("b"), Err("c")].into()).await;
    assert_eq!((result.unwrap_err(), seen.len()), ("c", 3));
}

#[test]
fn retry_after_takes_seconds_or_an_http_date() {
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
    assert_eq!(
        parse_retry_after("120", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after("99999999999999999999999", now),
        Some(Duration::from_secs(u64::MAX))
    );
    for bad in ["", "-1", "1.5", "soon", "1s"] {
        assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
    }
}
