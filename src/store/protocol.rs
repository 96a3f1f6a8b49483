//! The decision protocol both stores follow, written once and free of I/O.
//!
//! A request's placement groups are decided one script call (Redis) or one batch (memory)
//! each: descriptor groups first — they share no key, so Redis runs them concurrently —
//! then shared limits in order; once the request is sure to be denied, the remaining groups
//! only evaluate (dry run), so a hot shared key never holds a charge that is about to be
//! refunded. Each group commits by its own verdict; when the request's final verdict says a
//! landed charge must not stay, that group refunds it exactly and answers again as things
//! stand. The memory store runs all of this under its locks, so it stays atomic, and answers
//! what Redis answers, step for step (the differential test compares them). On one node
//! ([`super::placement::Layout::OneNode`]) a request is one group, so this is one run whose
//! verdict is the request's, with nothing to refund.
//!
//! A store drives [`Protocol`]: ask [`Protocol::step`] what to run, run it, give each group's
//! answer to [`Protocol::record`], until [`Next::Done`].

use super::placement::Placed;
use crate::algorithm::rule::{verdict, ChargeOutcome, Mode, Verdict};
use crate::algorithm::Landing;

/// Per charge of a group being refunded: what was decided, what it left, and whether to
/// refund that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refund {
    pub allowed: bool,
    pub landing: Landing,
    pub refund: bool,
}

impl Refund {
    /// What stays landed.
    pub fn kept(&self) -> Landing {
        if self.refund {
            Landing::default()
        } else {
            self.landing
        }
    }

    /// How much to refund.
    pub fn amount(&self) -> u64 {
        if self.refund {
            self.landing.added
        } else {
            0
        }
    }
}

/// A group's answer: per charge of the group, in the group's order.
pub type GroupAnswer = Vec<(ChargeOutcome, Landing)>;

/// What to run next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Run these groups (concurrently if you like: they share no key) in these modes.
    Run(Vec<(usize, Mode)>),
    /// Refund in these groups, with these refunds per charge.
    Refund(Vec<(usize, Vec<Refund>)>),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Descriptors,
    Shared(usize),
    Refund,
    Done,
}

/// One request's decision in progress.
pub struct Protocol<'p, 'a> {
    placed: &'p Placed<'a>,
    /// How the request is charged: `Decide` or `CountRejected`.
    mode: Mode,
    outcomes: Vec<ChargeOutcome>,
    landings: Vec<Landing>,
    /// Per charge: answered by a group run yet.
    known: Vec<bool>,
    phase: Phase,
}

impl<'p, 'a> Protocol<'p, 'a> {
    /// A request charged in `mode` (`Decide` or `CountRejected`).
    pub fn new(placed: &'p Placed<'a>, mode: Mode) -> Protocol<'p, 'a> {
        let n = placed.charges.len();
        Protocol {
            placed,
            mode,
            outcomes: vec![
                ChargeOutcome {
                    allowed: true,
                    remaining: 0,
                    wait_us: None,
                };
                n
            ],
            landings: vec![Landing::default(); n],
            known: vec![false; n],
            phase: Phase::Descriptors,
        }
    }

    /// The verdict so far, reading charges not yet answered as allowed: when this already
    /// denies, the request is denied whatever the rest answers.
    pub fn verdict(&self) -> Verdict {
        verdict(
            self.placed.charges.iter().enumerate().map(|(i, s)| {
                let allowed = !self.known[i] || self.outcomes[i].allowed;
                (s.role, s.params.overdraft, allowed)
            }),
            self.placed.quota_descriptors,
        )
    }

    /// What to run next.
    pub fn step(&mut self) -> Next {
        loop {
            match self.phase {
                Phase::Descriptors => {
                    let groups = &self.placed.groups;
                    let first_shared = groups.iter().position(|g| g.shared).unwrap_or(groups.len());
                    self.phase = Phase::Shared(first_shared);
                    if first_shared > 0 {
                        let mode = self.mode;
                        return Next::Run((0..first_shared).map(|gi| (gi, mode)).collect());
                    }
                }
                Phase::Shared(gi) if gi < self.placed.groups.len() => {
                    self.phase = Phase::Shared(gi + 1);
                    let sure_denied = self.mode.decides() && self.verdict() == Verdict::Deny;
                    let mode = if sure_denied { Mode::DryRun } else { self.mode };
                    return Next::Run(vec![(gi, mode)]);
                }
                Phase::Shared(_) => self.phase = Phase::Refund,
                Phase::Refund => {
                    self.phase = Phase::Done;
                    if self.mode.decides() {
                        let refunds = self.refunds(Some(self.verdict()));
                        if !refunds.is_empty() {
                            return Next::Refund(refunds);
                        }
                    }
                }
                Phase::Done => return Next::Done,
            }
        }
    }

