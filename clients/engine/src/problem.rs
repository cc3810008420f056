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

/// 503: the gateway itself is saturated and sheds the request; the store is not at fault, so
/// the body says so apart from [`limiter_unavailable`].
pub fn gateway_overloaded() -> Problem {
    Problem {
        status: 503,
        body: json!({
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The gateway is overloaded; retry after the time in Retry-After.",
        })
        .to_string(),
    }
}

/// 503: the request was still running when its gateway stopped (the end of its drain after
/// `SIGTERM`); another instance can take the retry at once.
pub fn gateway_stopping() -> Problem {
    Problem {
        status: 503,
        body: json!({
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The gateway stopped before the request ended; retry after the time in Retry-After.",
        })
        .to_string(),
    }
}

/// 431: an identity header (`user`, `tenant`) longer than 256 bytes.
pub fn identity_too_long() -> Problem {
    Problem {
        status: 431,
        body: json!({
            "type": "about:blank",
            "title": "Request Header Fields Too Large",
            "status": 431,
            "detail": "An identity header is longer than 256 bytes.",
        })
        .to_string(),
    }
}

/// 414: a path segment a key takes is longer than 256 bytes.
pub fn segment_too_long() -> Problem {
    Problem {
        status: 414,
        body: json!({
            "type": "about:blank",
            "title": "URI Too Long",
            "status": 414,
            "detail": "A path segment the rate limit keys by is longer than 256 bytes.",
        })
        .to_string(),
    }
}

/// 400: a path that climbs above the root.
pub fn above_root() -> Problem {
    Problem {
        status: 400,
        body: json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "The request path climbs above the root ('..').",
        })
        .to_string(),
    }
}

/// 400: a path segment with an encoded `/`, `\` or NUL, which backends read in different ways.
pub fn encoded_separator() -> Problem {
    Problem {
        status: 400,
        body: json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "A path segment holds an encoded '/', '\\' or NUL (%2F, %5C, %00), which servers do not agree on.",
        })
        .to_string(),
    }
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
    Problem {
        status: 502,
        body: json!({
            "type": "about:blank",
            "title": "Bad Gateway",
            "status": 502,
            "detail": "The upstream service could not be reached.",
        })
        .to_string(),
    }
}

/// 408: a proxy's caller paused its request body longer than the gateway waits for it.
pub fn body_timeout() -> Problem {
    Problem {
        status: 408,
        body: json!({
            "type": "about:blank",
            "title": "Request Timeout",
            "status": 408,
            "detail": "The request body stopped arriving.",
        })
        .to_string(),
    }
}

/// 504: a proxy's upstream did not answer in time.
pub fn upstream_timeout() -> Problem {
    Problem {
        status: 504,
        body: json!({
            "type": "about:blank",
            "title": "Gateway Timeout",
            "status": 504,
            "detail": "The upstream service did not answer in time.",
        })
        .to_string(),
    }
}

/// 400: a forward-auth request that does not say which request it describes.
pub fn undescribed_request() -> Problem {
    Problem {
        status: 400,
        body: json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "A forward-auth request names the original method and URI in X-Forwarded-Method and X-Forwarded-Uri (or X-Original-Method and X-Original-URI).",
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
