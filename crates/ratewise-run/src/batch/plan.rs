//! Planning: pending jobs into batches, split by model (an OpenAI batch
//! has one model and one endpoint; an Anthropic batch may mix) and by the
//! providers' documented size limits.
//!
//! * OpenAI: "The file can contain up to 50,000 requests, and can be up to
//!   200 MB in size", and the batch's `endpoint` is one for all its
//!   requests (<https://platform.openai.com/docs/api-reference/batch/create>);
//!   the guide asks for one model per file.
//! * Anthropic: "A Message Batch is limited to either 100,000 Message
//!   requests or 256 MB in size, whichever is reached first"
//!   (<https://docs.anthropic.com/en/docs/build-with-claude/batch-processing>).

use crate::input::Shape;
use crate::store::Pending;

/// The most requests and bytes in one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most requests.
    pub max_requests: usize,
    /// Most bytes of the batch's input (the file, or the create body).
    pub max_bytes: u64,
}

impl Limits {
    /// The provider's documented limits (see the module).
    pub fn for_shape(shape: Shape) -> Limits {
        match shape {
            Shape::OpenAi => Limits {
                max_requests: 50_000,
                max_bytes: 200 * 1000 * 1000,
            },
            Shape::Anthropic => Limits {
                max_requests: 100_000,
                max_bytes: 256 * 1000 * 1000,
            },
        }
    }
}

/// One batch to create.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The one model of an OpenAI batch (`None` for Anthropic).
    pub model: Option<String>,
    /// The endpoint of all its requests.
    pub endpoint: String,
    /// Its jobs, in input order.
    pub jobs: Vec<Pending>,
    /// The bytes of its request lines (newlines and separators included).
    pub bytes: u64,
}

impl Planned {
    /// The worst case of all its jobs.
    pub fn worst_case(&self) -> u64 {
        self.jobs
            .iter()
            .fold(0u64, |a, j| a.saturating_add(j.worst_case()))
    }

    /// Keeps the first `n` jobs (their bytes recounted).
    pub fn truncate(&mut self, shape: Shape, n: usize) {
        self.jobs.truncate(n);
        self.bytes = self.jobs.iter().map(|j| line_len(shape, j)).sum();
    }
}

