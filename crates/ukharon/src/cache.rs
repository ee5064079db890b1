//! Lease caches (§6.3): a cache leases the latest view from the coordinators for ∆ and hands
//! out leases of δ to application nodes, whose renewal then reads one cache instead of a
//! majority of coordinators.
//!
//! The rule (∆ and δ are from [`CacheConfig`], the same on every cache and every application;
//! margins as in [`crate::lease`]):
//!
//! * **A cache** is a [`LeaseKeeper`] whose every lease lasts ∆ whatever the view, and whose
//!   first lease on a view it does not move to from a compatible predecessor waits ∆. It
//!   answers a request at its time `now` with the view it holds a lease on when
//!   `start ≤ now < end`, and with no answer otherwise. Call the instants at which a cache
//!   answers `V` the *cache-active* instants of `V`.
//! * **An application** sends a request at its time `t_req` and gets the answer at `t_recv`. An
//!   answer `V` extends its lease on `V` to `t_req + δ − drift(δ) − 2ε` (from the REQUEST: the
//!   cache answered after it was sent). A first lease on `V` not moved from a compatible
//!   predecessor starts at `t_recv + δ + drift(δ) + ε` (from the ANSWER'S ARRIVAL: the request
//!   may have been sent long before `V` became cache-active, while another cache still answered
//!   the older view). A compatible successor of the leased view keeps the lease's start.
//!   With δ = 0, an answer `V` makes `Active(V)` true at `t_req` once `start ≤ t_req`.
//! * **No answer** (a failed cache, a cache without a valid lease, a lost request): the
//!   application asks another cache ([`CacheClient::on_no_answer`] names the next one). Its
//!   lease stays valid until its end.
//!
//! Why no two incompatible views are active at overlapping times. (1) Between caches: every
//! cache lease on a view `X` comes from a check that began before the successor of `X` was
//! decided and ends at most ∆ (true time) after it; a first cache lease on a later view `W` of
//! another run comes from a check that began after `W` was decided and starts at least ∆ later
//! (Fixed ∆ waits: every cache lease, of any view, lasts at most ∆); moves to compatible
//! successors keep their start. So the cache-active instants of `X` all precede those of `W`.
//! (2) Between applications: an application's lease on `X` ends at most δ after its request
//! was sent, hence at most δ after a cache-active instant `a` of `X` (the cache answered after
//! the request was sent). Its first lease on `W` starts at least δ after the answer arrived,
//! hence at least δ after a cache-active instant `b` of `W`. By (1), `a < b`, so every
//! application lease on `X` ends before any application lease on `W` starts, and leases moved
//! along a compatible run keep a start that already waited. Had the first lease counted from the
//! request ([`LeaseMutation::FirstLeaseFromRequest`]), `b` could follow the request by more
//! than the gap, and the bound is lost.

use crate::lease::{
    CheckOutcome, ConfigError, Durations, LeaseConfig, LeaseError, LeaseKeeper, LeaseMutation,
    Published, Ticket,
};
use crate::view::View;

/// Lease caches' parameters: the same on every cache and every application that uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// ∆: how long a cache's lease lasts, and how long its first lease on a view waits (paper:
    /// 25 µs).
    pub cache_lease_ns: u64,
    /// δ: how long an application's lease from a cache lasts, and how long its first lease on a
    /// view waits.
    pub app_lease_ns: u64,
    /// Margins and mutations, as for leases from the coordinators.
    pub lease: LeaseConfig,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { cache_lease_ns: 25_000, app_lease_ns: 20_000, lease: LeaseConfig::default() }
    }
}

impl CacheConfig {
    /// Checks every parameter; the error names the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.lease.validate()?;
        let max_ns = self.lease.lease_max_ns;
        for (key, value) in
            [("cache_lease_ns", self.cache_lease_ns), ("app_lease_ns", self.app_lease_ns)]
        {
            if value > max_ns {
                let why = format!("{value} ns, above lease_max_ns {max_ns}");
                return Err(ConfigError { key, why });
            }
        }
        if self.cache_lease_ns == 0 {
            let why = "0 ns: a cache with no lease never answers".to_string();
            return Err(ConfigError { key: "cache_lease_ns", why });
        }
        Ok(())
    }
}

