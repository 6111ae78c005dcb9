//! A limit estimated from 429s alone, for a dimension no header states
//! (DESIGN principle 17: a provider that says nothing still teaches).
//!
//! Many providers (Gemini, Bedrock, most OpenAI-compatible hosts, anything
//! behind a proxy) send no `*-limit` / `*-remaining` / `*-reset` headers:
//! only 429s. Their buckets still obey arithmetic, and a 429 says one exact
//! thing: at that moment the provider's bucket for the dimension held less
//! than the request asked for — it was (nearly) **empty**. So:
//!
//! * **Between two 429s** both ends are empty, and what the provider let
//!   through in between is exactly what it refilled: the charge admitted
//!   `A` over the window `Δ` is the rate, `R ≈ A / Δ`, to within one
//!   request (a bucket that filled up meanwhile and spilled its refill only
//!   makes `A / Δ` lower than `R`: never an estimate above the truth from
//!   the window itself). This is the delivery-rate sample of TCP BBR, with
//!   "the pipe is full" read from the 429 instead of from the RTT.
//! * **The first 429 of a cold key** ends a window that started with the
//!   provider's bucket full, of an unknown capacity `C`: `A = C + R·Δ`.
//!   Both providers that document their buckets hold at most a minute of
//!   their limit, so `R ≥ A / (Δ + 1 min)`; where a 429 came before a few
//!   requests went through, the bucket held less than those and the
//!   throttled one (`C < h`), so `R ≥ (A − h) / Δ` too: a lower bound to
//!   start from, and `(A + a) / Δ` an upper one — an upper one only if
//!   the bucket never spilled in the window, which a slow start behind
//!   long answers into a one-second bucket does for most of it. So, until
//!   a window between two 429s has measured the rate, the estimate grows
//!   quickly from the lower bound (doubling every [`COLD_DOUBLING`]) to
//!   the upper one, rests there [`UPPER_REST`] of use and, with no 429
//!   there, goes past it. A hint's bound (`R ≤ a / hint`, precise hints
//!   only) is a true bound and caps the climb.
//! * **A short window** (too few units to measure) only cuts the pace
//!   that met the 429 multiplicatively ([`HOLD`]), as the AWS SDKs'
//!   adaptive retry mode does on every throttle, and keeps measuring from
//!   the same empty start.
//! * **After a measurement** the rate is held just under it
//!   ([`MARGIN`]) and then probes upward along a cubic, as CUBIC and the
//!   AWS adaptive mode do: flat near the last measured rate (where the
//!   limit almost certainly is: few probing 429s), steep far from it (a
//!   raised limit is found within minutes).
//!
//! The estimate is one belief among others: a limit stated by a header or
//! configured always wins (the controller consults this only for a
//! dimension with neither), and the bucket arithmetic that paces sends at
//! it is the same as for a stated limit.
//!
//! Sans-IO: every method takes the instant; nothing is random.

use super::{Belief, Believed, Change, Sample, Sureness};
use crate::time::Instant;
use crate::time::TimeBase;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// 429s within this long of an event's first are the same event: the
/// requests in flight when the provider's bucket ran dry, answered
/// together. They teach nothing more (the window between them is empty).
pub(crate) const EVENT_GAP: Duration = Duration::from_secs(1);

/// Share of a measured rate the pace holds below it (3 %): the
/// measurement is good to about one request, and the provider's own clock
/// and rounding are a hair behind ours.
pub(crate) const MARGIN: f64 = 0.03;

/// Growth of the probe above a measured rate after `τ` of calm: `PROBE ·
/// (τ / 1 min)³` of the measurement. It is back at the measurement after
/// about a minute (where the provider's bucket, refilling 3 % faster than
/// the pace, has banked a second or two of sends) and doubles it after
/// about 3.3 minutes.
pub(crate) const PROBE: f64 = 0.03;

/// Two measurements agree when they differ by at most this share (10 %:
/// a window of a couple of minutes measures to within a request or two of
/// thousands of tokens each).
pub(crate) const AGREE: f64 = 0.10;

/// Agreeing measurements slow the probe down to `PROBE / 2^MAX_AGREED`:
/// a stable limit is crossed about every 2.5 minutes instead of every
/// minute, and a raised one is still found within about ten.
pub(crate) const MAX_AGREED: u32 = 4;