/// A JSON string literal of `s`.
fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// One request as the batch API takes it, the body byte for byte as
/// given: an OpenAI input line (`custom_id`, `method`, `url`, `body`) or an
/// Anthropic `requests` item (`custom_id`, `params`). No newline.
pub fn request_line(shape: Shape, job: &Pending) -> Vec<u8> {
    let head = match shape {
        Shape::OpenAi => format!(
            r#"{{"custom_id":{},"method":"POST","url":{},"body":"#,
            json_str(&job.custom_id),
            json_str(&job.path)
        ),
        Shape::Anthropic => format!(r#"{{"custom_id":{},"params":"#, json_str(&job.custom_id)),
    };
    let mut out = Vec::with_capacity(head.len() + job.body.len() + 1);
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(&job.body);
    out.push(b'}');
    out
}

/// The bytes `job` adds to a batch: its line and a newline (OpenAI) or a
/// comma (Anthropic).
fn line_len(shape: Shape, job: &Pending) -> u64 {
    let head = match shape {
        Shape::OpenAi => 44 + json_str(&job.custom_id).len() + json_str(&job.path).len(),
        Shape::Anthropic => 23 + json_str(&job.custom_id).len(),
    };
    (head + job.body.len() + 2) as u64
}

/// Groups jobs into batches as they come: [`Planner::push`] hands back a
/// batch once its group is full, [`Planner::finish`] the rest. At most one
/// open batch per (model, endpoint) is held.
#[derive(Debug)]
pub struct Planner {
    shape: Shape,
    limits: Limits,
    open: Vec<Planned>,
}

impl Planner {
    /// A planner for `shape` under `limits`.
    pub fn new(shape: Shape, limits: Limits) -> Planner {
        Planner {
            shape,
            limits,
            open: Vec::new(),
        }
    }

    /// Adds `job`; a batch that is full comes back (the job starts the
    /// next one). A job larger than the byte limit gets a batch of its
    /// own (the provider then says what is wrong with it).
    pub fn push(&mut self, job: Pending) -> Option<Planned> {
        let (model, endpoint) = match self.shape {
            Shape::OpenAi => (job.model.clone(), job.path.clone()),
            Shape::Anthropic => (None, job.path.clone()),
        };
        let len = line_len(self.shape, &job);
        let at = self
            .open
            .iter()
            .position(|p| p.model == model && p.endpoint == endpoint);
        let mut full = None;
        let i = match at {
            Some(i) => {
                let p = &self.open[i];
                if p.jobs.len() >= self.limits.max_requests
                    || p.bytes.saturating_add(len) > self.limits.max_bytes
                {
                    full = Some(std::mem::replace(
                        &mut self.open[i],
                        Planned {
                            model,
                            endpoint,
                            jobs: Vec::new(),
                            bytes: 0,
                        },
                    ));
                }
                i
            }
            None => {
                self.open.push(Planned {
                    model,
                    endpoint,
                    jobs: Vec::new(),
                    bytes: 0,
                });
                self.open.len() - 1
            }
        };
        let p = &mut self.open[i];
        p.jobs.push(job);
        p.bytes += len;
        full
    }

    /// The batches not yet handed back, in the order their first job came.
    pub fn finish(self) -> Vec<Planned> {
        self.open
            .into_iter()
            .filter(|p| !p.jobs.is_empty())
            .collect()
    }
}

/// Plans `jobs` at once (see [`Planner`]).
pub fn plan(shape: Shape, limits: Limits, jobs: impl IntoIterator<Item = Pending>) -> Vec<Planned> {
    let mut planner = Planner::new(shape, limits);
    let mut out: Vec<Planned> = jobs.into_iter().filter_map(|j| planner.push(j)).collect();
    out.extend(planner.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(seq: i64, model: &str, body_len: usize) -> Pending {
        let body = format!(r#"{{"model":"{model}","x":"{}"}}"#, "a".repeat(body_len));
        Pending {
            seq,
            custom_id: format!("c{seq}"),
            path: "/v1/chat/completions".into(),
            model: Some(model.into()),
            input_estimate: 10,
            max_tokens: 5,
            body: body.into(),
            first_seen_ms: 0,
            double_spend: false,
        }
    }

    #[test]
    fn the_line_length_is_what_is_sent() {
        for shape in [Shape::OpenAi, Shape::Anthropic] {
            let j = job(1, "m", 7);
            let line = request_line(shape, &j);
            assert_eq!(line_len(shape, &j), line.len() as u64 + 1, "{shape:?}");
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(v["custom_id"], "c1");
        }
    }

    #[test]
    fn openai_batches_have_one_model_and_respect_the_count_limit() {
        let limits = Limits {
            max_requests: 2,
            max_bytes: 1 << 30,
        };
        let jobs = (0..5).map(|i| job(i, if i % 2 == 0 { "a" } else { "b" }, 1));
        let batches = plan(Shape::OpenAi, limits, jobs);
        let shape: Vec<(Option<String>, Vec<i64>)> = batches
            .iter()
            .map(|p| (p.model.clone(), p.jobs.iter().map(|j| j.seq).collect()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (Some("a".into()), vec![0, 2]),
                (Some("a".into()), vec![4]),
                (Some("b".into()), vec![1, 3]),
            ]
        );
    }

    #[test]
    fn anthropic_batches_mix_models_and_respect_the_byte_limit() {
        let one = line_len(Shape::Anthropic, &job(0, "a", 100));
        let limits = Limits {
            max_requests: 100,
            max_bytes: one * 2,
        };
        let jobs = (0..5).map(|i| job(i, if i % 2 == 0 { "a" } else { "b" }, 100));
        let batches = plan(Shape::Anthropic, limits, jobs);
        let sizes: Vec<usize> = batches.iter().map(|p| p.jobs.len()).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert!(batches.iter().all(|p| p.bytes <= limits.max_bytes));
    }
}
