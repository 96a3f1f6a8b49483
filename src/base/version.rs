//! Which tollgate this is: the release (`Cargo.toml`'s version, kept in step with every file
//! that names it by `tests/server/version.rs`) and the commit it was built from (`build.rs`:
//! `unknown` when built without `.git` and without the `TOLLGATE_COMMIT` build argument).
//! docs/operations.md, "Versions and upgrades", says what a release may change.

/// The release, e.g. `0.2.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from (12 hex digits), or `unknown`.
pub const COMMIT: &str = env!("TOLLGATE_COMMIT");

/// What `tollgate --version` prints after the name: `0.2.0 (commit 0babfb8c1d2e)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TOLLGATE_COMMIT"),
    ")"
);
