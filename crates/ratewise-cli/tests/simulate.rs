//! `ratewise simulate` end to end through the binary (virtual time).

use ratewise_sim::matrix;
use std::process::Command;

fn ratewise(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(args)
        .output()
        .expect("run ratewise");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn small_scenario(dir: &std::path::Path) -> String {
    let path = dir.join("small.json");
    std::fs::write(
        &path,
        r#"{"name": "small", "seed": 3,
            "limits": {"requests_per_min": 50, "input_tokens_per_min": 30000, "output_tokens_per_min": 8000},
            "jobs": {"count": 60, "arrival": "burst", "input_tokens": [200, 2000], "max_tokens": 1024, "output_tokens": [50, 400]},
            "faults": {"overload_rate": 0.02, "reset_after_send_rate": 0.0, "spend_cap_after_tokens": null, "acceleration": true}}"#,
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ratewise-sim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn json_lines_one_per_strategy_and_reproducible() {
    let dir = tempdir("json");
    let file = small_scenario(&dir);
    let (code, out, err) = ratewise(&["simulate", "--scenario", &file, "--json"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = lines
        .iter()
        .map(|v| v["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ratewise", "sdk-naive", "backoff-only", "rpm-only"]);
    assert_eq!(lines[0]["jobs_lost"], 0);
    let (_, again, _) = ratewise(&["simulate", "--scenario", &file, "--json"]);
    assert_eq!(out, again);
}

#[test]
fn one_strategy_table_and_plot() {
    let dir = tempdir("plot");
    let file = small_scenario(&dir);
    let svg = dir.join("out.svg");
    let (code, out, err) = ratewise(&[
        "simulate",
        "--scenario",
        &file,
        "--strategy",
        "ratewise",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| ratewise"), "{out}");
    assert!(!out.contains("sdk-naive"));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("<polyline"));
}

#[test]
fn refuses_bad_input_without_panicking() {
    let dir = tempdir("bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"limits": {}, "jobs": 3}"#).unwrap();
    let (code, _, err) = ratewise(&["simulate", "--scenario", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("scenario"), "{err}");
    let (code, _, err) = ratewise(&["simulate", "--strategy", "yolo"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown strategy"), "{err}");
}

#[test]
fn default_scenario_meets_the_targets() {
    let (code, out, err) = ratewise(&["simulate", "--check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("burst-mixed"));
    assert!(err.contains("targets: all met"), "{err}");
}

/// `--matrix` (issue #47): the standard set's size and seed are printed,
/// cells worst first, a run is reproducible from its seed, and a cell
/// that misses makes the command fail and say how to run it again.
#[test]
fn the_matrix_prints_its_cells_worst_first_and_fails_on_a_miss() {
    let (code, out, err) = ratewise(&["simulate", "--matrix", "--seed", "1"]);
    let cells = matrix::standard(1).len();
    assert!(
        out.starts_with(&format!(
            "the standard matrix: {cells} cells covering every pair"
        )),
        "{out}"
    );
    assert!(err.contains(&format!("{cells} cells in")), "{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| dialect="))
        .collect();
    assert_eq!(rows.len(), cells);
    // Worst first: cells that miss before cells that hold.
    let held = |r: &&str| r.ends_with("| — |");
    let first_held = rows.iter().position(held).unwrap_or(rows.len());
    assert!(rows[first_held..].iter().all(held), "{out}");
    let missed = rows[..first_held]
        .iter()
        .filter(|r| !r.contains("excused"))
        .count();
    if missed > 0 {
        assert_ne!(code, 0);
        assert!(err.contains("--matrix --seed 1"), "{err}");
    } else {
        assert_eq!(code, 0, "{err}");
    }
    // The same seed, the same cells and figures.
    let (_, again, _) = ratewise(&["simulate", "--matrix", "--seed", "1"]);
    assert_eq!(out, again);
    // A sample: that many cells, as JSON lines.
    let (_, json, _) = ratewise(&[
        "simulate", "--matrix", "--sample", "3", "--seed", "9", "--json",
    ]);
    assert_eq!(json.lines().count(), 3, "{json}");
    for l in json.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["seed"], 9);
    }
    // Clear errors on bad input.
    let (code, _, err) = ratewise(&["simulate", "--matrix", "--sample", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("at least 1"), "{err}");
    let (code, _, _) = ratewise(&["simulate", "--sample", "3"]);
    assert_ne!(code, 0, "--sample without --matrix");
}

/// `--cell` runs one matrix cell as a scenario (every other option
/// applies), and `--print-scenario` writes it out as a scenario file that
/// runs the same figures: how a cell that missed becomes a fixed scenario
/// in `crates/ratewise-sim/scenarios/matrix/`.
#[test]
fn one_cell_runs_as_a_scenario_and_prints_as_a_file_that_runs_the_same() {
    let label = matrix::Cell([1, 3, 2, 0, 2, 0, 0, 0]).label();
    let (code, table, err) = ratewise(&[
        "simulate",
        "--cell",
        &label,
        "--seed",
        "4",
        "--strategy",
        "ratewise",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains(&format!("scenario {label}")), "{table}");
    let (code, text, err) = ratewise(&[
        "simulate",
        "--cell",
        &label,
        "--seed",
        "4",
        "--print-scenario",
    ]);
    assert_eq!(code, 0, "{err}");
    let s = ratewise_sim::Scenario::from_json(&text).expect("a scenario file");
    assert_eq!(s.name, label);
    assert_eq!(s.seed, 4);
    let dir = tempdir("cell");
    let path = dir.join("cell.json");
    std::fs::write(&path, &text).unwrap();
    let (_, from_file, _) = ratewise(&[
        "simulate",
        "--scenario",
        path.to_str().unwrap(),
        "--strategy",
        "ratewise",
    ]);
    assert_eq!(from_file, table);
    // Clear errors on bad input.
    let (code, _, err) = ratewise(&["simulate", "--cell", "dialect=gemini"]);
    assert_ne!(code, 0);
    assert!(err.contains("one of anthropic, openai"), "{err}");
    let (code, _, err) = ratewise(&["simulate", "--cell", "dialect=openai"]);
    assert_ne!(code, 0);
    assert!(err.contains("says missing"), "{err}");
    let (code, _, err) = ratewise(&["simulate", "--seed", "3"]);
    assert_ne!(code, 0);
    assert!(err.contains("--seed goes with"), "{err}");
}

/// `--print-mock-config` writes the mock provider's configuration of a
/// cell (or any scenario) as `ratewise-mock --config` reads it, at real
/// time: how `bench/proxy_sdk.sh matrix-cell` runs a cell black-box
/// through the proxy.
#[test]
fn a_cell_prints_the_mock_config_the_mock_reads() {
    // OpenAI, silent (the wait in the message), 10 s buckets, 2 s answers.
    let cell = matrix::Cell([1, 4, 0, 2, 1, 1, 0, 0]);
    let label = cell.label();
    let (code, text, err) = ratewise(&[
        "simulate",
        "--cell",
        &label,
        "--seed",
        "7",
        "--print-mock-config",
    ]);
    assert_eq!(code, 0, "{err}");
    let cfg = ratewise_mock::MockConfig::from_json(&text).expect("the mock reads it");
    let s = cell.scenario(7);
    assert_eq!(cfg.seconds_per_minute, 60.0);
    assert_eq!(cfg.seed, 7);
    assert_eq!(cfg.openai_limits, s.limits.to_mock());
    assert_eq!(cfg.capacity_seconds, s.limits.capacity_seconds);
    assert!(cfg.count_rejected);
    assert_eq!(cfg.silent, ratewise_mock::Silent::Message);
    assert_eq!(
        [cfg.output_tokens.min, cfg.output_tokens.max],
        s.jobs.output_tokens
    );
    assert_eq!(cfg.latency.first_byte_ms, s.latency.base_ms);
    assert_eq!(
        cfg.latency.per_output_token_ms,
        s.latency.per_output_token_ms
    );
    // Anthropic, biased and shared with another client: the bias too.
    let cell = matrix::Cell([0, 2, 2, 0, 0, 2, 1, 1]);
    let (code, text, err) = ratewise(&[
        "simulate",
        "--cell",
        &cell.label(),
        "--seed",
        "3",
        "--print-mock-config",
    ]);
    assert_eq!(code, 0, "{err}");
    let cfg = ratewise_mock::MockConfig::from_json(&text).expect("the mock reads it");
    let s = cell.scenario(3);
    assert_eq!(cfg.anthropic_limits, s.limits.to_mock());
    assert_eq!(cfg.bias.remaining_tokens_high, 400);
    assert_eq!(cfg.bias.other_client_share, 0.3);
    assert_eq!(cfg.silent, ratewise_mock::Silent::Off);
    // The same as the scenario's own mapping, but for time and lengths.
    let mut want = s.mock_config();
    want.output_tokens = cfg.output_tokens;
    assert_eq!(cfg, want);
    // Not with --print-scenario.
    let (code, _, _) = ratewise(&[
        "simulate",
        "--cell",
        &cell.label(),
        "--print-scenario",
        "--print-mock-config",
    ]);
    assert_ne!(code, 0);
}
