//! Money budgets: amounts in micro-units of a currency, and a price table per model and token
//! kind that turns a count of tokens into an amount.
//!
//! Everything is an integer. An amount is counted in **micro-units** (1 USD = 1,000,000 µUSD);
//! a price is what a **million tokens** cost, in micro-units (USD 0.15 per million input tokens
//! is 150,000). `n` tokens at price `p` cost `ceil(n × p / 1,000,000)` micro-units, worked in 128
//! bits: exact whenever `n × p` is a whole number of millions, and otherwise rounded *up* to
//! the next micro-unit, once per charge (a budget is never under-charged; the most one charge
//! over-charges is one micro-unit). Amounts and prices are written in the config as decimals
//! with at most 6 places (`500`, `0.15`, `"0.075"`), read as text, never as floating point.

use std::collections::HashMap;

/// Micro-units in one unit of currency.
pub const MICROS: u64 = 1_000_000;

/// The largest spend limit, in micro-units: with the debt cap a counter holds up to 101 times
/// its limit, which the Redis script counts exactly only below 2^53.
pub const MAX_SPEND: u64 = ((1u64 << 53) - 1) / (crate::limit::DEBT_CAP_FACTOR + 1);

/// The token kind a count without one is priced as (the dearest of the usual three).
pub const DEFAULT_KIND: &str = "output";

/// A decimal amount with at most 6 places, in micro-units; `None` when `text` is not one
/// (negative, more places, not a number, too large).
pub fn parse_micros(text: &str) -> Option<u64> {
    let text = text.trim();
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 6 {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut micros = 0u64;
    for (i, b) in frac.bytes().enumerate() {
        micros += u64::from(b - b'0') * 10u64.pow(5 - i as u32);
    }
    whole.checked_mul(MICROS)?.checked_add(micros)
}

/// `micros` written back as a decimal (`150000` → `0.15`).
pub fn format_micros(micros: u64) -> String {
    let (whole, frac) = (micros / MICROS, micros % MICROS);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:06}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// What `tokens` cost at `per_million` micro-units a million: rounded up to a micro-unit.
pub fn cost(tokens: u64, per_million: u64) -> u64 {
    // In 64 bits when it fits (every real call): a 128-bit division is a library call.
    if let Some(exact) = tokens.checked_mul(per_million) {
        return exact.div_ceil(MICROS);
    }
    let exact = u128::from(tokens) * u128::from(per_million);
    u64::try_from(exact.div_ceil(u128::from(MICROS))).unwrap_or(u64::MAX)
}

/// A price table by name. Looked up on every spend charge with a model and a kind a request
/// names, so hashed with foldhash rather than SipHash: the names in it come from the config,
/// and a request can only look up, never add, so there is nothing to flood.
pub type Table<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// A domain's price table (`prices:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prices {
    /// The currency's name, as the operator pages show it (`USD`).
    pub currency: String,
    /// The descriptor entry whose value names the model.
    pub model_key: String,
    /// The descriptor entry whose value names the token kind.
    pub kind_key: String,
    /// Per model, per kind: micro-units a million tokens.
    pub models: Table<Table<u64>>,
    /// The prices of a model the table does not name; `None`: such a request is refused.
    pub default: Option<Table<u64>>,
}

/// Why a count could not be priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpriced {
    /// No model entry, or a model neither the table nor a default prices.
    Model,
    /// The model's prices have no such kind.
    Kind,
}

impl Prices {
    /// The price a million tokens of `kind` (default [`DEFAULT_KIND`]) of `model` cost.
    pub fn per_million(&self, model: Option<&str>, kind: Option<&str>) -> Result<u64, Unpriced> {
        let table = model
            .and_then(|m| self.models.get(m))
            .or(self.default.as_ref())
            .ok_or(Unpriced::Model)?;
        table
            .get(kind.unwrap_or(DEFAULT_KIND))
            .copied()
            .ok_or(Unpriced::Kind)
    }

    /// The most a million tokens of any kind cost (the bound check's price).
    pub fn dearest(&self) -> u64 {
        self.models
            .values()
            .chain(self.default.as_ref())
            .flat_map(|t| t.values())
            .copied()
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_read_exactly() {
        assert_eq!(parse_micros("0.15"), Some(150_000));
        assert_eq!(parse_micros("0.075"), Some(75_000));
        assert_eq!(parse_micros("500"), Some(500_000_000));
        assert_eq!(parse_micros("1.000001"), Some(1_000_001));
        assert_eq!(parse_micros(".5"), Some(500_000));
        for bad in [
            "",
            ".",
            "-1",
            "0.0000001",
            "1e3",
            "abc",
            "1.2.3",
            "99999999999999999999",
        ] {
            assert_eq!(parse_micros(bad), None, "{bad}");
        }
        assert_eq!(format_micros(150_000), "0.15");
        assert_eq!(format_micros(500_000_000), "500");
        assert_eq!(format_micros(1_000_001), "1.000001");
    }

    #[test]
    fn a_cost_rounds_up_to_a_micro_unit() {
        // USD 0.15 a million: a million tokens cost exactly 0.15, one token 0.15 µUSD → 1.
        assert_eq!(cost(1_000_000, 150_000), 150_000);
        assert_eq!(cost(1, 150_000), 1);
        assert_eq!(cost(20, 150_000), 3);
        assert_eq!(cost(0, 150_000), 0);
        assert_eq!(cost(u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn a_cost_past_64_bits_is_exact_and_clamped() {
        assert_eq!(cost(1, 1), 1);
        assert_eq!(cost(1_000_000, 2_500_000), 2_500_000);
        assert_eq!(cost(3, 333_333), 1);
        // tokens × price past u64: the 128-bit path, then clamped.
        assert_eq!(cost(u64::MAX, 2_000_000), u64::MAX);
        assert_eq!(cost(1 << 40, 1 << 30), 1_180_591_620_717_412);
    }

    #[test]
    fn a_price_is_found_by_model_and_kind() {
        let table = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<Table<_>>()
        };
        let mut prices = Prices {
            currency: "USD".into(),
            model_key: "model".into(),
            kind_key: "kind".into(),
            models: [(
                "mini".to_string(),
                table(&[("input", 150_000), ("output", 600_000)]),
            )]
            .into_iter()
            .collect(),
            default: None,
        };
        assert_eq!(prices.per_million(Some("mini"), Some("input")), Ok(150_000));
        assert_eq!(prices.per_million(Some("mini"), None), Ok(600_000));
        assert_eq!(
            prices.per_million(Some("mini"), Some("audio")),
            Err(Unpriced::Kind)
        );
        assert_eq!(prices.per_million(Some("big"), None), Err(Unpriced::Model));
        assert_eq!(prices.per_million(None, None), Err(Unpriced::Model));
        prices.default = Some(table(&[("output", 20_000_000)]));
        assert_eq!(prices.per_million(Some("big"), None), Ok(20_000_000));
        assert_eq!(prices.dearest(), 20_000_000);
    }
}
