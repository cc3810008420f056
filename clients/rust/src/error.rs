//! The client's errors: the engine's kinds, and a `redis` error sorted into them.

use redis::{ErrorKind, RedisError};
pub use rl_engine::wire::Error;

/// A `redis` error as one of the client's kinds: `ERR`, `WRONGTYPE` and `CROSSSLOT` replies
/// are the module's refusals; everything else (I/O, timeouts, `LOADING`, `BUSY`, `OOM`,
/// `NOPERM`, codes this client does not know) says the store could not answer.
pub fn error_of(e: &RedisError) -> Error {
    let refused = match e.kind() {
        ErrorKind::ResponseError | ErrorKind::CrossSlot => true,
        // Anything the server sends with a code the crate does not know (BUSY, OOM,
        // NOPERM...) is an extension error: only WRONGTYPE is a verdict on the request.
        ErrorKind::ExtensionError => e.code() == Some("WRONGTYPE"),
        _ => false,
    };
    if !refused {
        return Error::Unavailable(e.to_string());
    }
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => Error::Refused(format!("{code} {detail}")),
        (Some(code), None) => Error::Refused(code.to_string()),
        _ => Error::Refused(e.to_string()),
    }
}