/// Before any window between two 429s has measured the rate, the estimate
/// (a lower bound) doubles every this long of calm, up to the cold upper
/// bound.
pub(crate) const COLD_DOUBLING: Duration = Duration::from_secs(10);

/// How long a cold climb rests at its upper bound before it goes past
/// it (see [`SilentEstimate::rate`]): one doubling's time.
pub(crate) const UPPER_REST: Duration = COLD_DOUBLING;

/// A 429 never lowers the pace that met it below this share of it: the
/// multiplicative decrease (CUBIC's β, the AWS adaptive mode's 0.7) where
/// no window long enough to measure says more.
pub(crate) const HOLD: f64 = 0.8;

/// A window measures the rate when at least this many requests went
/// through besides the throttled one (the sample's error is about one
/// request)...
pub(crate) const MEASURE_REQUESTS: u64 = 4;

/// ... over at least this long.
pub(crate) const MEASURE_MIN: Duration = Duration::from_secs(5);

/// The estimate never grows past this multiple of its base: the probe's
/// cubic is not allowed to run away over an idle hour.
const MAX_GROWTH: f64 = 64.0;

/// Where an estimate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EstimateState {
    /// A cold lower bound (one 429, whose window started with a full
    /// bucket); growing quickly.
    Cold,
    /// Measured between two 429s; probing slowly upward.
    Measured,
}

/// The estimate of one dimension of one scope (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SilentEstimate {
    /// The rate the probe grows from (units per minute); 0 before the first
    /// 429.
    base: u64,
    /// When the probe's growth started (the last event).
    base_at: Instant,
    /// The most the rate may grow to while cold (units per minute).
    upper: u64,
    /// Whether `upper` is a hint's bound (`R ≤ a / hint`: a true bound
    /// while the limit stands) rather than a window's (true only if the
    /// provider's bucket never spilled: a cold climb goes past it after
    /// resting there).
    upper_hinted: bool,
    state: Option<EstimateState>,
    /// The open measuring window: its start, whether it started empty (a
    /// 429) rather than full (a cold key's first admission), and the units
    /// the provider let through since.
    window: Option<Window>,
    /// The last event's first 429.
    last_event: Option<Instant>,
    /// Events (429 bursts) taught.
    events: u64,
    /// Measurements in a row that agreed with the one before (within
    /// [`AGREE`]): each halves the probe's growth, down to a sixteenth — a
    /// limit that stays put is probed less and less often, one that moved
    /// is probed at full speed again.
    agreed: u32,
    /// Units sent lately: a sum decaying with time constant
    /// [`RECENT`], as of `recent_at` — the pace the 429 answered, where the
    /// rate in force is only a ceiling (a caller that sends less than it
    /// allows proves nothing about it).
    recent: f64,
    recent_at: Instant,
    /// The most the provider's bucket held when the cold window opened
    /// (units), where an early 429 showed it: throttled before a few
    /// requests went through, it held less than those requests and the
    /// throttled one. What the window let through beyond it, the refill
    /// paid for: the cold lower bound is then `(A − held) / Δ`, not only
    /// `A / (Δ + 1 min)`, which takes a bucket of one second for one of a
    /// minute and starts the climb from a thirtieth of the limit.
    held_at_open: Option<u64>,
    /// What a climb's first 429 never cuts the estimate below (units per
    /// minute): the cold lower bound where it rests on the bucket's
    /// arithmetic alone, the minute bound under it where it rests on an
    /// early 429 having been about the bucket's level. An early 429 that
    /// was a one-off (another client's burst, an acceleration rule) would
    /// put the bound at the pace the slow start reached, above the limit
    /// while a minute's bank drained: the next 429 cuts that back.
    cold_floor: u64,
}

/// The probe grows up to this multiple of what was sent lately.
const GROWTH_ROOM: f64 = 2.0;

/// The time constant of the recent send rate (see `recent`).
const RECENT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    start: Instant,
    from_empty: bool,
    /// Units taken since `start`, corrected by the ends of what was taken
    /// in it (signed: a correction may arrive before its take is summed).
    admitted: i128,
    /// Takes since `start` (sends, answered or not): a window measures
    /// once a few requests went through, whatever their sizes.
    takes: u64,
}

impl Window {
    /// Units the provider let through, the throttled request's `less`
    /// taken out (it is still counted until its release).
    fn through(&self, less: u64) -> u64 {
        u64::try_from((self.admitted - i128::from(less)).max(0)).unwrap_or(u64::MAX)
    }
}

