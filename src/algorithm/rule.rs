//! What every layer says about a charge's part in a decision, kept here at the bottom so the
//! arithmetic depends on nothing above it: a charge's [`Role`], the [`Mode`] a batch or group
//! runs in, what its limit answered ([`ChargeOutcome`]), and the one denial rule ([`verdict`],
//! documented with the rest of the decision in [`crate::service::decision`]).

/// How a charge takes part in the request's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Denies the request when over.
    Enforced,
    /// Reports, never denies (per-rule `shadow_mode`).
    Shadow,
    /// `quota_mode`: the request is denied only when every quota descriptor is over.
    Quota { descriptor: u32 },
}

/// How a request, a batch ([`super::batch`]) or a placement group's script call is run. A
/// request is charged in `Decide` or `CountRejected` (see [`Mode::charging`]); the stores run
/// some groups in `DryRun` or `Refund` on the way (see `store::protocol`). The numbers are the
/// Lua script's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Decide all-or-nothing and charge.
    #[default]
    Decide = 0,
    /// Every charge lands (envoyproxy/ratelimit's counting).
    CountRejected = 1,
    /// Evaluate and answer; write nothing.
    DryRun = 2,
    /// Refund landed charges, then answer as things stand.
    Refund = 3,
    /// Free the concurrency slots the request's slot id holds (a charge's `added`: what it
    /// freed); nothing else is touched.
    Release = 4,
    /// Renew the holds of the concurrency slots the request's slot id holds (a charge is
    /// allowed when its id held slots there); nothing else is touched.
    Renew = 5,
    /// Decide all-or-nothing and charge, as `Decide`, and keep a record of what landed under
    /// the request's id, for a settle (`super::reservation`).
    Reserve = 6,
    /// Settle the reservation the request's id names: each charge's cost is the actual use
    /// on its counter (a charge is allowed when the reservation charged that counter); the
    /// record goes, so a second settle finds nothing.
    Settle = 7,
    /// Refund a reservation's landed charges (as `Refund`) and drop its record: the group of
    /// a reservation the request's final verdict denied.
    Unreserve = 8,
}

impl Mode {
    /// How a request is charged: `CountRejected` for envoyproxy/ratelimit's counting
    /// (`--count-rejected`), else `Decide`.
    pub fn charging(count_rejected: bool) -> Mode {
        if count_rejected {
            Mode::CountRejected
        } else {
            Mode::Decide
        }
    }

    /// How spans and logs name the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Decide => "decide",
            Mode::CountRejected => "count_rejected",
            Mode::DryRun => "dry_run",
            Mode::Refund => "refund",
            Mode::Release => "release",
            Mode::Renew => "renew",
            Mode::Reserve => "reserve",
            Mode::Settle => "settle",
            Mode::Unreserve => "unreserve",
        }
    }

    /// Whether the request is decided all-or-nothing and may be denied (`Decide`, `Reserve`).
    pub fn decides(self) -> bool {
        matches!(self, Mode::Decide | Mode::Reserve)
    }

    /// The mode a group's refund runs in when the request ran in this one: a reservation's
    /// record goes with its charges.
    pub fn refunding(self) -> Mode {
        match self {
            Mode::Reserve => Mode::Unreserve,
            _ => Mode::Refund,
        }
    }

    /// Whether a group call keeps or reads a reservation's record.
    pub fn has_record(self) -> bool {
        matches!(self, Mode::Reserve | Mode::Settle | Mode::Unreserve)
    }
}

/// What one charge's limit answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeOutcome {
    /// The limit had room for this charge (for overdraft: had anything left).
    pub allowed: bool,
    /// What is left after the request, in cost units.
    pub remaining: u64,
    /// Allowed: until the limit is whole again. Denied: until the request's cost on this
    /// counter fits; `None` = never.
    pub wait_us: Option<u64>,
}

/// What a request's charges do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not over: every charge that had room lands (and every overdraft charge).
    Admit,
    /// Over only because of overdraft limits: their charges land, nothing else does.
    OverdraftOnly,
    /// Over: nothing lands.
    Deny,
}

impl Verdict {
    pub fn is_over(self) -> bool {
        self != Verdict::Admit
    }

    /// Whether a charge on a counter of this overdraft kind keeps what it added.
    pub fn lands(self, overdraft: bool) -> bool {
        match self {
            Verdict::Admit => true,
            Verdict::OverdraftOnly => overdraft,
            Verdict::Deny => false,
        }
    }
}

/// The one denial rule (see [`crate::service::decision`]), from `(role, overdraft, allowed)` per
/// charge and the number of quota descriptors in the request (including those with no
/// enforced limit).
pub fn verdict(
    charges: impl Iterator<Item = (Role, bool, bool)>,
    quota_descriptors: usize,
) -> Verdict {
    let mut over = false;
    let mut hard = false;
    // Quota descriptors seen denied: (descriptor, also by a non-overdraft limit).
    let mut quota: Vec<(u32, bool)> = Vec::new();
    for (role, overdraft, allowed) in charges {
        if allowed {
            continue;
        }
        match role {
            Role::Shadow => {}
            Role::Enforced => {
                over = true;
                hard |= !overdraft;
            }
            Role::Quota { descriptor } => match quota.iter_mut().find(|(d, _)| *d == descriptor) {
                Some(q) => q.1 |= !overdraft,
                None => quota.push((descriptor, !overdraft)),
            },
        }
    }
    let quota_all = quota_descriptors > 0 && quota.len() == quota_descriptors;
    over |= quota_all;
    hard |= quota_all && quota.iter().all(|&(_, h)| h);
    match (over, hard) {
        (false, _) => Verdict::Admit,
        (true, true) => Verdict::Deny,
        (true, false) => Verdict::OverdraftOnly,
    }
}
