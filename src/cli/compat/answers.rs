//! envoyproxy/ratelimit's variables about answers as flags: shadow mode, response headers,
//! dynamic metadata, the kill switch; the ones tollgate needs no flag for are checked.

use super::args::{Builder, Get, GetBool};
use super::error::CompatError;

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<(), CompatError> {
    // Answers.
    t.switch("shadow-mode", flag_bool("SHADOW_MODE")?);
    t.switch(
        "response-headers",
        flag_bool("LIMIT_RESPONSE_HEADERS_ENABLED")?,
    );
    for (var, flag) in [
        ("LIMIT_LIMIT_HEADER", "header-limit"),
        ("LIMIT_REMAINING_HEADER", "header-remaining"),
        ("LIMIT_RESET_HEADER", "header-reset"),
    ] {
        if let Some(name) = get(var) {
            t.flag(flag, &name);
        }
    }
    t.switch("dynamic-metadata", flag_bool("RESPONSE_DYNAMIC_METADATA")?);
    t.switch("disabled", flag_bool("RATE_LIMIT_DISABLED")?);
    if flag_bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? == Some(false) {
        t.notes.push(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: tollgate never charges a request it \
             denies (set TOLLGATE_COUNT_REJECTED=true to charge them)"
                .into(),
        );
    }
    // Expiry jitter spreads envoyproxy/ratelimit's key expiries; tollgate's keys expire at
    // their window's end plus one second and need none.
    if let Some(j) = get("EXPIRATION_JITTER_MAX_SECONDS") {
        j.parse::<u64>()
            .map_err(|_| CompatError::Jitter(j.clone()))?;
    }
    Ok(())
}
