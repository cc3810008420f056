//! `cargo run --release -p region-sim [-- --quick]`: every scenario against every contender, as
//! Markdown tables (the README keeps the last run's).

use region_sim::contenders::{Coordinated, Fixed, Home, Ideal, Reporting};
use region_sim::metrics::{RESERVE_UNITS, WINDOW_ALLOWANCE};
use region_sim::{
    run, Contender, Kind, Report, Scenario, DELAY_MS, EVERY_MS, JITTER_MS, LEASE_MS, LIMIT,
    RESERVE, TENANTS,
};

const SEED: u64 = 20261206;
const SEEDS: u64 = 10;

/// Every contender, fresh, by name.
fn contenders(seed: u64) -> Vec<(&'static str, usize, Box<dyn Contender>)> {
    vec![
        (
            "uncoordinated (each region the whole limit)",
            1,
            Box::new(Fixed::uncoordinated()),
        ),
        ("static split (limit / 3)", 1, Box::new(Fixed::split())),
        ("ideal global bucket", 1, Box::new(Ideal::new())),
        (
            "Doorman proportional share",
            1,
            Box::new(Coordinated::new(
                Home::doorman(),
                Reporting::Demand,
                1,
                seed,
            )),
        ),
        (
            "this design (a jump reported at once, as rl-gateway does)",
            1,
            Box::new(Coordinated::new(Home::design(), Reporting::Confirm, 1, seed).early()),
        ),
        (
            "this design, 2 gateways a region",
            2,
            Box::new(Coordinated::new(Home::design(), Reporting::Confirm, 2, seed).early()),
        ),
        (
            "this design, reporting on the cycle only",
            1,
            Box::new(Coordinated::new(
                Home::design(),
                Reporting::Confirm,
                1,
                seed,
            )),
        ),
        (
            "this design, reporting an idle key once (not until confirmed)",
            1,
            Box::new(Coordinated::new(
                Home::design(),
                Reporting::Release,
                1,
                seed,
            )),
        ),
        (
            "this design, reporting only keys with demand",
            1,
            Box::new(Coordinated::new(Home::design(), Reporting::Demand, 1, seed)),
        ),
    ]
}

fn row(name: &str, r: &Report) {
    let converge = if r.converge.is_empty() {
        "-".to_string()
    } else {
        r.converge
            .iter()
            .map(|c| c.map_or("never".to_string(), |s| format!("{s:.1} s")))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let over = r.window_over.max(0);
    println!(
        "| {name} | {} | {} | {over} ({:.0} %) | {:.2}x | {:.2} % | {:.1} % | {converge} | {:.0} % | {} / {:.1} s |",
        r.most_enforced.map_or("-".to_string(), |m| format!("{m:.2}x")),
        r.excess_units.map_or("-".to_string(), |e| format!("{e:.0}")),
        over as f64 * 100.0 / RESERVE_UNITS as f64,
        r.window_peak,
        r.over_run.max(0.0) * 100.0,
        r.utilization * 100.0,
        r.served * 100.0,
        r.starved_pairs,
        r.starved_secs,
    );
}

/// Convergence after each shift of `kind` over `SEEDS` seeds (the shift falls at a different
/// point of each gateway's report cycle): median and most, for the design with 1 and 2
/// gateways a region.
fn spread(kind: Kind, secs: u64) {
    let sc = Scenario::new(kind, secs);
    for (gateways, early) in [(1, false), (2, false), (1, true), (2, true)] {
        let mut times: Vec<Vec<f64>> = vec![vec![]; sc.shifts().len()];
        let mut never = 0;
        for seed in 1..=SEEDS {
            let mut c = Coordinated::new(Home::design(), Reporting::Confirm, gateways, seed);
            if early {
                c = c.early();
            }
            // The seed moves each gateway's report phase as well as the arrivals.
            let r = run(&sc, &mut c, gateways, seed);
            for (i, t) in r.converge.iter().enumerate() {
                match t {
                    Some(t) => times[i].push(*t),
                    None => never += 1,
                }
            }
        }
        let cells: Vec<String> = times
            .iter_mut()
            .map(|t| {
                t.sort_by(f64::total_cmp);
                let within = t
                    .iter()
                    .filter(|&&s| s <= 2.0 * EVERY_MS as f64 / 1e3)
                    .count();
                format!(
                    "{:.1} s / {:.1} s / {within} of {SEEDS}",
                    t.get(t.len() / 2).copied().unwrap_or(f64::NAN),
                    t.last().copied().unwrap_or(f64::NAN)
                )
            })
            .collect();
        println!(
            "| {} | {gateways} | {} | {} | {never} |",
            sc.name,
            if early { "at once" } else { "on its cycle" },
            cells.join(" ; ")
        );
    }
}

/// What the reserve buys: the design with less of it, where allocations move.
fn sweep(secs: u64) {
    println!("\n### The reserve\n");
    println!("| reserve | scenario | limits at once, most (x limit) | limits above the limit, most units a cycle | peak window (x limit) | overshoot per window: units | over 60 s |");
    println!("|---|---|---|---|---|---|---|");
    for reserve in [RESERVE, RESERVE / 2, RESERVE / 5, 0] {
        for kind in [Kind::Flash, Kind::Failover, Kind::Swing, Kind::LostReplies] {
            let sc = Scenario::new(kind, secs);
            let mut c =
                Coordinated::new(Home::design(), Reporting::Confirm, 1, SEED).reserve(reserve);
            let r = run(&sc, &mut c, 1, SEED);
            println!(
                "| {reserve} | {} | {:.3}x | {:.0} | {:.2}x | {} | {:.2} % |",
                sc.name,
                r.most_enforced.unwrap_or(0.0),
                r.excess_units.unwrap_or(0.0),
                r.window_peak,
                r.window_over.max(0),
                r.over_run.max(0.0) * 100.0
            );
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 30 } else { 60 };
    println!(
        "Seed {SEED}; {TENANTS} tenants, limit {LIMIT} per 1 s each (gcra, burst {LIMIT}), reserve {RESERVE}, reports every {EVERY_MS} ms, lease {LEASE_MS} ms; one-way delays {DELAY_MS:?} ms +-{JITTER_MS} ms. A window of {EVERY_MS} ms allows {WINDOW_ALLOWANCE} units; the reserve is {RESERVE_UNITS} units of it."
    );
    for sc in Scenario::all(secs) {
        println!("\n### {} ({} s)\n", sc.name, sc.secs);
        println!("| contender | limits at once, most (x limit) | limits above the limit, most units a cycle | overshoot per window: units (of the reserve) | peak window (x limit) | over the run | utilization | converge after each shift | time served | starved: pairs / longest |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for (name, gateways, mut c) in contenders(SEED) {
            // Which keys are reported matters only when a region's demand stops.
            if name.contains("keys") && sc.kind != Kind::Failover {
                continue;
            }
            let r = run(&sc, c.as_mut(), gateways, SEED);
            row(name, &r);
        }
    }
    println!("\n### Convergence of this design over {SEEDS} seeds\n");
    println!("| scenario | gateways a region | a jump in demand reported | after each shift: median / most / within two reports | never |");
    println!("|---|---|---|---|---|");
    for kind in [Kind::Flash, Kind::Failover] {
        spread(kind, secs);
    }
    sweep(secs);
}