/// A lease cache: its lease from the coordinators, and its answers to applications.
#[derive(Clone, Debug)]
pub struct LeaseCache {
    keeper: LeaseKeeper,
}

impl LeaseCache {
    pub fn new(config: &CacheConfig) -> Result<LeaseCache, ConfigError> {
        config.validate()?;
        let durations = Durations::Fixed { lease_ns: config.cache_lease_ns };
        Ok(LeaseCache { keeper: LeaseKeeper::new(config.lease, durations)? })
    }

    /// Starts a check of `view` with the coordinators, as a node's core does.
    pub fn start_check(&mut self, view: &View, t_ns: u64) -> Result<Ticket, LeaseError> {
        self.keeper.start_check(view, t_ns)
    }

    /// The check found the next index empty at a majority.
    pub fn on_empty(
        &mut self,
        view: &View,
        ticket: Ticket,
        now_ns: u64,
    ) -> Result<CheckOutcome, LeaseError> {
        self.keeper.on_empty(view, ticket, now_ns)
    }

    pub fn wants_check(&self, epoch: u64, now_ns: u64) -> bool {
        self.keeper.wants_check(epoch, now_ns)
    }

    pub fn published(&self) -> Option<Published> {
        self.keeper.published()
    }

    /// The answer to an application's request at `now_ns`: the view this cache holds a valid
    /// lease on, or no answer.
    pub fn answer(&mut self, now_ns: u64) -> Option<&View> {
        let epoch = self.keeper.view()?.epoch;
        if self.keeper.active_at(epoch, now_ns) {
            self.keeper.view()
        } else {
            None
        }
    }
}

/// A request to a cache: which cache, and the application's time before it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Request {
    pub cache: usize,
    pub t_ns: u64,
}

/// An application's leases through caches (§6.3): Algorithm 2 with one cache's answer in place
/// of a majority of coordinators.
#[derive(Clone, Debug)]
pub struct CacheClient {
    keeper: LeaseKeeper,
    caches_count: usize,
    cache: usize,
}

impl CacheClient {
    /// A client of `caches_count` caches that asks `first_cache` first.
    pub fn new(
        config: &CacheConfig,
        caches_count: usize,
        first_cache: usize,
    ) -> Result<CacheClient, ConfigError> {
        config.validate()?;
        if first_cache >= caches_count {
            let why = format!("cache {first_cache} of {caches_count}");
            return Err(ConfigError { key: "caches", why });
        }
        let durations = Durations::Fixed { lease_ns: config.app_lease_ns };
        let keeper = LeaseKeeper::new(config.lease, durations)?;
        Ok(CacheClient { keeper, caches_count, cache: first_cache })
    }

    /// The cache the next request goes to.
    pub fn cache(&self) -> usize {
        self.cache
    }

    pub fn published(&self) -> Option<Published> {
        self.keeper.published()
    }

    pub fn view(&self) -> Option<&View> {
        self.keeper.view()
    }

    /// `Active(view of epoch)` at `now_ns` from the lease (false for a reading that goes back).
    pub fn active_at(&mut self, epoch: u64, now_ns: u64) -> bool {
        self.keeper.active_at(epoch, now_ns)
    }

    /// Whether to ask a cache now: no lease, or it ends within the renewal margin.
    pub fn wants_request(&self, now_ns: u64) -> bool {
        match self.keeper.view() {
            Some(v) => self.keeper.wants_check(v.epoch, now_ns),
            None => true,
        }
    }

    /// Starts a request to [`CacheClient::cache`]; `t_ns` is read before it is sent.
    pub fn start_request(&mut self, t_ns: u64) -> Result<Request, LeaseError> {
        self.keeper.observe(t_ns)?;
        Ok(Request { cache: self.cache, t_ns })
    }

    /// The cache answered `view` to `request`; `now_ns` is the answer's arrival.
    pub fn on_answer(
        &mut self,
        request: Request,
        view: &View,
        now_ns: u64,
    ) -> Result<CheckOutcome, LeaseError> {
        let mutation = self.keeper.config().mutation;
        let t_ns =
            if mutation == LeaseMutation::TimestampAfterReads { now_ns } else { request.t_ns };
        let start_from_ns =
            if mutation == LeaseMutation::FirstLeaseFromRequest { t_ns } else { now_ns };
        self.keeper.grant(view, t_ns, start_from_ns, now_ns)
    }

