//! The discipline of one scope's waiting queue: whose turn it is.

use super::cost::Cost;
use super::levels::{LevelId, Levels};
use super::workload::{Place, Workload};
use crate::time::Instant;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// How long admitted cost counts toward a level's (or a flow's) recent
/// share: it decays with this time constant. A minute, the providers'
/// own window: a floor is kept over the span the limit is counted on.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Idle flows (none of their jobs waiting) a level remembers at most.
/// An idle flow is worth remembering while it is ahead of its level (it
/// used more than its share, and must not come back with a clean slate);
/// past this many, those not ahead are forgotten first, then the least
/// ahead: memory stays bounded whatever the number of tenants, at the
/// price of a little forgiven debt.
pub const MAX_IDLE_FLOWS: usize = 256;

/// The scale of the decayed sums is reset before it reaches this, so the
/// running sums never overflow.
const RESCALE_AT: f64 = 1e100;

/// Where a job was charged at its admission, to correct when its
/// reservation settles ([`Discipline::settled`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Charged {
    level: LevelId,
    flow: Box<str>,
    weight: u32,
    cost: Cost,
    /// When it was charged: a correction is made as of then, so it
    /// decays as the charge did.
    at: Instant,
}

impl Charged {
    /// The level charged.
    pub fn level(&self) -> LevelId {
        self.level
    }
    /// The flow charged.
    pub fn flow(&self) -> &str {
        &self.flow
    }
    /// The cost charged at admission (the reservation's).
    pub fn cost(&self) -> Cost {
        self.cost
    }
}

/// One flow of a level: its waiting jobs, oldest first, and where it
/// stands in the level's virtual time.
#[derive(Debug, Default)]
struct Flow {
    waiting: BTreeSet<Place>,
    /// The virtual time its next job starts at: the cost it was admitted
    /// so far, divided by its weight, from when it last became active.
    finish: f64,
    weight: u32,
    floor: f64,
    /// Admitted cost, decayed (scaled by the discipline's `scale`).
    recent: f64,
}

/// One level: its flows and its virtual clock.
#[derive(Debug, Default)]
struct Level {
    flows: HashMap<Box<str>, Flow>,
    /// The level's virtual time: the start of the last job admitted in
    /// turn. A flow that becomes active starts no earlier, so an idle flow
    /// banks no credit (work-conserving: what it did not use was lent,
    /// and is not owed back).
    vtime: f64,
    /// Admitted cost, decayed (scaled by the discipline's `scale`).
    recent: f64,
    /// The last admitted job's cost, scaled as `recent` was then: the
    /// size its next job is taken to have.
    last: f64,
    waiting: usize,
    /// Flows with jobs waiting.
    active: usize,
}

/// One level of a [`Discipline`], as [`Discipline::view`] shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelView {
    /// The level.
    pub level: LevelId,
    /// Its jobs waiting.
    pub waiting: usize,
    /// What it was admitted lately, as a share of the whole limit.
    pub used_of_limit: f64,
    /// Its flows that wait or were admitted lately.
    pub flows: Vec<FlowView>,
}

/// One flow of a level, as [`Discipline::view`] shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowView {
    /// Its name.
    pub flow: String,
    /// Its jobs waiting.
    pub waiting: usize,
    /// When its oldest waiting job arrived.
    pub oldest: Option<Instant>,
    /// Its weight.
    pub weight: u32,
    /// What it was admitted lately, as a share of the whole limit.
    pub used_of_limit: f64,
}

