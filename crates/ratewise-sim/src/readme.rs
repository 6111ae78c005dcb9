//! The simulation figures of the docs, checked: the demo block of
//! `docs/benchmarks.md` is exactly what `ratewise simulate` prints, its
//! table of every shipped scenario is what `ratewise simulate --scenario F
//! --json` gives, the figures its prose draws from them are recomputed
//! here, and so is the README's headline row for the demo. Docs that drift
//! from the code fail this test (DESIGN principle 16).

use crate::metrics::Report;
use crate::scenario::{Scenario, SHIPPED};
use crate::{simulate, table, workload, Strategy};

/// Where the demo block, the shipped-scenario table and their prose live.
const BENCHMARKS: &str = "docs/benchmarks.md";

fn read(file: &str) -> String {
    let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn readme() -> String {
    read(BENCHMARKS)
}

/// The README with every run of whitespace made one space, so prose can be
/// searched whatever its line breaks.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn all(scenario: &Scenario) -> Vec<Report> {
    Strategy::ALL
        .iter()
        .map(|s| simulate(scenario, *s, &mut |_, _| {}))
        .collect()
}

fn find<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports.iter().find(|r| r.strategy == name).unwrap()
}

/// `part` of `whole` in whole per cent, rounded half up.
fn percent(part: u64, whole: u64) -> u64 {
    (part * 200 + whole) / (2 * whole)
}

fn assert_says(readme: &str, phrase: &str) {
    assert!(
        flat(readme).contains(&flat(phrase)),
        "{BENCHMARKS} should say: {phrase}"
    );
}

#[test]
fn the_demo_block_is_what_simulate_prints() {
    let readme = readme();
    let start = "$ cargo run -q -p ratewise-cli -- simulate\n";
    let at = readme.find(start).expect("the demo block") + start.len();
    let end = at + readme[at..].find("```").expect("the demo block's end");
    let scenario = Scenario::default_scenario();
    let reports = all(&scenario);
    assert_eq!(
        &readme[at..end],
        table::text_report(&scenario, &reports),
        "{BENCHMARKS}'s demo block differs from `ratewise simulate`"
    );

    // The prose under the demo.
    let rw = find(&reports, "ratewise");
    assert_eq!(rw.sends_429, 0);
    assert_eq!(rw.jobs_done + rw.jobs_held_unknown, rw.jobs_total);
    assert_says(
        &readme,
        &format!(
            "{:.3} sends per done job against an unavoidable {:.3}",
            rw.sends_per_done_job, rw.min_sends_per_done_job
        ),
    );
    let naive = find(&reports, "sdk-naive");
    // The README's headline row for the demo quotes the same run.
    let headline = read("README.md");
    let row = headline
        .lines()
        .find(|l| l.contains("`cargo run -q -p ratewise-cli -- simulate`") && l.starts_with('|'))
        .expect("README.md's headline row for the demo");
    for cell in [
        format!(
            "| {} / {} done ({} held), {} answered 429 |",
            rw.jobs_done, rw.jobs_total, rw.jobs_held_unknown, rw.sends_429
        ),
        format!(
            "| {} / {} done, {} % of sends answered 429 |",
            naive.jobs_done,
            naive.jobs_total,
            percent(naive.sends_429, naive.sends)
        ),
    ] {
        assert!(
            row.contains(&cell),
            "README.md's demo row should say {cell}:\n{row}"
        );
    }
    assert_says(
        &readme,
        &format!(
            "{} % of its sends are answered 429 and {} % of the jobs are given up",
            percent(naive.sends_429, naive.sends),
            percent(naive.jobs_given_up, naive.jobs_total)
        ),
    );
    // "The strategies at 0.997 take the whole bucket in the first seconds
    // and then give up 20–70 % of their jobs."
    let greedy: Vec<&Report> = reports
        .iter()
        .filter(|r| r.strategy != "ratewise" && format!("{:.3}", r.goodput_ratio) == "0.997")
        .collect();
    let given_up: Vec<u64> = greedy
        .iter()
        .map(|r| percent(r.jobs_given_up, r.jobs_total))
        .collect();
    assert_says(
        &readme,
        &format!(
            "The strategies at 0.997 take the whole bucket in the first seconds and then give up {}–{} % of their jobs",
            given_up.iter().min().unwrap(),
            given_up.iter().max().unwrap()
        ),
    );
}