impl Default for SilentEstimate {
    fn default() -> Self {
        SilentEstimate {
            base: 0,
            base_at: Instant::ZERO,
            upper: 0,
            upper_hinted: false,
            state: None,
            window: None,
            last_event: None,
            events: 0,
            agreed: 0,
            recent: 0.0,
            recent_at: Instant::ZERO,
            held_at_open: None,
            cold_floor: 0,
        }
    }
}

/// What one 429 did to an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taught {
    /// Part of an event already taught.
    Nothing,
    /// The first estimate (a cold lower bound).
    Cold,
    /// A short window: the rate was cut.
    Cut,
    /// A window between two 429s measured the rate.
    Measured,
}

impl SilentEstimate {
    /// An estimate that starts at `rate` at `t`, as if measured: a process
    /// cut off from its peers starts at its share of a stated limit and
    /// learns the share it really gets from its own 429s.
    pub(crate) fn seeded(rate: u64, t: Instant) -> Self {
        SilentEstimate {
            base: to_units(rate as f64 / (1.0 - MARGIN)),
            base_at: t,
            upper: rate,
            state: Some(EstimateState::Measured),
            window: Some(Window {
                start: t,
                from_empty: true,
                admitted: 0,
                takes: 0,
            }),
            ..Default::default()
        }
    }

    /// An estimate remembered from `was` (a record read back after a
    /// restart), recalled at `rate` as a measurement taken at `t`: no
    /// window is open across the time nobody measured (the first
    /// admission opens one from a full bucket, as on a cold key), and how
    /// often measurements agreed is kept (a limit that stayed put is still
    /// probed gently).
    pub(crate) fn recalled(rate: u64, was: &SilentEstimate, t: Instant) -> Self {
        SilentEstimate {
            window: None,
            events: was.events,
            agreed: was.agreed,
            ..SilentEstimate::seeded(rate, t)
        }
    }

    /// A process cut off from its peers that had no estimate when its
    /// limit became stated (it learned the limit after it lost them)
    /// starts at its share `rate` now, as [`seeded`](Self::seeded) would
    /// have, keeping what it has admitted since its first send: its first
    /// 429 then measures the share it really gets (at most `rate`), instead
    /// of reading its own sends as a cold key's whole traffic (a lower
    /// bound from a third of the sends is a third of the limit).
    pub(crate) fn seed_keeping_window(&mut self, rate: u64, t: Instant) {
        let window = self.window.map(|w| Window {
            from_empty: true,
            ..w
        });
        *self = SilentEstimate {
            window,
            held_at_open: self.held_at_open,
            cold_floor: self.cold_floor,
            recent: self.recent,
            recent_at: self.recent_at,
            ..SilentEstimate::seeded(rate, t)
        };
    }

    /// The provider showed its bucket at least half full while this
    /// estimate paced a share of a stated limit (a process cut off from
    /// its peers, whose peers went quiet): the share measured while they
    /// were busy is no longer the limit, so the estimate climbs again
    /// from where it is, doubling every [`COLD_DOUBLING`] while used, until
    /// a 429 measures anew. An estimate already climbing keeps its climb.
    pub(crate) fn headroom(&mut self, t: Instant) {
        if self.state != Some(EstimateState::Measured) {
            return;
        }
        let Some(now) = self.rate(t) else { return };
        self.base = now.max(1);
        self.cold_floor = self.base;
        self.base_at = t;
        self.upper = u64::MAX;
        self.upper_hinted = false;
        self.state = Some(EstimateState::Cold);
    }

    /// An admission took `units` at `t`: the provider is taken to let
    /// them through. The first admission opens the cold window (the
    /// provider's bucket is taken to be full then).
    pub(crate) fn took(&mut self, units: u64, t: Instant) {
        let w = self.window.get_or_insert(Window {
            start: t,
            from_empty: false,
            admitted: 0,
            takes: 0,
        });
        w.admitted = w.admitted.saturating_add(i128::from(units));
        w.takes = w.takes.saturating_add(1);
        self.recent = self.recent_at(t) + units as f64;
        self.recent_at = t;
    }

    /// The decayed sum of recent sends at `t`.
    fn recent_at(&self, t: Instant) -> f64 {
        let dt = t.saturating_duration_since(self.recent_at).as_secs_f64();
        self.recent * (-dt / RECENT.as_secs_f64()).exp()
    }

