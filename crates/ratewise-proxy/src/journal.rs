//! The journal (`--journal FILE`): one JSON line per attempt *before* it is
//! sent and one when it ends (the allow-listed [`AttemptRecord`]), and
//! every stop and resume of a key. Lines are written and flushed to the
//! operating system before the send, so they survive the process being
//! killed (not a power cut: there is no fsync per line).
//!
//! On start the proxy reads it back ([`recover`]): an attempt that started
//! and never ended is reported as `outcome_unknown` — it may have been
//! generated and billed — and closed in the journal so the next start does
//! not report it again; a stop still in force stays in force.

use ratewise_core::record::AttemptRecord;
use ratewise_core::Cause;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Line {
    AttemptStarted {
        job_id: String,
        attempt: u32,
        at_ms: u64,
        /// The key's fingerprint, the model, the last upstream request id
        /// seen for the job (an earlier attempt's): absent on old lines.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        key: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        request_id: Option<String>,
    },
    AttemptEnded {
        job_id: String,
        attempt: u32,
        cause: String,
        action: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        status: Option<u16>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        request_id: Option<String>,
    },
    /// A key stopped, with its evidence ([`Evidence`]); a line without
    /// `operator` / `answer` (an older one) reads as a bare stop.
    Stop {
        key: String,
        cause: String,
        at_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        until_ms: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not", default)]
        operator: bool,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        answer: Option<ProviderAnswer>,
    },
    Resume {
        key: String,
        at_ms: u64,
    },
}

use crate::evidence::{at, ms, Evidence, ProviderAnswer};
use crate::jobs::JobContext;

/// An attempt that started and never ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unknown {
    /// The job.
    pub job_id: String,
    /// Which send.
    pub attempt: u32,
    /// When it started, Unix milliseconds.
    pub started_ms: u64,
    /// The key's fingerprint, when known.
    pub key: Option<String>,
    /// The request's model, when known.
    pub model: Option<String>,
    /// The last upstream request id seen for the job (an earlier
    /// attempt's), when one was.
    pub request_id: Option<String>,
}

/// A stop read back from the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptStop {
    /// The key's fingerprint.
    pub key: String,
    /// Why, since and until when, and the answer to give.
    pub evidence: Evidence,
}

/// What a journal says after a restart.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Attempts that started and never ended: outcome unknown.
    pub unknown: Vec<Unknown>,
    /// Stops still in force.
    pub stops: Vec<KeptStop>,
    /// Lines that could not be read (a line cut by a crash, say).
    pub unreadable: usize,
}

/// Reads the journal at `path` (none yet: nothing to recover).
pub fn recover(path: &Path) -> std::io::Result<Recovered> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::default()),
        Err(e) => return Err(e),
    };
    let mut open: BTreeMap<(String, u32), (u64, JobContext)> = BTreeMap::new();
    let mut stops: HashMap<String, KeptStop> = HashMap::new();
    let mut unreadable = 0;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::BufReader::new(file), &mut bytes)?;
    // Split on newlines ourselves: a line cut by a crash (even inside a
    // multi-byte character) is one unreadable line, not the end of the
    // journal.
    for raw in bytes.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(raw);
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::AttemptStarted {
                job_id,
                attempt,
                at_ms,
                key,
                model,
                request_id,
            }) => {
                let ctx = JobContext {
                    key,
                    model,
                    request_id,
                };
                open.insert((job_id, attempt), (at_ms, ctx));
            }
            Ok(Line::AttemptEnded {
                job_id, attempt, ..
            }) => {
                open.remove(&(job_id, attempt));
            }
            Ok(Line::Stop {
                key,
                cause,
                at_ms,
                until_ms,
                operator,
                answer,
            }) => {
                let cause = Cause::from_word(&cause).unwrap_or(Cause::Unknown);
                let ev = Evidence {
                    operator,
                    answer: answer.and_then(ProviderAnswer::bounded),
                    ..Evidence::bare(cause, at(at_ms), until_ms.map(at))
                };
                match stops.get_mut(&key) {
                    // A bare line on a key already stopped (the admin
                    // writes one after the evidence): the stop in force
                    // keeps its evidence and its since; the later end wins.
                    Some(k) if ev.answer.is_none() && !ev.operator => {
                        if k.evidence.until.is_some() {
                            k.evidence.until = match (k.evidence.until, ev.until) {
                                (Some(a), Some(b)) => Some(a.max(b)),
                                _ => None,
                            };
                        }
                    }
                    _ => {
                        stops.insert(key.clone(), KeptStop { key, evidence: ev });
                    }
                }
            }
            Ok(Line::Resume { key, .. }) => {
                stops.remove(&key);
            }
            Err(_) => unreadable += 1,
        }
    }
    let now = SystemTime::now();
    let mut stops: Vec<KeptStop> = stops
        .into_values()
        .filter(|s| s.evidence.until.is_none_or(|u| u > now))
        .collect();
    stops.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Recovered {
        unknown: open
            .into_iter()
            .map(|((job_id, attempt), (started_ms, ctx))| Unknown {
                job_id,
                attempt,
                started_ms,
                key: ctx.key,
                model: ctx.model,
                request_id: ctx.request_id,
            })
            .collect(),
        stops,
        unreadable,
    })
}