/// The queue discipline of one scope (key × model class): which waiting
/// job's turn it is to ask for admission.
///
/// Sans-IO and deterministic: it never reads a clock (`now` is passed to
/// the operations that need it) and its answers depend only on the calls
/// made. The rules, in order:
///
/// 1. **Between levels, the higher goes first**, except that a lower level
///    with work waiting whose recent share of admitted cost is below its
///    minimum share ([`Levels::min_share`], default 10 %) gets the turn, so
///    it never starves (its share is counted halfway through its next job,
///    so that it centres on the minimum). Recent shares decay over
///    [`DEFAULT_WINDOW`]; since every level decays alike, shares change only
///    at admissions, and the turn needs no clock.
/// 2. **Within a level, flows share by cost** (start-time fair queuing): a
///    flow's virtual time advances by each admitted job's [`Cost`] over its
///    weight, and the active flow with the least virtual time goes. A flow
///    that becomes active starts at the level's virtual time at the
///    earliest, so an idle flow banks no credit: a lone flow gets the whole
///    limit, and a share nobody uses is lent at once and taken back at the
///    next admission. A flow below its floor ([`Workload::floor`]) goes
///    first.
/// 3. **Within a (level, flow), oldest first**, by [`Place`].
///
/// Deadlines are the driver's: a job that cannot be sent in time is
/// answered at once whatever its level (the driver asks out of turn by the
/// job's deadline); the discipline only orders those that can wait.
///
/// ```
/// use ratewise_core::admit::fair::{Cost, Discipline, Levels, Place, Workload};
/// use ratewise_core::Instant;
///
/// let levels = Levels::default();
/// let (bulk, interactive) = (levels.level("bulk").unwrap(), levels.level("interactive").unwrap());
/// let mut d = Discipline::new(levels);
/// let at = |seq| Place { arrived: Instant::ZERO, seq };
/// d.join(at(0), &Workload::new(bulk, "batch"));
/// d.join(at(1), &Workload::new(interactive, "chat"));
/// // The interactive job passes the bulk job that was there first.
/// assert_eq!(d.head(), Some(at(1)));
/// d.admitted(at(1), Cost(1_000), Instant::ZERO);
/// assert_eq!(d.head(), Some(at(0)));
/// ```
#[derive(Debug)]
pub struct Discipline {
    levels: Levels,
    state: Vec<Level>,
    jobs: rustc_hash::FxHashMap<Place, (LevelId, Box<str>)>,
    window: Duration,
    /// The instant the decayed sums are scaled from.
    base: Instant,
    head: Option<Place>,
}

impl Discipline {
    /// An empty discipline over `levels`.
    pub fn new(levels: Levels) -> Discipline {
        let state = levels.iter().map(|_| Level::default()).collect();
        Discipline {
            levels,
            state,
            jobs: Default::default(),
            window: DEFAULT_WINDOW,
            base: Instant::ZERO,
            head: None,
        }
    }

    /// The same, with recent shares decaying over `window` instead of
    /// [`DEFAULT_WINDOW`] (at least a millisecond).
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Discipline {
        self.window = window.max(Duration::from_millis(1));
        self
    }

    /// The levels it orders.
    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// Jobs waiting.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Whether `place` waits here.
    pub fn contains(&self, place: Place) -> bool {
        self.jobs.contains_key(&place)
    }

    /// The job whose turn it is to ask for admission.
    pub fn head(&self) -> Option<Place> {
        self.head
    }

    /// Whether it is `place`'s turn.
    pub fn is_head(&self, place: Place) -> bool {
        self.head == Some(place)
    }

    /// A job joins at `place` as `workload` (a level out of range is the
    /// default level). A place already waiting is left as it is. The
    /// flow's weight and floor are the latest joiner's.
    pub fn join(&mut self, place: Place, workload: &Workload) {
        if self.jobs.contains_key(&place) {
            return;
        }
        let level = if workload.level.index() < self.state.len() {
            workload.level
        } else {
            self.levels.default_level()
        };
        let flow_name: Box<str> = workload.flow.as_str().into();
        let total: f64 = self.state.iter().map(|l| l.recent).sum();
        let min_share = self.levels.min_share(level);
        let l = &mut self.state[level.index()];
        if l.waiting == 0 {
            // A level becoming active banks no floor while it was idle: it
            // starts at its minimum share, so it then keeps that share
            // interleaved with the levels above rather than taking a burst
            // of turns to catch up on the window it was idle in.
            if min_share < 1.0 {
                let others = total - l.recent;
                l.recent = l.recent.max(min_share / (1.0 - min_share) * others);
            }
        }
        let (vtime, level_recent) = (l.vtime, l.recent);
        let f = l.flows.entry(flow_name.clone()).or_default();
        if f.waiting.is_empty() {
            // Becoming active: no credit banked while idle — neither
            // virtual time nor floor.
            f.finish = f.finish.max(vtime);
            f.recent = f.recent.max(workload.floor * level_recent);
            l.active += 1;
        }
        f.weight = workload.weight.max(1);
        f.floor = workload.floor;
        f.waiting.insert(place);
        l.waiting += 1;
        self.jobs.insert(place, (level, flow_name));
        self.choose();
    }