    /// The cache of `request` gave no answer (failed, no valid lease, request lost): the next
    /// request goes to the next cache, which this returns.
    pub fn on_no_answer(&mut self, request: Request) -> usize {
        if request.cache == self.cache {
            self.cache = (self.cache + 1) % self.caches_count;
        }
        self.cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Member;

    const US: u64 = 1_000;

    fn members(n: u16) -> Vec<Member> {
        (0..n).map(|i| Member { node: i, uid: u64::from(i) + 1 }).collect()
    }

    fn no_margins(mutation: LeaseMutation) -> CacheConfig {
        let lease = LeaseConfig { drift_ppm: 0, cross_core_ns: 0, mutation, ..Default::default() };
        CacheConfig { cache_lease_ns: 25 * US, app_lease_ns: 20 * US, lease }
    }

    fn cache_leasing(config: &CacheConfig, view: &View, t_ns: u64) -> LeaseCache {
        let mut cache = LeaseCache::new(config).unwrap();
        let ticket = cache.start_check(view, t_ns).unwrap();
        cache.on_empty(view, ticket, t_ns + US).unwrap();
        cache
    }

    /// §6.3: "these caches use the Active method to lease memberships for ∆" and "the Active
    /// method of caches waits ∆ before making the new membership active", whatever the view's
    /// own lease.
    #[test]
    fn caches_lease_for_delta_and_wait_delta() {
        let config = CacheConfig::default();
        let v0 = View::initial(1, members(3), Some(0), 900 * US);
        let v1 = v0.successor(members(2), Some(0), 900 * US);
        let mut cache = cache_leasing(&config, &v1, 100 * US);
        let p = cache.published().unwrap();
        assert_eq!(p.start_ns, 100 * US + 25 * US + 250 + 64, "∆, not the view's 900 µs");
        assert_eq!(p.end_ns, 100 * US + 25 * US - 250 - 128);
        assert!(cache.answer(110 * US).is_none(), "no answer before the lease starts");
        let ticket = cache.start_check(&v1, 120 * US).unwrap();
        cache.on_empty(&v1, ticket, 121 * US).unwrap();
        assert_eq!(cache.answer(126 * US).map(|v| v.epoch), Some(1));
        assert!(cache.answer(145 * US).is_none(), "expired: no answer");
        let v2 = v1.successor(members(2), Some(0), 5 * US);
        let ticket = cache.start_check(&v2, 146 * US).unwrap();
        let p = cache.on_empty(&v2, ticket, 147 * US).unwrap().publish.unwrap();
        assert_eq!(p.start_ns, 100 * US + 25 * US + 250 + 64, "compatible: keeps the start");
    }

    /// §6.3: application leases of δ renewed by one cache; the extension counts from the
    /// request, a first lease from the answer's arrival (module docs).
    #[test]
    fn applications_extend_from_the_request_and_start_from_the_answer() {
        let config = CacheConfig::default();
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let v1 = v0.successor(members(2), Some(0), 20 * US);
        let mut app = CacheClient::new(&config, 2, 0).unwrap();
        let request = app.start_request(10 * US).unwrap();
        let p = app.on_answer(request, &v1, 50 * US).unwrap().publish.unwrap();
        assert_eq!(p.start_ns, 50 * US + 20 * US + 200 + 64, "δ after the answer arrived");
        let request = app.start_request(71 * US).unwrap();
        let out = app.on_answer(request, &v1, 72 * US).unwrap();
        assert!(out.active_at_t);
        assert_eq!(out.publish.unwrap().end_ns, 71 * US + 20 * US - 200 - 128, "from the request");
        assert!(app.active_at(1, 75 * US) && !app.wants_request(75 * US));
        assert!(app.wants_request(86 * US));
    }

    /// The hint of §6.3 made concrete: application A asked cache 0 long before cache 0 leased
    /// the new view; application B still holds the old view from cache 1. Counting A's first
    /// lease from the answer keeps the two apart; counting it from the request does not.
    #[test]
    fn a_first_lease_counts_from_the_answer_not_the_request() {
        for (mutation, overlap) in
            [(LeaseMutation::None, false), (LeaseMutation::FirstLeaseFromRequest, true)]
        {
            let config = no_margins(mutation);
            let v0 = View::initial(1, members(3), Some(0), 20 * US);
            let v1 = v0.successor(members(2), Some(0), 20 * US);
            // View 1 decided at 100 µs; cache 1 checked view 0 just before (its lease ends at
            // 124 µs); cache 0 leases view 1 from a check just after (its lease starts at
            // 126 µs) and renews it at 110 µs.
            let mut cache1 = cache_leasing(&config, &v0, 0);
            let t = cache1.start_check(&v0, 99 * US).unwrap();
            cache1.on_empty(&v0, t, 100 * US).unwrap();
            let mut cache0 = cache_leasing(&config, &v1, 101 * US);
            let t = cache0.start_check(&v1, 110 * US).unwrap();
            cache0.on_empty(&v1, t, 111 * US).unwrap();
            let mut b = CacheClient::new(&config, 2, 1).unwrap();
            let request = b.start_request(123 * US).unwrap();
            let answer = cache1.answer(123 * US).unwrap().clone();
            b.on_answer(request, &answer, 124 * US).unwrap();
            let mut a = CacheClient::new(&config, 2, 0).unwrap();
            let request = a.start_request(110 * US).unwrap();
            assert!(cache0.answer(120 * US).is_none(), "not yet: A's request is answered later");
            let answer = cache0.answer(126 * US).unwrap().clone();
            a.on_answer(request, &answer, 127 * US).unwrap();
            let request = a.start_request(128 * US).unwrap();
            let answer = cache0.answer(128 * US).unwrap().clone();
            a.on_answer(request, &answer, 129 * US).unwrap();
            let (pa, pb) = (a.published().unwrap(), b.published().unwrap());
            assert!(pb.end_ns > pb.start_ns && pa.end_ns > pa.start_ns);
            let overlapping = pa.start_ns < pb.end_ns && pb.start_ns < pa.end_ns;
            assert_eq!(overlapping, overlap, "{mutation:?}: A {pa:?}, B {pb:?}");
        }
    }

    /// §6.3 and Table 2's "member plus cache": an application whose cache gives no answer asks
    /// the next one, and keeps its lease until its end.
    #[test]
    fn no_answer_switches_cache() {
        let config = CacheConfig::default();
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut app = CacheClient::new(&config, 3, 2).unwrap();
        let request = app.start_request(0).unwrap();
        app.on_answer(request, &v0, US).unwrap();
        let request = app.start_request(2 * US).unwrap();
        assert_eq!(app.on_no_answer(request), 0);
        assert_eq!(app.on_no_answer(request), 0, "one switch per failed request");
        assert!(app.active_at(0, 3 * US), "the lease is kept");
        assert_eq!(app.start_request(4 * US).unwrap().cache, 0);
    }

    /// Algorithm 2 line 12 through a cache, δ = 0: every call needs a fresh answer.
    #[test]
    fn zero_app_leases_answer_through_fresh_requests() {
        let config = CacheConfig { app_lease_ns: 0, ..Default::default() };
        let v0 = View::initial(1, members(3), Some(0), 20 * US);
        let mut app = CacheClient::new(&config, 1, 0).unwrap();
        let request = app.start_request(0).unwrap();
        assert!(!app.on_answer(request, &v0, US).unwrap().active_at_t);
        let request = app.start_request(2 * US).unwrap();
        assert!(app.on_answer(request, &v0, 3 * US).unwrap().active_at_t);
        assert!(!app.active_at(0, 3 * US));
    }

    #[test]
    fn bad_config_names_the_key() {
        let key = |c: CacheConfig| c.validate().unwrap_err().key;
        assert_eq!(key(CacheConfig { cache_lease_ns: 0, ..Default::default() }), "cache_lease_ns");
        assert_eq!(
            key(CacheConfig { app_lease_ns: u64::MAX, ..Default::default() }),
            "app_lease_ns"
        );
        let lease = LeaseConfig { drift_ppm: PPM_HALF, ..Default::default() };
        assert_eq!(key(CacheConfig { lease, ..Default::default() }), "drift_ppm");
        assert_eq!(CacheClient::new(&CacheConfig::default(), 2, 2).unwrap_err().key, "caches");
    }

    const PPM_HALF: u64 = crate::lease::PPM / 2;
}
