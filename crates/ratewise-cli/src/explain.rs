//! `ratewise explain`: one response (or one case file) → classification,
//! decision and the reasons behind them.

use crate::http_text::{parse_response, MAX_INPUT};
use clap::Args;
use ratewise_core::case::Case;
use ratewise_core::classify::{classify_response, detect_provider};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::explain::Explanation;
use ratewise_core::{Instant, Now, Provider};
use std::io::Read;
use std::time::{Duration, SystemTime};

/// Every profile's name and `auto`: the list never drifts from the core's.
fn provider_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        Provider::ALL
            .iter()
            .map(|p| p.as_str())
            .chain(std::iter::once("auto")),
    )
}

/// Arguments of `ratewise explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Whose rules read the response: a profile, or `auto` (found from the
    /// headers and body).
    #[arg(long, default_value = "auto", value_parser = provider_names())]
    provider: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Read FILE as a decision case (fixtures format) instead of a raw response.
    #[arg(long)]
    case: bool,
    /// Sends made so far, including the one answered.
    #[arg(long, default_value_t = 1)]
    attempts: u32,
    /// The job's deadline from its arrival, in milliseconds.
    #[arg(long)]
    deadline_ms: Option<u64>,
    /// Time since the job arrived, in milliseconds.
    #[arg(long, default_value_t = 0)]
    elapsed_ms: u64,
    /// Seed of the jitter, for reproducible output.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A raw response as `curl -si` prints it (or a case file with --case); `-` reads stdin.
    file: String,
}

/// Runs the command; `Err` is the one-line message for exit code 2.
pub fn run(args: &ExplainArgs) -> Result<(), String> {
    let input = read_input(&args.file)?;
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let explanation = if args.case {
        let text = std::str::from_utf8(&input).map_err(|_| "case file is not UTF-8".to_owned())?;
        let case = Case::from_json(text).map_err(|e| e.to_string())?;
        case.evaluate(&mut rng).map_err(|e| e.to_string())?
    } else {
        let response = parse_response(&input)?;
        let provider = match args.provider.as_str() {
            "auto" => detect_provider(&response.headers, &response.body),
            word => Provider::from_word(word).ok_or_else(|| format!("unknown provider {word}"))?,
        };
        // Measure HTTP-date hints against the response's own Date when it has one.
        let wall = response
            .headers
            .get(http::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .unwrap_or_else(SystemTime::now);
        let now = Now::new(Instant::from_millis(args.elapsed_ms), wall);
        let job = JobState::new(
            args.attempts,
            Instant::ZERO,
            args.deadline_ms.map(Duration::from_millis),
        );
        let c = classify_response(provider, &response.view(), wall);
        let d = decide(&Policy::default(), &job, &c, now, &mut rng);
        Explanation::new(&c, &d)
    };
    if args.json {
        let line = serde_json::to_string(&explanation).map_err(|e| e.to_string())?;
        println!("{line}");
    } else {
        print!("{explanation}");
    }
    Ok(())
}

fn read_input(file: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let limit = MAX_INPUT as u64 + 1;
    let read = if file == "-" {
        std::io::stdin().take(limit).read_to_end(&mut buf)
    } else {
        std::fs::File::open(file)
            .map_err(|e| format!("cannot read {file}: {e}"))?
            .take(limit)
            .read_to_end(&mut buf)
    };
    read.map_err(|e| format!("cannot read {file}: {e}"))?;
    if buf.len() > MAX_INPUT {
        return Err(format!("{file} is larger than {} MiB", MAX_INPUT >> 20));
    }
    Ok(buf)
}
