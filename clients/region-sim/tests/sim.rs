//! Short runs of every scenario (30 s; the diurnal day 150 s): the bound this design holds and
//! the goals it meets, against contenders that show each measure can fail.

use region_sim::contenders::{Coordinated, Fixed, Home, Reporting};
use region_sim::metrics::RESERVE_UNITS;
use region_sim::{run, Contender, Kind, Report, Scenario, EVERY_MS, LEASE_MS};

const SEED: u64 = 7;
const SECS: u64 = 30;

/// The design as rl-gateway runs it: a jump in demand reported at once.
fn design(gateways: usize) -> Coordinated {
    Coordinated::new(Home::design(), Reporting::Confirm, gateways, SEED).early()
}

fn go(kind: Kind, c: &mut dyn Contender, gateways: usize) -> Report {
    let secs = if kind == Kind::Diurnal {
        10 * SECS
    } else {
        SECS
    };
    run(&Scenario::new(kind, secs), c, gateways, SEED)
}

#[test]
fn the_design_holds_the_bound_and_serves_every_region_in_every_scenario() {
    for sc in Scenario::all(SECS) {
        for gateways in [1, 2] {
            let r = go(sc.kind, &mut design(gateways), gateways);
            let at = format!("{} with {gateways} gateway(s): {r:?}", sc.name);
            // The bound: at most the reserve over one global limiter in any window of one
            // report, and at most 1 % over 60 s.
            assert!(r.window_over <= RESERVE_UNITS as i64, "{at}");
            assert!(r.over_run <= 0.01, "{at}");
            // Utilization: the goal, 95 %, wherever demand stays put for longer than it takes
            // to converge; when it moves every report, what it takes then (each flip frees the
            // shrinking region's share one round trip after its answer: the README's figures).
            let least = if sc.kind == Kind::Swing { 0.75 } else { 0.95 };
            assert!(r.utilization >= least, "{at}");
            // No region with demand is ever held at nothing, home down or cut off.
            assert_eq!(r.starved_pairs, 0, "{at}");
            // Every shift is followed by every region served within three reports (the goal,
            // two, is met by one gateway a region in most runs: the README says when not);
            // while a region's answers are lost (one and a half leases), within three reports
            // of their return: until then the home counts the region at what it says it holds,
            // its old grant and then its fallback, the safe share.
            let within = if sc.kind == Kind::LostReplies {
                3 * LEASE_MS / 2 + 3 * EVERY_MS
            } else {
                3 * EVERY_MS
            };
            for c in &r.converge {
                assert!(c.is_some_and(|s| s <= within as f64 / 1e3), "{at}");
            }
        }
    }
}

#[test]
fn the_measures_see_what_the_other_contenders_get_wrong() {
    // Each region enforcing the whole limit: the "quota that doubled", far past the reserve.
    let r = go(Kind::Steady, &mut Fixed::uncoordinated(), 1);
    assert!(r.window_over > 5 * RESERVE_UNITS as i64, "{r:?}");
    assert!(r.over_run > 0.5, "{r:?}");
    // A static split never follows demand.
    let r = go(Kind::Failover, &mut Fixed::split(), 1);
    assert_eq!(r.converge, [None], "{r:?}");
    assert!(r.utilization < 0.95, "{r:?}");
    // Doorman's clients fall to nothing when their lease ends with the home out of reach.
    for kind in [Kind::HomeDown, Kind::Partition] {
        let mut doorman = Coordinated::new(Home::doorman(), Reporting::Demand, 1, SEED);
        let r = go(kind, &mut doorman, 1);
        assert!(
            r.starved_pairs > 0 && r.starved_secs >= 1.0,
            "{kind:?}: {r:?}"
        );
    }
}

#[test]
fn a_region_whose_demand_ends_frees_its_share() {
    // After failover region 0 has no demand. Granted the floor, its gateway tells the home at
    // once that it holds no more, and once more, with no demand, on its next cycle: the region
    // that took the traffic gets the share (reporting only keys with demand, the region's stale
    // demand would keep a part of it for a lease).
    let mut c = design(1);
    let r = go(Kind::Failover, &mut c, 1);
    assert!(r.served >= 0.85, "{r:?}");
    assert!(r.converge.iter().all(Option::is_some), "{r:?}");
}

#[test]
fn a_jump_in_demand_reported_at_once_converges_within_two_reports() {
    // The goal, each region within 10 % of its demand share two reports after a shift, for
    // one gateway a region reporting a key off its cycle when its demand jumps. (Reporting only
    // on the cycle misses it for the first seed: 5.0 s after the flash crowd ends.)
    for kind in [Kind::Flash, Kind::Failover] {
        for seed in 1..=5 {
            let mut c = Coordinated::new(Home::design(), Reporting::Confirm, 1, seed).early();
            let r = run(&Scenario::new(kind, SECS), &mut c, 1, seed);
            for t in &r.converge {
                assert!(
                    t.is_some_and(|s| s <= 2.0 * EVERY_MS as f64 / 1e3),
                    "{kind:?} seed {seed}: {r:?}"
                );
            }
            assert!(r.window_over <= RESERVE_UNITS as i64, "{r:?}");
        }
    }
}

#[test]
fn a_lost_answer_never_lets_the_limits_sum_above_the_limit() {
    // Region 2's share falls while its answers are lost (its reports arrive): it keeps
    // enforcing its old grant, which it reports holding, and the home counts it at that until
    // it says it holds less. Here and wherever allocations move, the limits in force never sum
    // above the limit.
    for kind in [Kind::LostReplies, Kind::Swing, Kind::Flash, Kind::Failover] {
        let r = go(kind, &mut design(1), 1);
        assert_eq!(r.most_enforced, Some(1.0), "{kind:?}: {r:?}");
        assert_eq!(r.excess_units, Some(0.0), "{kind:?}: {r:?}");
    }
}
