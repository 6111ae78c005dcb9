//! `ratewise simulate --real` through the binary: the virtual and the real
//! run of the same scenario, side by side, and their agreement.

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

fn scenario_file() -> String {
    let dir = std::env::temp_dir().join(format!("ratewise-real-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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

#[test]
fn real_json_has_both_runs_and_the_agreement() {
    let file = scenario_file();
    let (code, out, err) = ratewise(&[
        "simulate",
        "--scenario",
        &file,
        "--real",
        "--seconds-per-minute",
        "1.5",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["strategy"], "ratewise");
    assert_eq!(lines[1]["strategy"], "ratewise-real");
    assert_eq!(lines[1]["jobs_total"], 60);
    assert_eq!(lines[1]["jobs_lost"], 0);
    assert_eq!(lines[2]["agrees"], true, "{}", lines[2]);
    assert_eq!(lines[2]["unmatched_sends"], 0);
    let figures: Vec<&str> = lines[2]["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["figure"].as_str().unwrap())
        .collect();
    for f in [
        "jobs_done",
        "sends_per_done_job",
        "share_429",
        "goodput_ratio",
        "sends_after_stop",
    ] {
        assert!(figures.contains(&f), "{f}");
    }
}

#[test]
fn real_runs_the_ratewise_strategy_only() {
    let (code, _, err) = ratewise(&["simulate", "--real", "--strategy", "sdk-naive"]);
    assert_eq!(code, 2);
    assert!(err.contains("ratewise strategy only"), "{err}");
}
