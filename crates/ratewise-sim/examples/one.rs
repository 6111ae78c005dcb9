//! Runs one scenario file with one strategy and prints the JSON.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).expect("file");
    let mut s = ratewise_sim::Scenario::from_json(&text).expect("valid");
    if let Some(n) = args.get(3) {
        s.jobs.count = n.parse().unwrap();
    }
    let st = ratewise_sim::Strategy::from_name(&args[2]).expect("strategy");
    let r = ratewise_sim::simulate(&s, st, &mut |_, _| {});
    println!("{}", serde_json::to_string(&r).unwrap());
}
