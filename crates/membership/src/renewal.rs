//! How a node's core renews its lease on the latest view: by reading the coordinators' slot
//! words (Algorithm 6 turned into Algorithm 2's leases, `mu_ukharon::{check, lease}`), or by
//! asking a lease cache (§6.3, `mu_ukharon::cache`). The core posts what [`Step`] says and
//! hands the answers back; the renewal says what to publish and what it learnt.

use mu_ukharon::cache::{CacheClient, Request as CacheRequest};
use mu_ukharon::check::{CheckState, MajorityCheck};
use mu_ukharon::lease::{LeaseKeeper, Published, Ticket};
use mu_ukharon::view::View;

/// What to post now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read every coordinator's slot word for `index`; tag the reads with `serial`.
    ReadSlots { index: u64, serial: u64 },
    /// Ask cache number `cache` (a position in the configuration's caches) whether the view of
    /// `epoch` is active; `id` tags the request and its answer.
    AskCache { cache: usize, id: u64, epoch: u64 },
}

/// What an answer led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing yet (more answers are needed, or the answer was stale).
    Pending,
    /// A lease to publish.
    Publish(Published),
    /// The check is over without a new lease (refused, no answer, or nothing new to publish).
    Done,
    /// A newer view exists: learn it from coordinator `coordinator` (a position).
    Newer { coordinator: usize },
}

struct Check {
    check: MajorityCheck,
    ticket: Ticket,
    view: View,
}

struct Asked {
    request: CacheRequest,
    id: u64,
    view: View,
    sent_ns: u64,
}

enum Source {
    Coordinators { keeper: LeaseKeeper, check: Option<Check> },
    Cache { client: CacheClient, asked: Option<Asked>, answer_timeout_ns: u64 },
}

/// See the module docs.
pub struct Renewal {
    source: Source,
    coordinators: usize,
    slots_count: u64,
    /// Numbers the checks and requests, so that an answer counts only for the one that asked.
    serial: u64,
}

impl Renewal {
    /// Renewal by checks of `coordinators` coordinators' slot words (logs of `slots_count`).
    pub fn by_checks(keeper: LeaseKeeper, coordinators: usize, slots_count: u64) -> Renewal {
        Renewal {
            source: Source::Coordinators { keeper, check: None },
            coordinators,
            slots_count,
            serial: 0,
        }
    }

    /// Renewal through lease caches; a cache that has not answered within `answer_timeout_ns`
    /// counts as no answer, and the next one is asked.
    pub fn through_caches(client: CacheClient, answer_timeout_ns: u64) -> Renewal {
        Renewal {
            source: Source::Cache { client, asked: None, answer_timeout_ns },
            coordinators: 0,
            slots_count: 0,
            serial: 0,
        }
    }

    /// The serial of the check or request in flight, as its posts carry it.
    pub fn serial(&self) -> u64 {
        self.serial & 0xFFFF
    }

    /// What to post at `now_ns` to renew the lease on `view`, the latest view known, if
    /// anything is due. `now_ns` is the timestamp Algorithm 2 takes before its reads.
    pub fn due(&mut self, view: &View, now_ns: u64) -> Option<Step> {
        match &mut self.source {
            Source::Coordinators { keeper, check } => {
                if check.is_some() || !keeper.wants_check(view.epoch, now_ns) {
                    return None;
                }
                let ticket = keeper.start_check(view, now_ns).ok()?;
                let c = MajorityCheck::new(view.epoch, self.coordinators, self.slots_count).ok()?;
                let index = c.index();
                *check = Some(Check { check: c, ticket, view: view.clone() });
                self.serial += 1;
                Some(Step::ReadSlots { index, serial: self.serial & 0xFFFF })
            }
            Source::Cache { client, asked, answer_timeout_ns } => {
                if let Some(a) = asked {
                    if now_ns < a.sent_ns.saturating_add(*answer_timeout_ns) {
                        return None;
                    }
                    client.on_no_answer(a.request); // too late: ask the next cache
                    *asked = None;
                }
                if !client.wants_request(now_ns)
                    && client.view().map(|v| v.epoch) == Some(view.epoch)
                {
                    return None;
                }
                let request = client.start_request(now_ns).ok()?;
                self.serial += 1;
                let id = self.serial & 0xFFFF;
                *asked = Some(Asked { request, id, view: view.clone(), sent_ns: now_ns });
                Some(Step::AskCache { cache: request.cache, id, epoch: view.epoch })
            }
        }
    }

    /// Coordinator `position`'s slot word (`None`: the read failed) for the check of `serial`.
    pub fn on_slot_word(
        &mut self,
        serial: u64,
        position: usize,
        word: Option<u64>,
        now_ns: u64,
    ) -> Outcome {
        let Source::Coordinators { keeper, check } = &mut self.source else {
            return Outcome::Pending;
        };
        if serial != self.serial & 0xFFFF {
            return Outcome::Pending; // a read of an earlier check began before this one's timestamp
        }
        let Some(c) = check else { return Outcome::Pending };
        let state = match word {
            Some(w) => c.check.on_word(position, w),
            None => c.check.on_error(position),
        };
        match state {
            Ok(CheckState::Pending) => Outcome::Pending,
            Ok(CheckState::Empty) => {
                let c = check.take().expect("checked above");
                match keeper.on_empty(&c.view, c.ticket, now_ns) {
                    Ok(outcome) => outcome.publish.map_or(Outcome::Done, Outcome::Publish),
                    Err(_) => Outcome::Done,
                }
            }
            Ok(CheckState::Taken { coordinator }) => {
                *check = None;
                Outcome::Newer { coordinator }
            }
            Ok(CheckState::Failed) | Err(_) => {
                *check = None;
                Outcome::Done
            }
        }
    }

