//! The request parsers, one per command: each turns the raw argument bytes after the key into a
//! typed request whose every bound is checked, or into an error that names the argument.

pub mod admit;
pub mod allocate;
pub mod grant;
pub mod lease;
pub mod multi;
pub mod reserveset;
pub mod settle;
pub mod throttle;
