//! `--region` and `--region-redis`: the region this instance serves, and how it reaches the
//! Redis of each other region that is home to a global limit (docs/multi-region.md).

use clap::Args;

use crate::config::global::valid_region;

#[derive(Debug, Args, Default, Clone)]
pub struct RegionArgs {
    /// This instance's region, for global limits (`global:` in the config): their leases live
    /// in this region's Redis (--redis-url). Without it, a config with a global limit is
    /// refused. Needs --redis-url.
    #[arg(long, env = "TOLLGATE_REGION", value_parser = region_name)]
    pub region: Option<String>,
    /// Other regions' Redis, `NAME=URL,NAME=URL`: each region that is home to a global limit
    /// this region shares (the URL as --redis-url's). The authority of a limit lives in its
    /// home region's Redis.
    #[arg(long, env = "TOLLGATE_REGION_REDIS", value_delimiter = ',', value_parser = region_redis)]
    pub region_redis: Vec<(String, String)>,
}

/// A region flag's value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RegionArgError {
    #[error("invalid region name '{0}': 1 to 64 of A-Z, a-z, 0-9, _, - and .")]
    Name(String),
    #[error("expected NAME=URL (redis://host:port), found '{0}'")]
    Pair(String),
}

fn region_name(s: &str) -> Result<String, RegionArgError> {
    if valid_region(s) {
        Ok(s.to_string())
    } else {
        Err(RegionArgError::Name(s.to_string()))
    }
}

fn region_redis(s: &str) -> Result<(String, String), RegionArgError> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| RegionArgError::Pair(s.to_string()))?;
    Ok((region_name(name)?, url.to_string()))
}
