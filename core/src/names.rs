//! The names on the wire: commands and option tokens, for the clients that build the commands
//! the parsers here read (the parsers' arity errors name the commands with these too).

pub const ADMIT: &str = "RL.ADMIT";
pub const MULTI: &str = "RL.MULTI";
pub const GRANT: &str = "RL.GRANT";
pub const ACQUIRE: &str = "RL.ACQUIRE";
pub const RELEASE: &str = "RL.RELEASE";
pub const RENEW: &str = "RL.RENEW";
pub const SETTLE: &str = "RL.SETTLE";
pub const INFO: &str = "RL.INFO";

pub const BURST: &str = "BURST";
pub const COST: &str = "COST";
pub const ALGO: &str = "ALGO";
pub const DRYRUN: &str = "DRYRUN";
pub const RESERVE: &str = "RESERVE";
pub const KEEP: &str = "KEEP";
pub const WANT: &str = "WANT";
pub const TTL: &str = "TTL";
pub const RULE: &str = "RULE";
pub const ID: &str = "ID";