/// The journal file, appended to.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    /// The file, and whether the last write may have left half a line.
    file: Mutex<(std::fs::File, bool)>,
}

impl FileJournal {
    /// Opens (creates) the journal at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<FileJournal> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)?;
        // A line cut by a crash is ended, so the next one starts clean.
        let len = file.metadata()?.len();
        if len > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(FileJournal {
            path: path.to_owned(),
            file: Mutex::new((file, false)),
        })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a line whose failure is only logged (a stop, a resume, an
    /// unknown outcome closed): the next start reads the journal as it
    /// stands.
    fn write(&self, line: &Line) {
        let _ = self.try_write(line);
    }

    /// Writes a line; an error says it is not on disk.
    fn try_write(&self, line: &Line) -> std::io::Result<()> {
        let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let (f, torn) = &mut *guard;
        if *torn {
            // After a failed write, start on a fresh line.
            text.insert(0, '\n');
        }
        match f.write_all(text.as_bytes()).and_then(|()| f.flush()) {
            Ok(()) => {
                *torn = false;
                Ok(())
            }
            Err(e) => {
                *torn = true;
                tracing::error!(error = %e, path = %self.path.display(), "journal write failed");
                Err(e)
            }
        }
    }

    /// Closes an attempt found unfinished at start: it is reported once.
    pub fn close_unknown(&self, u: &Unknown) {
        self.write(&Line::AttemptEnded {
            job_id: u.job_id.clone(),
            attempt: u.attempt,
            cause: Cause::OutcomeUnknown.as_str().to_owned(),
            action: "hold_unknown".to_owned(),
            status: None,
            request_id: None,
        });
    }

    /// A key stopped (no evidence: a bare line; a stop already in force
    /// keeps its own).
    pub fn stop(&self, key: &str, cause: Cause, until: Option<SystemTime>) {
        self.stop_with(key, &Evidence::bare(cause, SystemTime::now(), until));
    }

    /// A key stopped, with its evidence.
    pub fn stop_with(&self, key: &str, ev: &Evidence) {
        self.write(&Line::Stop {
            key: key.to_owned(),
            cause: ev.cause.as_str().to_owned(),
            at_ms: ms(ev.since),
            until_ms: ev.until.map(ms),
            operator: ev.operator,
            answer: ev.answer.clone(),
        });
    }

    /// An attempt is about to be sent, with what is known of its job.
    pub fn attempt_started_with(
        &self,
        job_id: &str,
        attempt: u32,
        at: SystemTime,
        ctx: Option<JobContext>,
    ) -> std::io::Result<()> {
        let ctx = ctx.unwrap_or_default();
        self.try_write(&Line::AttemptStarted {
            job_id: job_id.to_owned(),
            attempt,
            at_ms: ms(at),
            key: ctx.key,
            model: ctx.model,
            request_id: ctx.request_id,
        })
    }

    /// An attempt's end.
    pub fn ended(&self, record: &AttemptRecord) -> std::io::Result<()> {
        self.try_write(&Line::AttemptEnded {
            job_id: record.job_id.clone().unwrap_or_default(),
            attempt: record.attempt,
            cause: record.cause.as_str().to_owned(),
            action: record.action.as_str().to_owned(),
            status: record.status,
            request_id: record.request_id.clone(),
        })
    }

    /// A key resumed.
    pub fn resume(&self, key: &str) {
        self.write(&Line::Resume {
            key: key.to_owned(),
            at_ms: ms(SystemTime::now()),
        });
    }

    /// Flushes what is written (on shutdown).
    pub fn sync(&self) {
        let guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = guard.0.sync_all();
    }
}

impl ratewise_tower::Journal for FileJournal {
    fn attempt_started<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        at: SystemTime,
    ) -> ratewise_tower::Written<'a> {
        ratewise_tower::written(self.attempt_started_with(job_id, attempt, at, None))
    }

    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> ratewise_tower::Written<'a> {
        ratewise_tower::written(self.ended(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn unfinished_attempts_and_stops_in_force_come_back() {
        let dir = std::env::temp_dir().join(format!("ratewise-journal-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let j = FileJournal::open(&dir).unwrap();
        let now = SystemTime::now();
        j.attempt_started_with("a", 1, now, None).unwrap();
        j.attempt_started_with("b", 1, now, None).unwrap();
        j.stop("fp-1", Cause::SpendCap, None);
        j.stop("fp-2", Cause::Billing, None);
        j.resume("fp-2");
        j.stop("fp-3", Cause::UserLimit, Some(now - Duration::from_secs(1)));
        // "a" ends; "b" never does; a crash cuts the last line.
        let rec = serde_json::to_string(&Line::AttemptEnded {
            job_id: "a".into(),
            attempt: 1,
            cause: "success".into(),
            action: "done".into(),
            status: Some(200),
            request_id: None,
        })
        .unwrap();
        {
            let mut f = std::fs::OpenOptions::new().append(true).open(&dir).unwrap();
            writeln!(f, "{rec}").unwrap();
            // Cut inside a multi-byte character, as a crash can.
            f.write_all(b"{\"event\":\"stop\",\"key\":\"\xc3").unwrap();
        }
        let r = recover(&dir).unwrap();
        assert_eq!(r.unknown.len(), 1);
        assert_eq!(r.unknown[0].job_id, "b");
        assert_eq!(r.unreadable, 1);
        let keys: Vec<_> = r
            .stops
            .iter()
            .map(|s| (s.key.as_str(), s.evidence.cause))
            .collect();
        assert_eq!(
            keys,
            vec![("fp-1", Cause::SpendCap)],
            "resumed and expired stops are gone"
        );
        // Closed once, reported once.
        let j = FileJournal::open(&dir).unwrap();
        j.close_unknown(&r.unknown[0]);
        let again = recover(&dir).unwrap();
        assert!(again.unknown.is_empty());
        let _ = std::fs::remove_file(&dir);
        assert!(
            recover(&dir).unwrap().unknown.is_empty(),
            "no file: nothing"
        );
    }

    #[test]
    fn a_stop_keeps_its_evidence_and_old_lines_still_read() {
        let path = std::env::temp_dir().join(format!("ratewise-journal-ev-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        {
            // Lines written before the evidence existed.
            let mut f = std::fs::File::create(&path).unwrap();
            writeln!(
                f,
                r#"{{"event":"stop","key":"fp-old","cause":"billing","at_ms":1796000000000}}"#
            )
            .unwrap();
            writeln!(
                f,
                r#"{{"event":"attempt_started","job_id":"j","attempt":1,"at_ms":1796000000000}}"#
            )
            .unwrap();
        }
        let j = FileJournal::open(&path).unwrap();
        let since = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        let cap = Evidence::of_answer(
            Cause::SpendCap,
            Some(http::StatusCode::TOO_MANY_REQUESTS),
            Some(br#"{"type":"error","error":{"type":"rate_limit_error","message":"cap","details":{"error_code":"enforced_spend_limit_reached"}}}"#),
            since,
            None,
        );
        j.stop_with("fp-cap", &cap);
        // A bare line after it (the admin writes one) keeps the evidence
        // and the since.
        j.stop("fp-cap", Cause::SpendCap, None);
        j.stop_with("fp-op", &Evidence::operator(since));
        let r = recover(&path).unwrap();
        let by = |k: &str| {
            r.stops
                .iter()
                .find(|s| s.key == k)
                .unwrap()
                .evidence
                .clone()
        };
        assert_eq!(by("fp-cap"), cap);
        assert_eq!(by("fp-old").cause, Cause::Billing);
        assert!(by("fp-old").answer.is_none());
        assert!(by("fp-op").operator && by("fp-op").cause_word() == "operator");
        assert_eq!(r.unknown.len(), 1);
        assert_eq!(r.unknown[0].key, None, "an old attempt line reads");
        let _ = std::fs::remove_file(&path);
    }
}