    /// The job at `place` leaves without being admitted (it ended, or its
    /// caller left). Returns whether it was waiting.
    pub fn leave(&mut self, place: Place) -> bool {
        if self.remove(place).is_none() {
            return false;
        }
        self.choose();
        true
    }

    /// The job at `place` was admitted at `now`, its reservation costing
    /// `cost`: it leaves, and its flow and level are charged. Returns where
    /// it was charged, for [`settled`](Self::settled); `None` when it was
    /// not waiting (nothing charged).
    pub fn admitted(&mut self, place: Place, cost: Cost, now: Instant) -> Option<Charged> {
        let in_turn = self.head == Some(place);
        let (level, flow_name) = self.remove(place)?;
        let scale = self.scale(now);
        let c = cost.0 as f64;
        let l = &mut self.state[level.index()];
        let f = l.flows.get_mut(&flow_name)?;
        // Its start tag: set no earlier than the level's virtual time when
        // the flow became active (see `join`), and lowered since only by
        // settlements that found it overcharged — credit it is owed, not
        // clamped away here.
        let start = f.finish;
        f.finish = start + c / f64::from(f.weight.max(1));
        f.recent += c * scale;
        let weight = f.weight;
        if in_turn {
            l.vtime = l.vtime.max(start);
        }
        l.recent += c * scale;
        l.last = c * scale;
        self.prune(level);
        self.choose();
        Some(Charged {
            level,
            flow: flow_name,
            weight,
            cost,
            at: now,
        })
    }

    /// A job charged `charged` at admission settled at `now`, its
    /// reservation in the end costing `actual` (its usage: a generous
    /// `max_tokens` reserved more than was generated). Its flow's virtual
    /// time and the recent shares are corrected by the difference, so
    /// flows share by what they used, not by what they reserved.
    pub fn settled(&mut self, charged: &Charged, actual: Cost, now: Instant) {
        let diff = actual.0 as f64 - charged.cost.0 as f64;
        if diff == 0.0 {
            return;
        }
        // Rescaled if due, then the factor of the charge's own instant.
        self.scale(now);
        let scale = self.factor(charged.at);
        let Some(l) = self.state.get_mut(charged.level.index()) else {
            return;
        };
        l.recent = (l.recent + diff * scale).max(0.0);
        // The size the level's next job is taken to have (its minimum
        // share is counted halfway through it): what a job was found to
        // cost, not what it reserved — a generous max_tokens would
        // otherwise hold a lower level under its share.
        l.last = actual.0 as f64 * scale;
        if let Some(f) = l.flows.get_mut(&charged.flow) {
            f.finish += diff / f64::from(charged.weight.max(1));
            f.recent = (f.recent + diff * scale).max(0.0);
        }
        self.choose();
    }

    /// About how many jobs go before `place` (as if every job cost the
    /// same): those of its own flow that arrived before it; of each other
    /// flow of its level, as many as the weights let go while its own go;
    /// and of the higher levels, all of those waiting — but no more than
    /// its level's minimum share lets go before it. Exact for a FIFO (one
    /// level, one flow). A driver predicts from it whether the job can be
    /// sent by its deadline: counting every higher job would end a bulk
    /// job that its minimum share gets sent in time.
    pub fn ahead(&self, place: Place) -> usize {
        let Some((level, flow)) = self.jobs.get(&place) else {
            return 0;
        };
        let higher: usize = self.state[..level.index()].iter().map(|l| l.waiting).sum();
        let l = &self.state[level.index()];
        let Some(own) = l.flows.get(flow) else {
            return higher;
        };
        let within = Self::ahead_within(l, own, flow, place);
        let min = self.levels.min_share(*level);
        let higher = if min > 0.0 {
            let bound = ((within + 1) as f64 * (1.0 - min) / min).ceil();
            higher.min(bound as usize)
        } else {
            higher
        };
        higher + within
    }

