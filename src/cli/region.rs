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

/// `tollgate move-home`: a global limit's home moves (docs/multi-region.md, "Moving home").
#[derive(Debug, Args)]
pub struct MoveHomeArgs {
    /// The Redis of the limit's current home region (a URL as --redis-url's).
    #[arg(long)]
    pub from_redis: String,
    /// The Redis of the region that becomes home.
    #[arg(long)]
    pub to_redis: String,
    /// The region that becomes home, as `home:` will name it.
    #[arg(long, value_parser = region_name)]
    pub to_region: String,
    /// Only this limit (its id, as the status page names it: `domain.key_value|suffix`);
    /// without it, every global limit homed at --from-redis.
    #[arg(long)]
    pub limit: Option<String>,
}

/// Moves the authorities, then says what to do next.
pub async fn move_home(args: &MoveHomeArgs) -> anyhow::Result<String> {
    let moved = crate::store::redis::regional::moving::move_home(
        &args.from_redis,
        &args.to_redis,
        &args.to_region,
        args.limit.as_deref(),
    )
    .await?;
    let mut out = String::new();
    for m in &moved {
        out.push_str(&format!(
            "moved {} to {}: window {}, {} issued (clocks {} ms apart)\n",
            m.key, args.to_region, m.window, m.issued, m.skew_ms
        ));
    }
    out.push_str(&format!(
        "now set home: {} in every region's config (each instance needs --region-redis {}=URL \
         unless it is in {}); until it reloads, a region asking the old home is granted nothing\n",
        args.to_region, args.to_region, args.to_region
    ));
    Ok(out)
}