    /// Units per minute sent lately.
    fn sent_lately(&self, t: Instant) -> f64 {
        self.recent_at(t) * 60.0 / RECENT.as_secs_f64()
    }

    /// A reservation admitted at `admitted_at` ended at `delta` units more
    /// (a settle above its estimate) or fewer (a settle below it; a
    /// release, which the provider never charged) than it took: counted
    /// only in the window it was taken in.
    pub(crate) fn corrected(&mut self, delta: i128, admitted_at: Instant) {
        if let Some(w) = &mut self.window {
            if admitted_at >= w.start {
                w.admitted = w.admitted.saturating_add(delta);
            }
        }
    }

    /// Whether any 429 has taught an estimate yet.
    pub(crate) fn is_set(&self) -> bool {
        self.state.is_some()
    }

    /// Where the estimate stands, if anywhere.
    pub(crate) fn state(&self) -> Option<EstimateState> {
        self.state
    }

    /// 429 events taught.
    #[cfg(test)]
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// A 429 on this dimension at `t`, for a request that asked for
    /// `amount` units here, whose hint (when it has one) said to wait
    /// `hint`.
    pub(crate) fn throttled(&mut self, amount: u64, hint: Option<Duration>, t: Instant) -> Taught {
        if self
            .last_event
            .is_some_and(|e| t.saturating_duration_since(e) < EVENT_GAP)
        {
            return Taught::Nothing;
        }
        self.last_event = Some(t);
        self.events = self.events.saturating_add(1);
        let a = amount.max(1);
        let Some(w) = self.window else {
            // A 429 before anything was admitted: the window starts here,
            // empty; nothing to measure yet.
            self.window = Some(Window {
                start: t,
                from_empty: true,
                admitted: 0,
                takes: 0,
            });
            return Taught::Nothing;
        };
        let span = t
            .saturating_duration_since(w.start)
            .max(Duration::from_millis(1));
        let span_ns = span.as_nanos() as f64;
        let per_min = |units: f64, ns: f64| units * 60e9 / ns;
        // The throttled request is still counted (its release comes
        // after this): out of a window that closes here, and left to its
        // release in one that stays open.
        let through = w.through(a);
        // The hint is how long the provider needs to refill what this
        // request lacked, at most all of it: `R ≤ a / hint`. A hint in
        // whole seconds is rounded up by up to one.
        // A hint past a minute is a quota (a day's, a month's), not the
        // refill of a per-minute bucket: it bounds nothing here.
        let hinted = hint
            .filter(|h| *h <= Duration::from_secs(60))
            .and_then(|h| {
                let slack = if h.subsec_nanos() == 0 { 1.0 } else { 0.001 };
                let secs = h.as_secs_f64() - slack;
                (secs > 0.0).then(|| a as f64 * 60.0 / secs)
            });
        // Requests that went through besides the throttled one (an
        // estimate: a 429'd request of the same event counts too).
        let went = w.takes.saturating_sub(1);
        if !w.from_empty && went < MEASURE_REQUESTS {
            // A cold key throttled before a few requests' worth went
            // through: the provider's bucket is smaller than that, or the
            // 429 is a one-off; either way there is no rate to bound from
            // below. The hint's pause answers it, and the window stays
            // open. The bucket held less than what went through and this
            // request when the window opened.
            let held = through.saturating_add(a);
            self.held_at_open = Some(self.held_at_open.map_or(held, |h| h.min(held)));
            self.last_event = None;
            self.events = self.events.saturating_sub(1);
            return Taught::Nothing;
        }
        let taught = if !w.from_empty {
            // Cold: A = C + R·Δ with C ≤ a minute of R, or below what an
            // early 429 showed the bucket held.
            let minute = per_min(through as f64, span_ns + 60e9);
            let held = self.held_at_open.take();
            let lower = held.map_or(minute, |h| {
                per_min(through.saturating_sub(h) as f64, span_ns).max(minute)
            });
            let window = per_min(through.saturating_add(a) as f64, span_ns);
            let upper = hinted.map_or(window, |h| window.min(h));
            // From the lower bound. A start higher up (the bounds'
            // geometric mean) was tried: it meets the limit within seconds
            // of a burst, whose first measured window then spills, and
            // the shipped `silent-anthropic` (60 jobs) fell from 0.95–0.99
            // of the limit to 0.83–0.93.
            let now_rate = self.rate(t).map(|r| r as f64);
            let start = now_rate.map_or(lower, |r| r.min(lower));
            self.base = to_units(start.max(a as f64));
            // Without an early 429 `start` is under the minute bound, and
            // the floor is the base.
            self.cold_floor = to_units(minute.min(start).max(a as f64));
            self.upper = to_units(upper).max(self.base);
            self.upper_hinted = hinted.is_some_and(|h| h < window);
            self.state = Some(EstimateState::Cold);
            Taught::Cold
        } else {
            // Empty at both ends. What went through is what refilled, less
            // what a full bucket spilled while the pace was below the
            // limit: a lower bound, exact when the pace was above the limit
            // all along. The pace that met the 429 — the rate in force,
            // or what was really sent lately where that is less — is an
            // upper one: the estimate is the measurement (held just under
            // it) where the window is long enough to measure, never below
            // `HOLD` of that pace (CUBIC's β: a window that spilled
            // under-states the limit), and never above it.
            let in_force = self.rate(t).map_or(f64::MAX, |r| r as f64);
            let pace = in_force.min(self.sent_lately(t)).max(1.0);
            let measurable = went >= MEASURE_REQUESTS && span >= MEASURE_MIN;
            let held = pace * HOLD;
            // Only the climb out of a cold start spills for long (a pace
            // doubling up from a lower bound, below the limit for most of
            // the window); later windows start empty under a pace near the
            // limit, and their measurement stands alone.
            let climbing = self.state == Some(EstimateState::Cold);
            // `(A + a) / Δ` bounds the rate only once a few requests' worth
            // went through: on fewer, a request the provider took just
            // before the window (its clock is not ours) decides it.
            let upper = if went >= 2 {
                per_min(through.saturating_add(a) as f64, span_ns)
            } else {
                f64::MAX
            };
            let upper = hinted.map_or(upper, |h| upper.min(h));
            let new = if measurable {
                let m = per_min(through as f64, span_ns) * (1.0 - MARGIN);
                if climbing {
                    m.max(held.min(upper))
                } else {
                    m
                }
            } else if climbing {
                // The climb crossed the limit: back to half its pace (TCP
                // leaving slow start), never below the cold lower bound
                // (see `cold_floor`).
                (pace * 0.5).max(self.cold_floor as f64).min(upper)
            } else {
                held.min(upper)
            }
            .min(pace);
            if measurable && self.state == Some(EstimateState::Measured) {
                let before = self.base as f64 * (1.0 - MARGIN);
                if (new - before).abs() <= before * AGREE {
                    self.agreed = self.agreed.saturating_add(1).min(MAX_AGREED);
                } else {
                    self.agreed = 0;
                }
            }
            // Never under one such request a minute: a window whose sends
            // were all refused measures nothing went through, not a limit
            // of zero (an estimate of one token a minute would hold the
            // next request for hours, and the probe grows from it only
            // so far).
            self.base = to_units(new.max(a as f64) / (1.0 - MARGIN));
            self.upper = self.upper.max(self.base);
            self.state = Some(EstimateState::Measured);
            self.base_at = t;
            if !measurable {
                // Too short to measure: keep measuring from the same empty
                // start (the window stays open).
                return Taught::Cut;
            }
            Taught::Measured
        };
        self.base_at = t;
        self.window = Some(Window {
            start: t,
            from_empty: true,
            admitted: 0,
            takes: 0,
        });
        taught
    }

