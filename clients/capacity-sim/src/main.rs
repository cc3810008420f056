//! `cargo run --release -p capacity-sim [-- --quick]`: every scenario against every
//! contender, as Markdown tables (the README keeps the last run's).

use capacity_sim::contenders::{Congestion, Engine, Fixed, NoLimit, TowerAcc};
use capacity_sim::{capacity, run, unloaded_p99_ms, Contender, Report, Scenario};

const SEED: u64 = 20261206;
const SLOTS: u32 = 100;

fn contenders(oracle: u32) -> Vec<(&'static str, Box<dyn Contender>)> {
    vec![
        ("no limiter", Box::new(NoLimit)),
        ("oracle (best fixed)", Box::new(Fixed::new(oracle))),
        (
            "tower-acc Gradient2",
            Box::new(TowerAcc::new(tower_acc::Gradient2::default())),
        ),
        (
            "tower-acc Vegas",
            Box::new(TowerAcc::new(tower_acc::Vegas::default())),
        ),
        (
            "tower-acc AIMD",
            Box::new(TowerAcc::new(tower_acc::Aimd::default())),
        ),
        (
            "congestion-limiter Gradient",
            Box::new(Congestion::new(
                congestion_limiter::limits::Gradient::new_with_initial_limit(16),
            )),
        ),
        (
            "congestion-limiter Vegas",
            Box::new(Congestion::new(
                congestion_limiter::limits::Vegas::new_with_initial_limit(16),
            )),
        ),
        (
            "congestion-limiter AIMD",
            Box::new(Congestion::new(
                congestion_limiter::limits::Aimd::new_with_initial_limit(16),
            )),
        ),
        ("engine (adaptive, fair)", Box::new(Engine::adaptive(SEED))),
    ]
}

/// The fixed limit with the best goodput, searched from half to twice the slots.
fn oracle(sc: &Scenario, slots: u32) -> u32 {
    (5..=20)
        .map(|k| slots * k / 10)
        .map(|n| (n, run(sc, &mut Fixed::new(n), SEED).goodput))
        .fold(
            (slots, f64::MIN),
            |best, (n, g)| if g > best.1 { (n, g) } else { best },
        )
        .0
}

fn table(sc: &Scenario, slots: u32) {
    let o = oracle(sc, slots);
    println!(
        "\n### {} ({} s, {} slots, offered {:.1}x of {:.0}/s)\n",
        sc.name,
        sc.secs,
        slots,
        sc.load,
        capacity(slots)
    );
    let steps = sc.slots.len() > 1;
    print!("| contender | goodput | critical p99 (x unloaded) | critical shed, batch admitted: seconds / within 1 s | any pair: seconds | within 1 s of a shed: batch after standard / standard after critical | Jain | limit (end)");
    println!(
        "{}",
        if steps {
            " | settle halved / restored |"
        } else {
            " |"
        }
    );
    println!(
        "|---|---|---|---|---|---|---|---{}",
        if steps { "|---|" } else { "|" }
    );
    for (name, mut c) in contenders(o) {
        let name = if name.starts_with("oracle") {
            format!("oracle (fixed {o})")
        } else {
            name.to_string()
        };
        match guarded(|| run(sc, c.as_mut(), SEED)) {
            Ok(r) => row(&name, &r, steps),
            Err(e) => println!(
                "| {name} | panicked: {e} |{}",
                " |".repeat(if steps { 7 } else { 6 })
            ),
        }
    }
}

fn row(name: &str, r: &Report, steps: bool) {
    let settle = |s: &Option<f64>| s.map_or("never".to_string(), |s| format!("{s:.2} s"));
    print!(
        "| {name} | {:.1} % | {:.0} ms ({:.2}x) | {} / {} | {} | {} / {} | {:.3} | {}",
        r.goodput * 100.0,
        r.critical_p99_ms,
        r.critical_p99_ratio,
        r.inversions_second,
        r.inversions_hold,
        r.inversions_any_second,
        r.batch_after_standard,
        r.standard_after_critical,
        r.jain,
        r.limits.last().map_or("-".to_string(), |l| l.to_string()),
    );
    if steps {
        let s: Vec<String> = r.settle.iter().map(settle).collect();
        println!(" | {} |", s.join(" / "));
    } else {
        println!(" |");
    }
}

fn drift(minutes: u64, slots: u32, load: f64) {
    let sc = Scenario::steady("overload", minutes * 60, load, slots);
    println!(
        "\n### Drift: {minutes} simulated minutes at {load:.0}x ({slots} slots)\n\n| contender | goodput | limit at 2 min | limit at {minutes} min | highest after 2 min | critical p99 |\n|---|---|---|---|---|---|"
    );
    for (name, mut c) in contenders(slots) {
        if name.starts_with("oracle") || name.starts_with("no limiter") {
            continue;
        }
        let r = match guarded(|| run(&sc, c.as_mut(), SEED)) {
            Ok(r) => r,
            Err(e) => {
                println!("| {name} | panicked: {e} |{}", " |".repeat(4));
                continue;
            }
        };
        let at = |s: usize| r.limits.get(s).copied().unwrap_or(0);
        let high = r.limits.iter().skip(120).max().copied().unwrap_or(0);
        println!(
            "| {name} | {:.1} % | {} | {} | {} | {:.0} ms |",
            r.goodput * 100.0,
            at(120),
            r.limits.last().copied().unwrap_or(0),
            high,
            r.critical_p99_ms
        );
    }
}

/// A peer that panics is reported as such, with its message, and the run goes on.
fn guarded(f: impl FnOnce() -> Report) -> Result<Report, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| e.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 10 } else { 60 };
    println!(
        "Seed {SEED}; service time lognormal, median 10 ms, sigma 0.5 (unloaded p99 {:.0} ms), knee at 80 % of the slots; deadline 1 s; mix 20 % critical, 50 % standard, 30 % batch; 50 tenants, Zipf 1.0, one in five of weight 4.",
        unloaded_p99_ms()
    );
    for load in [0.5, 0.9, 2.0, 4.0] {
        let name = match load {
            l if l < 0.6 => "0.5x",
            l if l < 1.0 => "0.9x",
            l if l < 3.0 => "2x",
            _ => "4x",
        };
        table(&Scenario::steady(name, secs, load, SLOTS), SLOTS);
    }
    let third = secs / 3;
    let step = Scenario {
        name: "capacity halved and restored (1.5x)",
        secs,
        load: 1.5,
        slots: vec![(0, SLOTS), (third, SLOTS / 2), (2 * third, SLOTS)],
    };
    table(&step, SLOTS);
    drift(if quick { 3 } else { 30 }, 20, 2.0);
}
