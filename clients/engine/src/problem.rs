//! `application/problem+json` bodies (RFC 9457) for the two answers a gateway gives itself:
//! 429 when a caller exceeded a limit, 503 when the limiter could not decide. A client can tell
//! them apart by `type` without parsing prose.

use serde_json::json;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// The problem type the RateLimit headers draft registers for an exceeded quota.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A problem the gateway answers with: its status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: u16,
    pub body: String,
}

/// 429: the rules that refused, in policy order, as `violated-policies`.
pub fn too_many_requests<S: AsRef<str>>(violated: &[S]) -> Problem {
    let names: Vec<&str> = violated.iter().map(AsRef::as_ref).collect();
    Problem {
        status: 429,
        body: json!({
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": "A rate limit was exceeded; retry after the time in Retry-After.",
            "violated-policies": names,
        })
        .to_string(),
    }
}

/// 503: the limiter could not decide and the route denies rather than admit unchecked.
pub fn limiter_unavailable() -> Problem {
    Problem {
        status: 503,
        body: json!({
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The rate limiter is unavailable; retry after the time in Retry-After.",
        })
        .to_string(),
    }
}

/// 500: the module refused a store call. The deployment's bug, not the caller's: the body
/// says so without the store's text (which may name keys, and so identities).
pub fn store_refused(_error: &str) -> Problem {
    Problem {
        status: 500,
        body: json!({
            "type": "about:blank",
            "title": "Internal Server Error",
            "status": 500,
            "detail": "The rate limiter's store refused a call; the gateway's operators have the details.",
        })
        .to_string(),
    }
}
