//! `cargo run --release -p region-sim [-- --quick]`: every scenario against every contender, as
//! Markdown tables (the README keeps the last run's).

use region_sim::contenders::{Coordinated, Fixed, Home, Ideal, Reporting};
use region_sim::metrics::{RESERVE_UNITS, WINDOW_ALLOWANCE};
use region_sim::{
    run, Contender, Report, Scenario, DELAY_MS, EVERY_MS, JITTER_MS, LEASE_MS, LIMIT, RESERVE,
    TENANTS,
};

const SEED: u64 = 20261206;

/// Every contender, fresh, by name.
pub fn contenders(seed: u64) -> Vec<(&'static str, usize, Box<dyn Contender>)> {
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
            "this design",
            1,
            Box::new(Coordinated::new(
                Home::design(),
                Reporting::Confirm,
                1,
                seed,
            )),
        ),
        (
            "this design, 2 gateways a region",
            2,
            Box::new(Coordinated::new(
                Home::design(),
                Reporting::Confirm,
                2,
                seed,
            )),
        ),
        (
            "this design, an idle key reported once",
            1,
            Box::new(Coordinated::new(
                Home::design(),
                Reporting::Release,
                1,
                seed,
            )),
        ),
        (
            "this design, only keys with demand reported",
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
        "| {name} | {over} ({:.0} %) | {:.2}x | {:.2} % | {:.1} % | {converge} | {:.0} % | {} / {:.1} s |",
        over as f64 * 100.0 / RESERVE_UNITS as f64,
        r.window_peak,
        r.over_run.max(0.0) * 100.0,
        r.utilization * 100.0,
        r.served * 100.0,
        r.starved_pairs,
        r.starved_secs,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 30 } else { 60 };
    println!(
        "Seed {SEED}; {TENANTS} tenants, limit {LIMIT} per 1 s each (gcra, burst {LIMIT}), reserve {RESERVE}, reports every {EVERY_MS} ms, lease {LEASE_MS} ms; one-way delays {DELAY_MS:?} ms +-{JITTER_MS} ms. A window of {EVERY_MS} ms allows {WINDOW_ALLOWANCE} units; the reserve is {RESERVE_UNITS} units of it."
    );
    for sc in Scenario::all(secs) {
        println!("\n### {} ({} s)\n", sc.name, sc.secs);
        println!("| contender | overshoot per window: units (of the reserve) | peak window (x limit) | over the run | utilization | converge after each shift | time served | starved: pairs / longest |");
        println!("|---|---|---|---|---|---|---|---|");
        for (name, gateways, mut c) in contenders(SEED) {
            let r = run(&sc, c.as_mut(), gateways, SEED);
            row(name, &r);
        }
    }
}
