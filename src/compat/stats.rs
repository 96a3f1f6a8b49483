//! envoyproxy/ratelimit's statistics variables as flags: `NEAR_LIMIT_RATIO`, `DISABLE_STATS`,
//! and with `USE_PROMETHEUS` its mapping file (`PROMETHEUS_MAPPER_YAML`) and path
//! (`PROMETHEUS_PATH`).

use super::{Builder, CompatError, Get, GetBool};

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
    use_prometheus: bool,
) -> Result<(), CompatError> {
    if let Some(ratio) = get("NEAR_LIMIT_RATIO") {
        t.flag("near-limit-ratio", &ratio);
    }
    t.switch("disable-stats", flag_bool("DISABLE_STATS")?);
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
}