    /// Records a group's answer (to a run or a refund).
    pub fn record(&mut self, gi: usize, answer: GroupAnswer) {
        for (&ci, (outcome, landing)) in self.placed.groups[gi].charges.iter().zip(answer) {
            self.outcomes[ci] = outcome;
            self.landings[ci] = landing;
            self.known[ci] = true;
        }
    }

    /// Gives up refunding group `gi`'s charges: its refund failed, and may still run (a
    /// reply that timed out). They count as refunded, so nothing tries again: a second
    /// refund that also ran would refund more than landed (over-admitting), while one
    /// that never runs leaves a charge until its window passes (under-admitting).
    pub fn abandon(&mut self, gi: usize) {
        for &ci in &self.placed.groups[gi].charges {
            self.landings[ci] = Landing::default();
        }
    }

    /// Per group with something to refund: the refunds that leave only what `verdict` lets
    /// land (`None`: refund everything, for a decision that failed or was abandoned).
    pub fn refunds(&self, verdict: Option<Verdict>) -> Vec<(usize, Vec<Refund>)> {
        refunds(self.placed, &self.outcomes, &self.landings, verdict)
    }

    /// The answers and what each charge left landed, index-aligned with the request's
    /// charges: [`refunds`] of them (with no verdict) is what to refund if the caller gives
    /// up, worked out only then.
    pub fn into_parts(self) -> (Vec<ChargeOutcome>, Vec<Landing>) {
        (self.outcomes, self.landings)
    }

    /// The answers, index-aligned with the request's charges.
    pub fn into_outcomes(self) -> Vec<ChargeOutcome> {
        self.outcomes
    }
}

/// Per group of `placed` with something to refund: the refunds that leave only what `verdict`
/// lets land (`None`: refund everything), from each charge's outcome and landing.
pub fn refunds(
    placed: &Placed<'_>,
    outcomes: &[ChargeOutcome],
    landings: &[Landing],
    verdict: Option<Verdict>,
) -> Vec<(usize, Vec<Refund>)> {
    let mut out = Vec::new();
    for (gi, g) in placed.groups.iter().enumerate() {
        let refunds: Vec<Refund> = g
            .charges
            .iter()
            .map(|&ci| {
                let landing = landings[ci];
                let overdraft = placed.charges[ci].params.overdraft;
                Refund {
                    allowed: outcomes[ci].allowed,
                    landing,
                    refund: landing.added > 0 && !verdict.is_some_and(|v| v.lands(overdraft)),
                }
            })
            .collect();
        if refunds.iter().any(|u| u.refund) {
            out.push((gi, refunds));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::placement::tests::{charge, plan};
    use crate::store::placement::{place, Layout};

    fn answer(allowed: bool, added: u64) -> GroupAnswer {
        let outcome = ChargeOutcome {
            allowed,
            remaining: 0,
            wait_us: None,
        };
        vec![(
            outcome,
            Landing {
                added,
                mark: (60, 0),
            },
        )]
    }

    /// A refund that failed is given up: it is not asked for again, and a decision that
    /// is abandoned afterwards (its caller gone) has nothing left to refund.
    #[test]
    fn an_abandoned_refund_is_not_retried() {
        let plan = plan(vec![
            charge("{d|t=a}|f60", false),
            charge("{d|t=b}|f60", false),
        ]);
        let placed = place(&plan, "tg:", Layout::ByTag);
        assert_eq!(placed.groups.len(), 2);
        let mut protocol = Protocol::new(&placed, Mode::Decide);
        assert_eq!(
            protocol.step(),
            Next::Run(vec![(0, Mode::Decide), (1, Mode::Decide)])
        );
        protocol.record(0, answer(true, 1));
        protocol.record(1, answer(false, 0));
        let Next::Refund(refunds) = protocol.step() else {
            panic!("group 0's charge must be refunded");
        };
        assert_eq!(refunds.len(), 1);
        assert_eq!(refunds[0].0, 0);
        assert_eq!(protocol.refunds(None).len(), 1, "landed until refunded");
        protocol.abandon(0);
        assert_eq!(protocol.step(), Next::Done);
        assert!(protocol.refunds(None).is_empty(), "nothing left to refund");
    }
}
