//! Where envoyproxy/ratelimit reads its config from, as flags: `CONFIG_TYPE=FILE` (the
//! runtime directory) or `GRPC_XDS_SOTW` ([`super::xds`]), and how it treats what it reads.

use super::args::{Builder, Get, GetBool};
use super::error::CompatError;
use super::xds;

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<(), CompatError> {
    match get("CONFIG_TYPE").as_deref() {
        None | Some("FILE") => runtime_directory(t, get, flag_bool)?,
        Some("GRPC_XDS_SOTW") => xds::translate(t, get, flag_bool)?,
        Some(other) => return Err(CompatError::ConfigType(other.to_string())),
    }
    t.switch("merge-domains", flag_bool("MERGE_DOMAIN_CONFIG")?);
    t.switch(
        "ready-needs-config",
        flag_bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?,
    );
    Ok(())
}

/// `CONFIG_TYPE=FILE`: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, every file in it.
fn runtime_directory(t: &mut Builder, get: &Get, flag_bool: &GetBool) -> Result<(), CompatError> {
    let root = get("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into());
    let mut dir = std::path::PathBuf::from(root);
    if let Some(sub) = get("RUNTIME_SUBDIRECTORY") {
        dir.push(sub);
    }
    dir.push(get("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
    t.flag("config", &dir.display().to_string());
    let ignore_dotfiles = flag_bool("RUNTIME_IGNOREDOTFILES")?.unwrap_or(false);
    t.flag(
        "config-files",
        if ignore_dotfiles {
            "all"
        } else {
            "all-with-dotfiles"
        },
    );
    // RUNTIME_WATCH_ROOT chooses what envoyproxy/ratelimit's watcher follows (a symlink swap
    // of the root, or the directory); tollgate re-reads the directory either way.
    flag_bool("RUNTIME_WATCH_ROOT")?;
    Ok(())
}
