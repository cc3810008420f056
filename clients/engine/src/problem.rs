//! `application/problem+json` bodies (RFC 9457) for the two answers a gateway gives itself:
//! 429 when a caller exceeded a limit, 503 when the limiter could not decide. A client can tell
//! them apart by `type` without parsing prose.

use serde_json::json;

use crate::policy::PathError;

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
    // Written out rather than built as a JSON value: it is on the path of every refusal,
    // cached ones included. The fields are in the order serde_json writes a map.
    let mut body = String::with_capacity(256);
    body.push_str(
        "{\"detail\":\"A rate limit was exceeded; retry after the time in Retry-After.\",\
         \"status\":429,\"title\":\"Too Many Requests\",\"type\":\"",
    );
    body.push_str(QUOTA_EXCEEDED);
    body.push_str("\",\"violated-policies\":[");
    for (i, name) in violated.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        // A name is a JSON string as serde_json escapes it.
        body.push_str(&serde_json::Value::from(name.as_ref()).to_string());
    }
    body.push_str("]}");
    Problem { status: 429, body }
}

/// A problem of no registered type: the status says what happened, the detail what to do.
fn about_blank(status: u16, title: &str, detail: &str) -> Problem {
    Problem {
        status,
        body: json!({
            "type": "about:blank",
            "title": title,
            "status": status,
            "detail": detail,
        })
        .to_string(),
    }
}

/// 503: the limiter could not decide and the route denies rather than admit unchecked.
pub fn limiter_unavailable() -> Problem {
    about_blank(
        503,
        "Service Unavailable",
        "The rate limiter is unavailable; retry after the time in Retry-After.",
    )
}

/// 503: the gateway itself is saturated and sheds the request; the store is not at fault, so
/// the body says so apart from [`limiter_unavailable`].
pub fn gateway_overloaded() -> Problem {
    about_blank(
        503,
        "Service Unavailable",
        "The gateway is overloaded; retry after the time in Retry-After.",
    )
}

/// 503: the request was still running when its gateway stopped (the end of its drain after
/// `SIGTERM`); another instance can take the retry at once.
pub fn gateway_stopping() -> Problem {
    about_blank(
        503,
        "Service Unavailable",
        "The gateway stopped before the request ended; retry after the time in Retry-After.",
    )
}

/// 431: an identity header (`user`, `tenant`) longer than 256 bytes.
pub fn identity_too_long() -> Problem {
    about_blank(
        431,
        "Request Header Fields Too Large",
        "An identity header is longer than 256 bytes.",
    )
}

/// 414: a path segment a key takes is longer than 256 bytes.
pub fn segment_too_long() -> Problem {
    about_blank(
        414,
        "URI Too Long",
        "A path segment the rate limit keys by is longer than 256 bytes.",
    )
}

/// 400: a path that climbs above the root.
pub fn above_root() -> Problem {
    about_blank(
        400,
        "Bad Request",
        "The request path climbs above the root ('..').",
    )
}

/// 400: a path segment with an encoded `/`, `\` or NUL, which backends read in different ways.
pub fn encoded_separator() -> Problem {
    about_blank(400, "Bad Request", "A path segment holds an encoded '/', '\\' or NUL (%2F, %5C, %00), which servers do not agree on.")
}

/// 400: a path the engine will not match to a route.
pub fn bad_path(error: PathError) -> Problem {
    match error {
        PathError::AboveRoot => above_root(),
        PathError::EncodedSeparator => encoded_separator(),
    }
}

/// 502: a proxy's upstream refused the connection or broke it before answering.
pub fn upstream_unreachable() -> Problem {
    about_blank(
        502,
        "Bad Gateway",
        "The upstream service could not be reached.",
    )
}

/// 408: a proxy's caller paused its request body longer than the gateway waits for it.
pub fn body_timeout() -> Problem {
    about_blank(408, "Request Timeout", "The request body stopped arriving.")
}

/// 504: a proxy's upstream did not answer in time.
pub fn upstream_timeout() -> Problem {
    about_blank(
        504,
        "Gateway Timeout",
        "The upstream service did not answer in time.",
    )
}

/// 400: a forward-auth request that does not say which request it describes.
pub fn undescribed_request() -> Problem {
    about_blank(400, "Bad Request", "A forward-auth request names the original method and URI in X-Forwarded-Method and X-Forwarded-Uri (or X-Original-Method and X-Original-URI).")
}

/// 500: the module refused a store call. The deployment's bug, not the caller's: the body
/// says so without the store's text (which may name keys, and so identities).
pub fn store_refused(_error: &str) -> Problem {
    about_blank(
        500,
        "Internal Server Error",
        "The rate limiter's store refused a call; the gateway's operators have the details.",
    )
}

/// The problem type of a request shed by a capacity (section 14): a name, not a page, and
/// apart from the 429's and the store-unavailable 503's, so callers and dashboards tell "you
/// exceeded your plan" and "the limiter is down" from "the service is over capacity".
pub const CAPACITY_EXCEEDED: &str = "urn:redis-rl:problem:capacity-exceeded";

/// 503: the backend behind the route is at the capacity it can serve now; retry after the
/// time in `Retry-After`.
pub fn capacity_exceeded() -> Problem {
    Problem {
        status: 503,
        body: json!({
            "type": CAPACITY_EXCEEDED,
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The service is over capacity; retry after the time in Retry-After.",
        })
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_429_body_is_the_json_of_its_fields() {
        let p = too_many_requests(&["read", "we\"ird"]);
        let want = json!({
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": "A rate limit was exceeded; retry after the time in Retry-After.",
            "violated-policies": ["read", "we\"ird"],
        });
        assert_eq!(p.body, want.to_string());
    }
}
