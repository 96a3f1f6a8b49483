//! The prices pass: a `spend:` limit charges a descriptor's tokens at its model's and token
//! kind's price, in micro-units of the currency (`limit::money`); every other limit its count.

use crate::limit::money::{self, Prices, Unpriced};
use crate::limit::Limit;
use crate::pb::common::RateLimitDescriptor;

/// What `count` of descriptor `d` costs on `limit`; `None` when a `spend:` limit cannot price
/// it (the request is refused and charges nothing).
pub(super) fn cost(
    prices: Option<&Prices>,
    d: &RateLimitDescriptor,
    limit: &Limit,
    count: u64,
) -> Option<u64> {
    // A check (cost 0) costs nothing in any money; it still refuses a model the prices do not
    // know, so a call is refused before it runs rather than after. A check that names no
    // model (a budget's remaining) needs no price.
    if !limit.spend || (count == 0 && !prices.is_some_and(|p| names_model(p, d))) {
        return Some(count);
    }
    match prices.map(|p| priced(p, d, count)) {
        // Past the most a counter can hold nothing changes (a charge that large never fits,
        // and overdraft stops at the cap): clamped there, the script's numbers stay exact
        // (spend × 101 < 2^53).
        Some(Ok(money)) if money > 0 => Some(money.min(limit.params.usage_cap().max(1))),
        Some(Ok(_)) => Some(0),
        _ => None,
    }
}

/// Whether `d` has an entry naming a model.
fn names_model(prices: &Prices, d: &RateLimitDescriptor) -> bool {
    d.entries.iter().any(|e| e.key == prices.model_key)
}

/// What `tokens` of descriptor `d` cost in micro-units: its model and token kind (default
/// `output`) are its entries keyed by the table's `model_key` and `kind_key`.
fn priced(prices: &Prices, d: &RateLimitDescriptor, tokens: u64) -> Result<u64, Unpriced> {
    let entry = |key: &str| {
        d.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    };
    let per_million = prices.per_million(entry(&prices.model_key), entry(&prices.kind_key))?;
    Ok(money::cost(tokens, per_million))
}
