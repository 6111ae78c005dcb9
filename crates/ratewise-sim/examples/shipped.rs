//! Runs every shipped scenario with every strategy, the oracle included,
//! and prints the tables and ratewise's goodput over the oracle's.
//! `cargo run --release -p ratewise-sim --example shipped`
fn main() {
    for (name, text) in ratewise_sim::SHIPPED {
        let s = ratewise_sim::Scenario::from_json(text).expect("valid");
        let t = std::time::Instant::now();
        let reports: Vec<_> = ratewise_sim::Strategy::WITH_ORACLE
            .iter()
            .map(|st| ratewise_sim::simulate(&s, *st, &mut |_, _| {}))
            .collect();
        println!("## {name} ({:?})", t.elapsed());
        print!("{}", ratewise_sim::table::table(&reports));
        let goodput = |name: &str| {
            reports
                .iter()
                .find(|r| r.strategy == name)
                .map_or(0.0, |r| r.goodput_ratio)
        };
        let (rw, oracle) = (goodput("ratewise"), goodput("oracle"));
        println!(
            "goodput: ratewise {rw:.4}, oracle {oracle:.4}, ratio {:.4}",
            rw / oracle
        );
        for r in &reports {
            println!(
                "{} binding={} accel429={} resets={} late={} spend={}",
                r.strategy,
                r.binding_dimension,
                r.sends_429_acceleration,
                r.sends_reset,
                r.jobs_late,
                r.spend_tokens
            );
        }
    }
}