    /// A cache's answer to request `id`: the view of `epoch` is active there (`None`: no
    /// answer, the cache holds no valid lease).
    pub fn on_cache_answer(&mut self, id: u64, epoch: Option<u64>, now_ns: u64) -> Outcome {
        let Source::Cache { client, asked, .. } = &mut self.source else { return Outcome::Pending };
        let Some(a) = asked.take_if(|a| a.id == id) else { return Outcome::Pending };
        match epoch {
            Some(e) if e == a.view.epoch => match client.on_answer(a.request, &a.view, now_ns) {
                Ok(outcome) => outcome.publish.map_or(Outcome::Done, Outcome::Publish),
                Err(_) => Outcome::Done,
            },
            Some(e) if e > a.view.epoch => Outcome::Newer { coordinator: 0 },
            _ => {
                client.on_no_answer(a.request);
                Outcome::Done
            }
        }
    }

    /// A newer view was learnt: a check of an older one is dropped.
    pub fn on_view(&mut self, view: &View) {
        match &mut self.source {
            Source::Coordinators { check, .. } => {
                if check.as_ref().is_some_and(|c| c.view.epoch < view.epoch) {
                    *check = None;
                }
            }
            Source::Cache { asked, .. } => {
                if asked.as_ref().is_some_and(|a| a.view.epoch < view.epoch) {
                    *asked = None;
                }
            }
        }
    }

    /// What a cache answers an application at `now_ns`: the epoch of the view this node holds
    /// a valid lease on, if any (a cache renews by checks).
    pub fn answer(&mut self, now_ns: u64) -> Option<u64> {
        let Source::Coordinators { keeper, .. } = &mut self.source else { return None };
        let epoch = keeper.view()?.epoch;
        keeper.active_at(epoch, now_ns).then_some(epoch)
    }

    /// A short account for status lines.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Coordinators { check, .. } => match check {
                Some(c) => format!("check of index {} {:?}", c.check.index(), c.check.state()),
                None => "no check".to_string(),
            },
            Source::Cache { client, asked, .. } => {
                let asked = asked.as_ref().map(|a| (a.id, a.view.epoch, a.sent_ns));
                format!(
                    "cache {} asked (id, epoch, at) {asked:?} leased {:?}",
                    client.cache(),
                    client.published()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_ukharon::cache::CacheConfig;
    use mu_ukharon::lease::{Durations, LeaseConfig};
    use mu_ukharon::view::Member;
    use mu_velos::SlotWord;

    const US: u64 = 1_000;

    fn view(epoch: u64) -> View {
        let mut v = View::initial(1, vec![Member { node: 3, uid: 1 << 16 | 3 }], None, 20 * US);
        for _ in 0..epoch {
            v = v.successor(v.members.clone(), None, 20 * US);
        }
        v
    }

    fn by_checks() -> Renewal {
        let keeper = LeaseKeeper::new(LeaseConfig::default(), Durations::FromViews).unwrap();
        Renewal::by_checks(keeper, 3, 64)
    }

    /// Algorithm 2 with Algorithm 6: a majority of empty words gives a lease; a read posted by
    /// an earlier check is not counted by a later one (it began before the later timestamp).
    #[test]
    fn a_check_counts_only_its_own_reads() {
        let mut r = by_checks();
        let v = view(2);
        let Some(Step::ReadSlots { index, serial }) = r.due(&v, 100 * US) else { panic!() };
        assert_eq!(index, 3);
        assert_eq!(r.on_slot_word(serial, 0, Some(0), 101 * US), Outcome::Pending);
        assert!(matches!(r.on_slot_word(serial, 1, Some(0), 101 * US), Outcome::Publish(_)));
        assert_eq!(r.due(&v, 102 * US), None, "the lease is fresh");
        let Some(Step::ReadSlots { serial: next, .. }) = r.due(&v, 120 * US) else { panic!() };
        assert_ne!(next, serial);
        // The first check's third read arrives now: it must not count for the second check.
        assert_eq!(r.on_slot_word(serial, 2, Some(0), 121 * US), Outcome::Pending);
        assert_eq!(r.on_slot_word(next, 0, Some(0), 121 * US), Outcome::Pending);
        let taken = SlotWord { min: 1, accepted: 1, lap: 0, prev_decided: false }.pack();
        assert_eq!(
            r.on_slot_word(next, 2, Some(taken), 122 * US),
            Outcome::Newer { coordinator: 2 }
        );
    }

    /// §6.3: a member asks its cache; an answer to another request is ignored; a cache that
    /// does not answer in time is left for the next one.
    #[test]
    fn a_silent_cache_is_left_for_the_next() {
        let config = CacheConfig::default();
        let client = CacheClient::new(&config, 2, 0).unwrap();
        let mut r = Renewal::through_caches(client, 50 * US);
        let v = view(1);
        let Some(Step::AskCache { cache: 0, id, epoch: 1 }) = r.due(&v, 10 * US) else { panic!() };
        assert_eq!(r.on_cache_answer(id + 1, Some(1), 11 * US), Outcome::Pending);
        assert_eq!(r.due(&v, 40 * US), None, "waiting for the answer");
        let Some(Step::AskCache { cache: 1, .. }) = r.due(&v, 61 * US) else { panic!() };
        assert_eq!(r.answer(61 * US), None, "a member answers no one");
    }
}
