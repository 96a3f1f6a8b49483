//! Reading config from disk: one file, or every YAML file of a directory (Kubernetes
//! ConfigMap mounts included: dotfiles and the `..data` / `..2024_…` entries are skipped),
//! or, as envoyproxy/ratelimit reads its runtime directory, every file in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::compile::compile_file;
use crate::config::global::{check_region, RegionCheck};

use super::{Config, Domain, Level};

use crate::config::error::{ConfigError, ConfigProblem, DuplicateKey, RuleError};

use crate::config::usage::UsageDomains;

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Several files may declare one domain; their rules are merged (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Which files of a config directory are read.
    pub files: FileSelection,
    /// Domains whose limits all record usage after the fact (`--usage-domains`).
    pub usage_domains: UsageDomains,
    /// envoyproxy/ratelimit's statistics, bound to each compiled rule (`None`: off).
    pub stats: Option<std::sync::Arc<crate::telemetry::stats::registry::Statistics>>,
    /// This instance's region (`--region`) and the homes it reaches: a file with a global
    /// limit that does not list it, or any global limit without it, or homed where this
    /// instance cannot reach, is refused (`check-config` without `--region`: checked for every
    /// region the file names).
    pub region: RegionCheck,
}

/// Which files of a config directory are read (subdirectories never are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileSelection {
    /// `*.yaml` and `*.yml`, dotfiles skipped.
    #[default]
    Yaml,
    /// Every file, as envoyproxy/ratelimit's runtime loader does; dotfiles too unless
    /// `ignore_dotfiles` (`RUNTIME_IGNOREDOTFILES`).
    All { ignore_dotfiles: bool },
}

impl FileSelection {
    fn wants(self, name: &str) -> bool {
        match self {
            FileSelection::Yaml => {
                !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
            }
            FileSelection::All { ignore_dotfiles } => !(ignore_dotfiles && name.starts_with('.')),
        }
    }
}

/// Loads a file, or the selected files directly in a directory.
pub fn load_path(path: &Path, opts: &LoadOptions) -> Result<Config, ConfigError> {
    compile_sources(&read_sources(path, opts.files)?, opts)
}

/// The config's files as `(name, text)`, in a stable order.
pub fn read_sources(
    path: &Path,
    files: FileSelection,
) -> Result<Vec<(String, String)>, ConfigError> {
    let display = path.display().to_string();
    let meta = std::fs::metadata(path)
        .map_err(|e| ConfigError::new(&display, None, ConfigProblem::Unreadable(Arc::new(e))))?;
    let files = if meta.is_dir() {
        list_files(path, files)
            .map_err(|e| ConfigError::new(&display, None, ConfigProblem::Unlistable(Arc::new(e))))?
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .map(|file| {
            let name = file.display().to_string();
            std::fs::read_to_string(&file)
                .map(|text| (name.clone(), text))
                .map_err(|e| {
                    ConfigError::new(&name, None, ConfigProblem::UnreadableFile(Arc::new(e)))
                })
        })
        .collect()
}

/// Compiles `(name, text)` sources into one config.
pub fn compile_sources(
    sources: &[(String, String)],
    opts: &LoadOptions,
) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    for (name, text) in sources {
        let mut domain = compile_file(name, text, &opts.usage_domains)?;
        check_region(&domain, &opts.region)
            .map_err(|e| super::locate::at_rule_in(ConfigError::new(name, None, e), text))?;
        if let Some(stats) = &opts.stats {
            crate::config::bind::bind(&mut domain, stats);
        }
        add_domain(&mut config, domain, name, opts)?;
    }
    Ok(config)
}

fn list_files(dir: &Path, files: FileSelection) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if !files.wants(&name.to_string_lossy()) {
            continue;
        }
        // Follows symlinks (ConfigMap files are links into `..data`).
        if std::fs::metadata(entry.path())?.is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn add_domain(
    config: &mut Config,
    domain: Domain,
    file: &str,
    opts: &LoadOptions,
) -> Result<(), ConfigError> {
    match config.domains.get_mut(&domain.name) {
        None => {
            config.domains.insert(domain.name.clone(), domain);
            Ok(())
        }
        Some(_) if !opts.merge_domains => Err(ConfigError::new(
            file,
            None,
            ConfigProblem::DuplicateDomain(domain.name),
        )),
        Some(existing) if existing.policy != domain.policy || existing.prices != domain.prices => {
            Err(ConfigError::new(
                file,
                None,
                ConfigProblem::PolicyMismatch(domain.name),
            ))
        }
        Some(existing) => merge_level(&mut existing.root, domain.root)
            .map_err(|k| ConfigError::new(file, None, RuleError::from(k))),
    }
}

fn merge_level(into: &mut Level, from: Level) -> Result<(), DuplicateKey> {
    for (_, rules) in from.keys {
        for rule in rules
            .exact
            .into_values()
            .chain(rules.wildcards)
            .chain(rules.any)
        {
            into.insert(rule)?;
        }
    }
    Ok(())
}
