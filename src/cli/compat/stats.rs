//! envoyproxy/ratelimit's statistics variables as flags: `NEAR_LIMIT_RATIO`, `DISABLE_STATS`,
//! and with `USE_PROMETHEUS` its mapping file (`PROMETHEUS_MAPPER_YAML`) and path
//! (`PROMETHEUS_PATH`); `USE_STATSD` / `USE_DOG_STATSD` with `STATSD_HOST`, `STATSD_PORT`,
//! `STATS_FLUSH_INTERVAL` and `EXTRA_TAGS` as the statsd sink's flags.

use super::args::{Builder, Get, GetBool};

use crate::cli::compat::error::CompatError;

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
    use_prometheus: bool,
) -> Result<(), CompatError> {
    if let Some(ratio) = get("NEAR_LIMIT_RATIO") {
        t.flag("near-limit-ratio", &ratio);
    }
    let disabled = flag_bool("DISABLE_STATS")?;
    t.switch("disable-stats", disabled);
    if disabled != Some(true) {
        statsd(t, get, flag_bool)?;
    }
    if let Some(path) = get("PROMETHEUS_PATH").filter(|_| use_prometheus) {
        t.flag("metrics-path", &path);
    }
    if let Some(mapper) = get("PROMETHEUS_MAPPER_YAML") {
        // Envoy Gateway mounts its mapping ConfigMap `optional: true`: a missing file is normal.
        if std::path::Path::new(&mapper).exists() {
            t.flag("prometheus-mapper", &mapper);
        } else {
            t.notes.push(format!(
                "PROMETHEUS_MAPPER_YAML={mapper}: no such file; envoyproxy/ratelimit's default \
                 statsd mapping applies"
            ));
        }
    }
    Ok(())
}

/// envoyproxy/ratelimit's statsd sinks. It defaults `USE_STATSD` to true and refuses it
/// together with `USE_DOG_STATSD`; tollgate sends statsd only when one is set true (the
/// dogstatsd one if both).
fn statsd(t: &mut Builder, get: &Get, flag_bool: &GetBool) -> Result<(), CompatError> {
    let dogstatsd = flag_bool("USE_DOG_STATSD")?.unwrap_or(false);
    if !dogstatsd && !flag_bool("USE_STATSD")?.unwrap_or(false) {
        return Ok(());
    }
    let host = get("STATSD_HOST").unwrap_or_else(|| "localhost".into());
    let port = get("STATSD_PORT").unwrap_or_else(|| "8125".into());
    port.parse::<u16>()
        .map_err(|_| CompatError::StatsdPort(port.clone()))?;
    t.flag(
        "statsd",
        &match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        },
    );
    t.switch("statsd-dogstatsd", Some(dogstatsd));
    if let Some(every) = get("STATS_FLUSH_INTERVAL") {
        t.flag("statsd-flush-interval", &every);
    }
    if let Some(tags) = get("EXTRA_TAGS") {
        t.flag("statsd-tags", &tags);
    }
    if let Some(protocol) = get("STATSD_PROTOCOL").filter(|p| !p.starts_with("udp")) {
        t.notes.push(format!(
            "STATSD_PROTOCOL={protocol}: tollgate sends statsd over UDP only"
        ));
    } else if !dogstatsd && get("STATSD_PROTOCOL").is_none() {
        t.notes.push(
            "USE_STATSD=true: statistics go to statsd over UDP (envoyproxy/ratelimit's gostats \
             defaults to TCP; set STATSD_PROTOCOL=udp to silence this)"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::translate;

    fn args(vars: &[(&str, &str)]) -> Vec<String> {
        let map: std::collections::HashMap<&str, &str> = vars.iter().copied().collect();
        translate("ratelimit".into(), &|k| map.get(k).map(|v| v.to_string()))
            .unwrap()
            .args
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn statistics_variables() {
        let dir = std::env::temp_dir();
        let file = dir.join(format!("tollgate-mapper-{}.yaml", std::process::id()));
        std::fs::write(&file, "mappings: []\n").unwrap();
        let a = args(&[
            ("REDIS_URL", "h:1"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_PATH", "/stats"),
            ("PROMETHEUS_MAPPER_YAML", file.to_str().unwrap()),
            ("NEAR_LIMIT_RATIO", "0.9"),
            ("DISABLE_STATS", "true"),
        ]);
        std::fs::remove_file(&file).unwrap();
        for want in [
            "--metrics-path=/stats".to_string(),
            format!("--prometheus-mapper={}", file.display()),
            "--near-limit-ratio=0.9".into(),
            "--disable-stats".into(),
        ] {
            assert!(a.contains(&want), "{want} in {a:?}");
        }
        let a = args(&[("REDIS_URL", "h:1"), ("PROMETHEUS_PATH", "/stats")]);
        assert!(!a.iter().any(|x| x.starts_with("--metrics-path")), "{a:?}");
    }

    #[test]
    fn statsd_variables() {
        let a = args(&[
            ("REDIS_URL", "h:1"),
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "statsd.local"),
            ("STATSD_PORT", "9125"),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("EXTRA_TAGS", "a:1,b:2"),
        ]);
        for want in [
            "--statsd=statsd.local:9125",
            "--statsd-flush-interval=100ms",
            "--statsd-tags=a:1,b:2",
        ] {
            assert!(a.contains(&want.to_string()), "{want} in {a:?}");
        }
        assert!(!a.contains(&"--statsd-dogstatsd".to_string()), "{a:?}");
        let a = args(&[("REDIS_URL", "h:1"), ("USE_DOG_STATSD", "true")]);
        assert!(a.contains(&"--statsd=localhost:8125".to_string()), "{a:?}");
        assert!(a.contains(&"--statsd-dogstatsd".to_string()), "{a:?}");
        let a = args(&[
            ("REDIS_URL", "h:1"),
            ("USE_STATSD", "true"),
            ("DISABLE_STATS", "true"),
        ]);
        assert!(!a.iter().any(|x| x.starts_with("--statsd")), "{a:?}");
        let a = args(&[("REDIS_URL", "h:1"), ("USE_STATSD", "false")]);
        assert!(!a.iter().any(|x| x.starts_with("--statsd")), "{a:?}");
    }
}
