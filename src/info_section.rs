//! The `INFO rl` section: calls, admissions and refusals per command, live keys per algorithm,
//! the rules keys share, whether effects are built for replicas and whether they may be skipped.

use redis_module::raw;

use crate::core::rule::Algo;
use crate::stats;

/// # Safety
/// Called by Redis with a valid info context.
pub unsafe extern "C" fn section(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: i32) {
    raw::add_info_section(ctx, None);
    for cmd in crate::commands::COMMANDS.iter().filter_map(|c| c.stats) {
        for (what, n) in cmd.snapshot() {
            raw::add_info_field_unsigned_long_long(ctx, &format!("{}_{what}", cmd.name), n);
        }
    }
    for algo in Algo::ALL {
        let n = stats::key_count(algo);
        raw::add_info_field_long_long(ctx, &format!("keys_{}", algo.name()), n);
    }
    // A crash report may come from inside the rule table's lock: it goes without the count.
    if for_crash_report == 0 {
        let rules = i64::try_from(crate::state::rules::count()).unwrap_or(i64::MAX);
        raw::add_info_field_long_long(ctx, "rules", rules);
    }
    let receivers = i64::from(crate::skip_effects::receivers());
    raw::add_info_field_long_long(ctx, "replication_receivers", receivers);
    let gate = crate::skip_effects::gate();
    let on = i64::from(gate == crate::skip_effects::Gate::On);
    raw::add_info_field_long_long(ctx, "skip_effects", on);
    raw::add_info_field_str(ctx, "skip_effects_why", gate.name());
}