#[test]
fn the_shipped_table_is_what_simulate_gives() {
    let readme = readme();
    for (file, text) in SHIPPED {
        let s = Scenario::from_json(text).unwrap();
        let reports = all(&s);
        let rw = find(&reports, "ratewise");
        let others: Vec<String> = reports
            .iter()
            .filter(|r| r.strategy != "ratewise")
            .map(|o| {
                format!(
                    "{} {:.3} ({} / {}, {:.2})",
                    o.strategy, o.goodput_ratio, o.jobs_done, o.jobs_total, o.sends_per_done_job
                )
            })
            .collect();
        let row = format!(
            "| {} | {} / {} | {:.3} ({:.3}) | {} | {:.3} | {} |",
            s.name,
            rw.jobs_done,
            rw.jobs_total,
            rw.sends_per_done_job,
            rw.min_sends_per_done_job,
            rw.sends_429,
            rw.goodput_ratio,
            others.join("; ")
        );
        assert!(
            readme.lines().any(|l| l == row),
            "{BENCHMARKS}'s row for {file} should be:\n{row}"
        );
        if s.name == "spend-cap" {
            assert_says(
                &readme,
                &format!(
                    "The {} `spend-cap` jobs ratewise did not send are kept (stopped)",
                    rw.jobs_stopped
                ),
            );
            assert_eq!(rw.jobs_stopped, rw.jobs_total - rw.jobs_done);
        }
    }
}

#[test]
fn the_scenario_figures_in_the_prose() {
    let readme = readme();
    // The demo's key: "(50 RPM, 30 000 ITPM, 8 000 OTPM)".
    let demo = Scenario::default_scenario();
    let thousands = |n: u64| {
        if n >= 1000 {
            format!("{} {:03}", n / 1000, n % 1000)
        } else {
            n.to_string()
        }
    };
    assert_says(
        &readme,
        &format!(
            "({} RPM, {} ITPM, {} OTPM)",
            demo.limits.requests_per_min.unwrap(),
            thousands(demo.limits.input_tokens_per_min.unwrap()),
            thousands(demo.limits.output_tokens_per_min.unwrap())
        ),
    );
    // "it starts as if a second, ... and spends a full bucket at 1.2× the
    // limit": the core's defaults.
    let burst = ratewise_core::admit::Burst::default();
    assert_eq!(burst.credit_start, std::time::Duration::from_secs(1));
    assert_says(&readme, "it starts as if a second");
    let peak = ratewise_core::admit::RampConfig::default().peak;
    assert_says(
        &readme,
        &format!(
            "spends a full bucket at {}× the limit",
            f64::from(peak) / 1000.0
        ),
    );
    // "On the cold start its ramp starts at 10 %".
    let start = ratewise_core::admit::RampConfig::default().start;
    assert_says(
        &readme,
        &format!("On the cold start its ramp starts at {} %", start / 10),
    );
    // "On `short-buckets-2s` a quarter of the requests are larger than the
    // whole 2 s token bucket": input + max_tokens above 2 s of the TPM.
    let (_, text) = SHIPPED
        .iter()
        .find(|(n, _)| *n == "short-buckets-2s.json")
        .unwrap();
    let s = Scenario::from_json(text).unwrap();
    let bucket = s.limits.tokens_per_min.unwrap() as f64 * s.limits.capacity_seconds / 60.0;
    let jobs = workload::jobs(&s);
    let larger = jobs
        .iter()
        .filter(|j| (j.input_tokens + j.max_tokens) as f64 > bucket)
        .count();
    let share = larger as f64 / jobs.len() as f64;
    assert!((0.2..0.3).contains(&share), "{share}");
    assert_says(
        &readme,
        "On `short-buckets-2s` a quarter of the requests are larger than the whole 2 s token bucket",
    );
}

#[test]
fn the_workspace_map_lists_every_crate_and_only_those() {
    let readme = read("README.md");
    let map = &readme[readme.find("## Workspace").expect("the workspace map")..];
    let map = &map[..map[3..].find("\n## ").map_or(map.len(), |e| e + 3)];
    let listed: std::collections::BTreeSet<String> = map
        .lines()
        .filter_map(|l| l.strip_prefix("| [`"))
        .map(|l| l[..l.find('`').unwrap()].to_string())
        .collect();
    let crates = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(crates)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        listed, present,
        "README.md's workspace map should list every crate in crates/, one line each"
    );
}
