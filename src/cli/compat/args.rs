//! What the translation of envoyproxy/ratelimit's environment builds: tollgate's arguments
//! (a variable's flag is left out when its `TOLLGATE_*` variable is set: that one wins) and
//! notes to log, and how the parts read the environment.

use std::ffi::OsString;

use super::error::CompatError;

/// Reads one environment variable.
pub(crate) type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;
/// Reads one environment variable as a Go boolean.
pub(crate) type GetBool<'a> = dyn Fn(&str) -> Result<Option<bool>, CompatError> + 'a;

/// tollgate's arguments and the notes a translation collects.
pub(crate) struct Builder<'e> {
    pub(crate) env: &'e dyn Fn(&str) -> Option<String>,
    pub(crate) args: Vec<OsString>,
    pub(crate) notes: Vec<String>,
}

impl Builder<'_> {
    /// `--flag value`, unless `TOLLGATE_<FLAG>` is set (it wins).
    pub(crate) fn flag(&mut self, flag: &str, value: &str) {
        if !self.overridden(flag) {
            self.args.push(format!("--{flag}={value}").into());
        }
    }

    /// `--flag` for `Some(true)`.
    pub(crate) fn switch(&mut self, flag: &str, on: Option<bool>) {
        if on == Some(true) && !self.overridden(flag) {
            self.args.push(format!("--{flag}").into());
        }
    }

    fn overridden(&self, flag: &str) -> bool {
        let var = format!("TOLLGATE_{}", flag.replace('-', "_").to_ascii_uppercase());
        (self.env)(&var).is_some()
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(name: &str, value: &str) -> Result<bool, CompatError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(CompatError::Bool {
            name: name.to_string(),
            value: value.to_string(),
        }),
    }
}
