//! Request extensions a caller sets to describe its job (each overrides a
//! default; none is required), and the response extension the layer sets
//! ([`Attempts`]): every extension type is here.
//!
//! ```
//! use ratewise_tower::{Deadline, JobId, KeyLabel, TokenEstimate, Workload};
//! use std::time::Duration;
//!
//! let mut req = http::Request::new(String::new());
//! req.extensions_mut().insert(JobId::new("invoice-42"));
//! req.extensions_mut().insert(Workload::level("bulk").flow("tenant-7"));
//! req.extensions_mut().insert(Deadline(Duration::from_secs(30)));
//! req.extensions_mut().insert(TokenEstimate { input_tokens: 1200 });
//! req.extensions_mut().insert(KeyLabel::new("team-a"));
//! ```

use std::sync::Arc;
use std::time::Duration;

/// The application's id for the job (one call of the service). Without it
/// the layer numbers jobs itself (`job-1`, `job-2`, ...). Logged and sent as
/// `x-ratewise-job` when job headers are on: never put a secret in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId(pub Arc<str>);

impl JobId {
    /// A job id.
    pub fn new(id: impl AsRef<str>) -> Self {
        JobId(Arc::from(id.as_ref()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The job's total time budget, counted from when the call arrived (queue
/// wait, backoff and every send come out of it). Overrides the policy's
/// `default_deadline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub Duration);

/// An explicit input-token estimate (e.g. from `count_tokens`); without it
/// the controller estimates from the body size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEstimate {
    /// Input tokens the request will be charged.
    pub input_tokens: u64,
}

/// Which key (organisation, project) the request is billed to, as a label
/// for the shared controller: stops and buckets are per key. Never the key
/// itself.
///
/// A request without one is paced under its own credentials: the
/// [fingerprint](KeyLabel::fingerprint) of its key, read where its
/// provider reads it ([`KeyLabel::of_request`]; with no provider known,
/// the first of `x-api-key`, `authorization` (its token, for `Bearer`),
/// `api-key` (Azure OpenAI), `x-goog-api-key` and Gemini's `?key=`) — the
/// label `ratewise proxy` and `ratewise-reqwest` give the same key, so
/// limits configured for a fingerprint apply in all of them. A request with none of them is paced under
/// [`KeyLabel::ANONYMOUS`] (the layer warns once), unless
/// [`Config::key_label`](crate::Config::key_label) names the one key
/// behind the layer. Two keys are never mixed in one scope by default:
/// each has its own limits, pauses and stops.
///
/// ```
/// use ratewise_tower::{KeyLabel, Limits, RetryLayer};
///
/// let key = "sk-ant-example";
/// let mut req = http::Request::new(String::new());
/// req.headers_mut().insert("x-api-key", key.parse().unwrap());
/// // What the layer paces this request under (no KeyLabel set):
/// let label = KeyLabel::from_credentials(req.headers()).unwrap();
/// assert_eq!(label, KeyLabel::fingerprint(key));
/// // `fp-` and the first 16 hex digits of the key's SHA-256:
/// assert_eq!(label.as_str(), "fp-ee6827de75b65095");
/// // so its limits are configured under the fingerprint:
/// let layer = RetryLayer::builder()
///     .key_limits(label.as_str(), Limits::per_minute().requests(50))
///     .build()
///     .unwrap();
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyLabel(pub Arc<str>);

impl KeyLabel {
    /// The label of requests that carry no credentials and no label: one
    /// scope for all of them.
    pub const ANONYMOUS: &'static str = "anonymous";

    /// A key label.
    pub fn new(label: impl AsRef<str>) -> Self {
        KeyLabel(Arc::from(label.as_ref()))
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The label of an API key: `fp-` and the first 16 hex digits of the
    /// key's SHA-256. The same in every process and after a restart (so
    /// replicas sharing a Redis store, and a journal, agree on it), and
    /// the same `ratewise proxy` computes; the key itself is never kept.
    pub fn fingerprint(key: &str) -> Self {
        KeyLabel(Arc::from(ratewise_core::key::fingerprint(key)))
    }

    /// Whether `s` is a fingerprint as [`fingerprint`](Self::fingerprint)
    /// writes them: `fp-` and 16 hex digits (upper-case ones too: a label
    /// typed or read back that way names the same key, see
    /// [`tag`](Self::tag)).
    ///
    /// ```
    /// use ratewise_tower::KeyLabel;
    /// assert!(KeyLabel::is_fingerprint("fp-ba7816bf8f01cfea"));
    /// assert!(KeyLabel::is_fingerprint("fp-BA7816BF8F01CFEA"));
    /// assert!(!KeyLabel::is_fingerprint("fp-{x}"));
    /// ```
    pub fn is_fingerprint(s: &str) -> bool {
        ratewise_core::key::is_fingerprint(s)
    }

    /// The label a key named `name` is filed under wherever labels are
    /// shared (a Redis store's keys, the proxy's admin API): a fingerprint
    /// as it is, lower-cased; anything else fingerprinted, so no key or
    /// group name is ever written out.
    ///
    /// ```
    /// use ratewise_tower::KeyLabel;
    /// assert_eq!(KeyLabel::tag("fp-BA7816BF8F01CFEA").as_str(), "fp-ba7816bf8f01cfea");
    /// assert_eq!(KeyLabel::tag("abc"), KeyLabel::fingerprint("abc"));
    /// ```
    pub fn tag(name: &str) -> Self {
        KeyLabel(Arc::from(ratewise_core::key::tag(name)))
    }

    /// The [fingerprint](Self::fingerprint) of the key a request to
    /// `provider` carries, read where that provider reads it
    /// ([`credentials::caller_key`](crate::credentials::caller_key): its
    /// headers, Gemini's `?key=` percent-decoded); `None` when there is
    /// none.
    ///
    /// ```
    /// use ratewise_tower::{KeyLabel, Provider};
    /// let request = http::Request::get("https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=AIza%2D1")
    ///     .body(())
    ///     .unwrap();
    /// let label = KeyLabel::of_request(request.headers(), request.uri(), Some(Provider::Gemini));
    /// assert_eq!(label, Some(KeyLabel::fingerprint("AIza-1")));
    /// ```
    pub fn of_request(
        headers: &http::HeaderMap,
        uri: &http::Uri,
        provider: Option<ratewise_core::Provider>,
    ) -> Option<Self> {
        crate::credentials::caller_key(headers, uri.query(), provider)
            .map(|k| Self::fingerprint(&k))
    }

    /// The [fingerprint](Self::fingerprint) of the first credential the
    /// headers carry, whoever the provider: `x-api-key`, `authorization`
    /// (the token of `Bearer <token>`, else the whole value), `api-key`,
    /// `x-goog-api-key`. `None` when there is none. A request's label is
    /// [`of_request`](Self::of_request), which also reads Gemini's
    /// `?key=` and each provider's own header first.
    pub fn from_credentials(headers: &http::HeaderMap) -> Option<Self> {
        crate::credentials::caller_key(headers, None, None).map(|k| Self::fingerprint(&k))
    }
}

/// Who a job is to the admission queue: its priority level and its flow
/// (the tenant it is shared fairly within), as a request extension.
///
/// While jobs wait for admission on one scope (key × model class), the
/// higher level goes first, except that each lower level keeps a minimum
/// share (10 % by default) so it never starves; within a level, flows
/// share the key's limits by cost — tokens, each job's dominant share of
/// the buckets, corrected to its usage when it settles — in proportion to
/// their weights; within a flow, oldest first. A lone flow gets the whole
/// limit. A deadline still rules: a job that cannot be sent in time is
/// answered at once, whatever its level. (See
/// [`ratewise_core::admit::fair`].)
///
/// Without it a job is at the default level (`default`), in the flow of
/// its key (the key's fingerprint: one flow per key, so the queue is
/// first come, first served). A level the layer does not know
/// ([`Builder::levels`](crate::Builder::levels); by default
/// `interactive`, `default`, `bulk`) is the default level. A flow's name
/// is logged nowhere, but keep secrets out of it all the same.
///
/// ```
/// use ratewise_tower::{Policy, RetryLayer, Workload};
/// use tower::{Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let client = tower::service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// });
/// let mut service = tower::ServiceBuilder::new()
///     .layer(RetryLayer::new(Policy::default()))
///     .service(client);
/// let mut req = http::Request::post("https://api.anthropic.com/v1/messages")
///     .header("x-api-key", "sk-ant-example")
///     .body(r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#.to_owned())
///     .unwrap();
/// // A nightly batch of tenant 7, weighted half of an ordinary tenant's.
/// req.extensions_mut().insert(Workload::level("bulk").flow("tenant-7").weight(1));
/// let response = service.ready().await.unwrap().call(req).await.unwrap();
/// assert_eq!(response.status(), 200);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Workload {
    /// The priority level's name (`None`: the default level).
    pub level: Option<Arc<str>>,
    /// The flow (`None`: the key's fingerprint).
    pub flow: Option<Arc<str>>,
    /// The flow's weight within its level (`0` is read as 1): a flow of
    /// weight 2 gets twice the tokens of a flow of weight 1 while both
    /// wait. The flow's latest job sets it.
    pub weight: u32,
    /// The flow's floor: the share of its level's admitted tokens it keeps
    /// while it has calls waiting, whatever the weights (`0`: none;
    /// clamped to `0..=1`). The flow's latest job sets it.
    pub floor: f64,
}

impl Workload {
    /// A job at the level named `name`, in its key's flow, weight 1.
    pub fn level(name: impl AsRef<str>) -> Self {
        Workload {
            level: Some(Arc::from(name.as_ref())),
            flow: None,
            weight: 1,
            floor: 0.0,
        }
    }

    /// The same job in the flow named `flow` (a tenant, a team, a user).
    #[must_use]
    pub fn flow(mut self, flow: impl AsRef<str>) -> Self {
        self.flow = Some(Arc::from(flow.as_ref()));
        self
    }

    /// The same job with its flow's weight `weight` (`0` is read as 1).
    #[must_use]
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// The same job with its flow's floor `share` of its level.
    #[must_use]
    pub fn floor(mut self, share: f64) -> Self {
        self.floor = share;
        self
    }

    /// The discipline's workload of a request with `ext` on key `key`
    /// (its label: a fingerprint, or a name fingerprinted here) over
    /// `levels`.
    pub(crate) fn resolve(
        ext: &http::Extensions,
        key: &str,
        levels: &ratewise_core::admit::fair::Levels,
    ) -> ratewise_core::admit::fair::Workload {
        use ratewise_core::admit::fair::Workload as W;
        match ext.get::<Workload>() {
            None => W::new(levels.default_level(), ratewise_core::key::tag(key)),
            Some(w) => {
                let level = levels.level_or_default(w.level.as_deref());
                let flow = match &w.flow {
                    Some(f) => f.to_string(),
                    None => ratewise_core::key::tag(key),
                };
                W::new(level, flow).weight(w.weight.max(1)).floor(w.floor)
            }
        }
    }
}

/// The evidence records of a successful call's attempts, in order, as a
/// response extension: `response.extensions().get::<Attempts>()`. Its
/// length is the number of sends the call made.
#[derive(Debug, Clone, Default)]
pub struct Attempts(pub Vec<ratewise_core::record::AttemptRecord>);

/// The model, when the body does not say (or to override it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Model(pub Arc<str>);

impl Model {
    /// A model name.
    pub fn new(model: impl AsRef<str>) -> Self {
        Model(Arc::from(model.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_core::admit::fair::Levels;

    #[test]
    fn a_workload_defaults_to_the_default_level_and_the_keys_flow() {
        let levels = Levels::default();
        let none = http::Extensions::new();
        let w = Workload::resolve(&none, "team-a", &levels);
        assert_eq!(w.level, levels.default_level());
        assert_eq!(w.flow, ratewise_core::key::fingerprint("team-a"));
        assert_eq!(w.weight, 1);
        // A fingerprint label is the flow as it is.
        let fp = ratewise_core::key::fingerprint("sk-1");
        assert_eq!(Workload::resolve(&none, &fp, &levels).flow, fp);
    }

    #[test]
    fn a_workload_names_its_level_flow_and_weight_and_unknown_levels_are_default() {
        let levels = Levels::default();
        let mut ext = http::Extensions::new();
        ext.insert(
            Workload::level("bulk")
                .flow("tenant-7")
                .weight(3)
                .floor(0.2),
        );
        let w = Workload::resolve(&ext, "k", &levels);
        assert_eq!(w.level, levels.level("bulk").unwrap());
        assert_eq!((w.flow.as_str(), w.weight, w.floor), ("tenant-7", 3, 0.2));
        ext.insert(Workload::level("urgent").weight(0));
        let w = Workload::resolve(&ext, "k", &levels);
        assert_eq!(w.level, levels.default_level());
        assert_eq!(w.weight, 1);
        assert_eq!(w.flow, ratewise_core::key::fingerprint("k"));
    }
}