    /// Jobs of `place`'s own level that go before it (see [`ahead`](Self::ahead)).
    fn ahead_within(l: &Level, own: &Flow, flow: &str, place: Place) -> usize {
        let k = own.waiting.range(..place).count();
        let mut others = 0usize;
        for (name, f) in &l.flows {
            if &**name == flow || f.waiting.is_empty() {
                continue;
            }
            let share = ((k + 1) as f64 * f64::from(f.weight) / f64::from(own.weight.max(1)))
                .floor() as usize;
            others += f.waiting.len().min(share);
        }
        k + others
    }

    /// Recent share of admitted cost of each level, in level order (zeros
    /// before anything was admitted): what the minimum shares are held
    /// against.
    pub fn recent_shares(&self) -> Vec<f64> {
        let total: f64 = self.state.iter().map(|l| l.recent).sum();
        self.state
            .iter()
            .map(|l| if total > 0.0 { l.recent / total } else { 0.0 })
            .collect()
    }

    /// Flows tracked, idle or not, over every level.
    #[cfg(test)]
    pub(crate) fn flows_tracked(&self) -> usize {
        self.state.iter().map(|l| l.flows.len()).sum()
    }

    fn remove(&mut self, place: Place) -> Option<(LevelId, Box<str>)> {
        let (level, flow) = self.jobs.remove(&place)?;
        let l = &mut self.state[level.index()];
        if let Some(f) = l.flows.get_mut(&flow) {
            if f.waiting.remove(&place) {
                l.waiting -= 1;
                if f.waiting.is_empty() {
                    l.active -= 1;
                }
            }
        }
        Some((level, flow))
    }

    /// The factor admitted cost is scaled by at `now`: sums grow by
    /// `e^(t/window)` instead of every sum decaying, so a charge touches
    /// one level and one flow, and the ratios are those of sums decayed to
    /// the same instant.
    fn scale(&mut self, now: Instant) -> f64 {
        let w = self.window.as_secs_f64();
        let mut x = (now.as_nanos() as f64 - self.base.as_nanos() as f64) / 1e9 / w;
        if x.exp() > RESCALE_AT {
            let down = (-x).exp();
            for l in &mut self.state {
                l.recent *= down;
                l.last *= down;
                for f in l.flows.values_mut() {
                    f.recent *= down;
                }
            }
            self.base = now;
            x = 0.0;
        }
        x.exp()
    }

    /// Each level as a status page shows it, highest first: its jobs
    /// waiting, what it was admitted lately as a share of the whole limit
    /// ([`used_of_limit`](Self::used_of_limit)), and the same of each of
    /// its flows that waits or was admitted within the window (the flows
    /// with work waiting first, then the most used).
    pub fn view(&self, now: Instant) -> Vec<LevelView> {
        let per_limit =
            60.0 / self.window.as_secs_f64() / self.factor(now) / super::cost::WHOLE_LIMIT as f64;
        self.levels
            .iter()
            .map(|id| {
                let l = &self.state[id.index()];
                let mut flows: Vec<FlowView> = l
                    .flows
                    .iter()
                    .map(|(name, f)| FlowView {
                        flow: name.to_string(),
                        waiting: f.waiting.len(),
                        oldest: f.waiting.iter().map(|p| p.arrived).min(),
                        weight: f.weight.max(1),
                        used_of_limit: f.recent * per_limit,
                    })
                    .filter(|f| f.waiting > 0 || f.used_of_limit > 1e-6)
                    .collect();
                flows.sort_by(|a, b| {
                    b.waiting
                        .min(1)
                        .cmp(&a.waiting.min(1))
                        .then(b.used_of_limit.total_cmp(&a.used_of_limit))
                        .then_with(|| a.flow.cmp(&b.flow))
                });
                LevelView {
                    level: id,
                    waiting: l.waiting,
                    used_of_limit: l.recent * per_limit,
                    flows,
                }
            })
            .collect()
    }

    /// The level and flow of the job waiting at `place`.
    pub fn workload_of(&self, place: Place) -> Option<(LevelId, &str)> {
        self.jobs.get(&place).map(|(l, f)| (*l, &**f))
    }

    /// The level the job at `place` waits at (`None`: not waiting here).
    pub fn level_of(&self, place: Place) -> Option<LevelId> {
        self.jobs.get(&place).map(|(l, _)| *l)
    }