    /// The estimated limit in force at `t`, units per minute (`None`
    /// before any 429).
    pub(crate) fn rate(&self, t: Instant) -> Option<u64> {
        let state = self.state?;
        let base = self.base.max(1) as f64;
        let tau = t.saturating_duration_since(self.base_at).as_secs_f64();
        // The probe grows only while the dimension is used: above what is
        // really sent, by at most `GROWTH_ROOM` (RFC 7661's rule for an
        // application-limited sender). An idle key keeps its estimate; a
        // backlogged one finds a raised limit.
        let room = (self.sent_lately(t) * GROWTH_ROOM).max(base);
        let rate = match state {
            EstimateState::Cold => {
                // `(A + a) / Δ` bounds the rate only if the provider's
                // bucket never filled up in the window (a full bucket
                // spills its refill unseen): a slow start behind long
                // answers sends a few requests in ten seconds into a
                // bucket that refills in one, and its "upper bound" is a
                // tenth of the limit. So the climb rests at the bound for
                // `UPPER_REST` of use and, with no 429 there, goes on past
                // it: a bound that was true meets a 429 (which measures),
                // one that was not is left behind.
                let doublings = tau / COLD_DOUBLING.as_secs_f64();
                let upper = self.upper.max(self.base) as f64;
                let to_upper = (upper / base).log2().max(0.0);
                let rest = UPPER_REST.as_secs_f64() / COLD_DOUBLING.as_secs_f64();
                let d = if doublings > to_upper + rest && !self.upper_hinted {
                    doublings - rest
                } else {
                    doublings.min(to_upper)
                };
                base * d.exp2().min(MAX_GROWTH)
            }
            EstimateState::Measured => {
                let x = tau / 60.0;
                let probe = PROBE / f64::from(1u32 << self.agreed.min(MAX_AGREED));
                base * (1.0 - MARGIN + (probe * x * x * x).min(MAX_GROWTH))
            }
        };
        Some(to_units(rate.min(room)))
    }

