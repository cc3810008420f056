//! The protocol's names: commands, option tokens and reply fields. The module parses and
//! replies with these, and the clients build requests and read replies with the same ones, so a
//! name cannot differ between the two sides.

/// Command names.
pub mod command {
    pub const ADMIT: &str = "RL.ADMIT";
    pub const MULTI: &str = "RL.MULTI";
    pub const ACQUIRE: &str = "RL.ACQUIRE";
    pub const RELEASE: &str = "RL.RELEASE";
    pub const RENEW: &str = "RL.RENEW";
    pub const SETTLE: &str = "RL.SETTLE";
    pub const GRANT: &str = "RL.GRANT";
    pub const INFO: &str = "RL.INFO";
    pub const SETSTATE: &str = "RL.SETSTATE";
    pub const LEASESET: &str = "RL.LEASESET";
    pub const RESERVESET: &str = "RL.RESERVESET";
    pub const THROTTLE: &str = "CL.THROTTLE";
    pub const ALLOCATE: &str = "RL.ALLOCATE";

    /// Every command the module registers.
    pub const ALL: [&str; 13] = [
        ADMIT, MULTI, ACQUIRE, RELEASE, RENEW, SETTLE, GRANT, INFO, SETSTATE, LEASESET, RESERVESET,
        THROTTLE, ALLOCATE,
    ];
}

/// Option tokens (matched without regard to case).
pub mod token {
    pub const BURST: &str = "BURST";
    pub const COST: &str = "COST";
    pub const ALGO: &str = "ALGO";
    pub const DRYRUN: &str = "DRYRUN";
    pub const RESERVE: &str = "RESERVE";
    pub const KEEP: &str = "KEEP";
    pub const RULE: &str = "RULE";
    pub const WANT: &str = "WANT";
    pub const TTL: &str = "TTL";
    pub const ID: &str = "ID";
    pub const FORGET: &str = "FORGET";
    pub const DEADLINE: &str = "DEADLINE";
    pub const REGIONS: &str = "REGIONS";
    pub const LEASE: &str = "LEASE";
}

/// Reply fields, in the order of the RESP2 array (RESP3 replies are maps with these names).
pub mod field {
    /// `RL.ADMIT` (and each rule of a refused or dry-run `RL.MULTI` decided alone).
    pub const ADMIT: [&str; 5] = [
        "allowed",
        "remaining",
        "retry_after_ms",
        "reset_after_ms",
        "capacity",
    ];
    /// `RL.MULTI`; `rules` holds one [`MULTI_RULE`] per rule.
    pub const MULTI: [&str; 4] = ["allowed", "denied_by", "retry_after_ms", "rules"];
    pub const MULTI_RULE: [&str; 3] = ["name", "remaining", "reset_after_ms"];
    pub const ACQUIRE: [&str; 4] = ["acquired", "holder", "in_flight", "retry_after_ms"];
    /// `RL.SETTLE` (nil for an unknown or forgotten reservation).
    pub const SETTLE: [&str; 2] = ["delta", "remaining"];
    pub const GRANT: [&str; 4] = ["granted", "remaining", "valid_ms", "retry_after_ms"];
    /// `RL.ALLOCATE`.
    pub const ALLOCATE: [&str; 4] = ["allocation", "lease_ms", "region_demand", "total_demand"];
}