    /// The highest level with jobs waiting: this process's demand on the
    /// scope, published to the others sharing it
    /// ([`Store::demand`](crate::admit::Store::demand)).
    pub fn top_waiting(&self) -> Option<LevelId> {
        self.levels
            .iter()
            .find(|l| self.state[l.index()].waiting > 0)
    }

    /// What `level` was admitted lately (decayed over the window), as a
    /// share of the whole limit: `0.1` for a level that has been sending a
    /// tenth of what the key allows. Across processes, a level under its
    /// minimum share by this measure does not yield to another process's
    /// higher demand: its share is kept whoever else waits.
    pub fn used_of_limit(&self, level: LevelId, now: Instant) -> f64 {
        let Some(l) = self.state.get(level.index()) else {
            return 0.0;
        };
        // A steady rate r (cost a second) decays to a sum of r * window;
        // the whole limit is WHOLE_LIMIT a minute.
        let per_minute = l.recent / self.factor(now) * 60.0 / self.window.as_secs_f64();
        per_minute / super::cost::WHOLE_LIMIT as f64
    }

    /// The factor of instant `at` under the present base (no rescale).
    fn factor(&self, at: Instant) -> f64 {
        let w = self.window.as_secs_f64();
        ((at.as_nanos() as f64 - self.base.as_nanos() as f64) / 1e9 / w).exp()
    }

    /// Forgets idle flows past [`MAX_IDLE_FLOWS`]: first those not ahead
    /// of the level (they owe nothing), then the least ahead.
    fn prune(&mut self, level: LevelId) {
        let l = &mut self.state[level.index()];
        if l.flows.len() - l.active <= MAX_IDLE_FLOWS {
            return;
        }
        let vtime = l.vtime;
        l.flows
            .retain(|_, f| !f.waiting.is_empty() || f.finish > vtime);
        let idle = l.flows.len() - l.active;
        if idle > MAX_IDLE_FLOWS / 2 {
            let mut idle: Vec<(f64, Box<str>)> = l
                .flows
                .iter()
                .filter(|(_, f)| f.waiting.is_empty())
                .map(|(k, f)| (f.finish, k.clone()))
                .collect();
            idle.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            let forget = idle.len() - MAX_IDLE_FLOWS / 2;
            for (_, k) in idle.into_iter().take(forget) {
                l.flows.remove(&k);
            }
        }
    }

    /// Recomputes whose turn it is (see the rules on [`Discipline`]).
    fn choose(&mut self) {
        self.head = self.level_to_serve().and_then(|l| self.flow_head(l));
    }

    fn level_to_serve(&self) -> Option<LevelId> {
        let mut waiting = self
            .levels
            .iter()
            .filter(|l| self.state[l.index()].waiting > 0);
        let top = waiting.next()?;
        let total: f64 = self.state.iter().map(|l| l.recent).sum();
        if total <= 0.0 {
            return Some(top);
        }
        // A lower level goes while its share, counted halfway through its
        // next job (taken the size of its last), is below its minimum: the
        // share then centres on the minimum instead of overshooting it by
        // half a job.
        let starved = waiting.find(|l| {
            let min = self.levels.min_share(*l);
            let s = &self.state[l.index()];
            let half = s.last / 2.0;
            min > 0.0 && (s.recent + half) / (total + half) < min
        });
        Some(starved.unwrap_or(top))
    }

    fn flow_head(&self, level: LevelId) -> Option<Place> {
        let l = &self.state[level.index()];
        let active = l
            .flows
            .values()
            .filter_map(|f| Some((f, *f.waiting.first()?)));
        let below_floor =
            |f: &Flow| f.floor > 0.0 && l.recent > 0.0 && f.recent / l.recent < f.floor;
        // A flow below its floor first; then the least virtual time; ties
        // to the oldest job (places are unique: the choice is
        // deterministic whatever the map's order).
        active
            .min_by(|(a, pa), (b, pb)| {
                below_floor(b)
                    .cmp(&below_floor(a))
                    .then(a.finish.total_cmp(&b.finish))
                    .then(pa.cmp(pb))
            })
            .map(|(_, p)| p)
    }
}