    /// The estimate as a shared record keeps it.
    pub(crate) fn to_record(&self, base: TimeBase) -> Option<SilentRecord> {
        let state = self.state?;
        Some(SilentRecord {
            state,
            base: self.base,
            base_at: base.out(self.base_at),
            upper: self.upper,
            events: self.events,
            window_start: self.window.map(|w| base.out(w.start)),
            window_from_empty: self.window.is_some_and(|w| w.from_empty),
            window_admitted: self.window.map_or(0, |w| w.through(0)),
            window_takes: self.window.map_or(0, |w| w.takes),
            last_event: self.last_event.map(|e| base.out(e)),
            agreed: self.agreed,
        })
    }

    /// An estimate read back from a record.
    pub(crate) fn from_record(r: &SilentRecord, base: TimeBase) -> Self {
        SilentEstimate {
            base: r.base,
            base_at: base.back(r.base_at),
            upper: r.upper.max(r.base),
            upper_hinted: false,
            state: Some(r.state),
            window: r.window_start.map(|s| Window {
                start: base.back(s),
                from_empty: r.window_from_empty,
                admitted: i128::from(r.window_admitted),
                takes: r.window_takes,
            }),
            last_event: r.last_event.map(|e| base.back(e)),
            events: r.events,
            agreed: r.agreed,
            recent: 0.0,
            recent_at: Instant::ZERO,
            held_at_open: None,
            cold_floor: r.base,
        }
    }
}

/// One dimension's estimate in a key's shared record (format 3): times as
/// Unix nanoseconds, like the rest of the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SilentRecord {
    pub state: EstimateState,
    pub base: u64,
    pub base_at: i64,
    pub upper: u64,
    pub events: u64,
    pub window_start: Option<i64>,
    pub window_from_empty: bool,
    pub window_admitted: u64,
    #[serde(default)]
    pub window_takes: u64,
    pub last_event: Option<i64>,
    #[serde(default)]
    pub agreed: u32,
}

/// A rate as whole units per minute: at least 1, at most the largest
/// limit a bucket takes; garbage (NaN) is 1, never 0 and never unbounded.
fn to_units(rate: f64) -> u64 {
    if rate.is_nan() || rate < 1.0 {
        1
    } else {
        rate.min(crate::admit::bucket::MAX_LIMIT as f64) as u64
    }
}

#[cfg(test)]
#[path = "estimated_tests.rs"]
mod tests;

impl Belief for SilentEstimate {
    /// Admissions and ends count what the provider let through; a 429
    /// ends a window (and may measure the rate); headroom says a share
    /// measured while cut off is no longer all there is.
    fn observe(&mut self, sample: &Sample) -> Change {
        match *sample {
            Sample::Admitted { units, at } if units > 0 => {
                self.took(units, at);
                Change::NOTHING
            }
            Sample::Settled { delta, admitted_at } if delta != 0 => {
                self.corrected(delta, admitted_at);
                Change::NOTHING
            }
            Sample::Throttled { units, hint, at } => match self.throttled(units, hint, at) {
                Taught::Nothing => Change::NOTHING,
                how => Change {
                    taught: Some(how),
                    ..Change::MOVED
                },
            },
            Sample::Headroom { at } => {
                self.headroom(at);
                Change::MOVED
            }
            _ => Change::NOTHING,
        }
    }

    fn believed(&self, t: Instant) -> Option<Believed> {
        let limit = self.rate(t)?;
        Some(Believed {
            limit,
            capacity: None,
            sure: Sureness::Estimated(self.state()?),
        })
    }
}
