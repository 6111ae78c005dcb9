//! Runs every shipped scenario with every strategy and prints the tables.
//! `cargo run --release -p ratewise-sim --example shipped`
fn main() {
    for (name, text) in ratewise_sim::SHIPPED {
        let s = ratewise_sim::Scenario::from_json(text).expect("valid");
        let t = std::time::Instant::now();
        let reports: Vec<_> = ratewise_sim::Strategy::ALL
            .iter()
            .map(|st| ratewise_sim::simulate(&s, *st, &mut |_, _| {}))
            .collect();
        println!("## {name} ({:?})", t.elapsed());
        print!("{}", ratewise_sim::table::table(&reports));
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
