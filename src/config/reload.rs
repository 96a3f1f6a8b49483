//! Hot reload: re-read the config files every interval, compile them when they changed, and
//! swap the new [`Config`] in atomically. A file that fails to compile is logged with its file
//! and line and the running config stays.
//!
//! Every reload attempt (changed files read, or a read that failed) bumps a generation number,
//! shown on `/rlconfig`, so an operator or a test can tell that a change has been looked at.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::config::load::{compile_sources, read_sources, LoadOptions};

use super::Config;

use crate::base::shutdown::Shutdown;
use crate::config::error::ConfigError;
use crate::telemetry::metrics::Metrics;

/// Why a reload was rejected.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadError {
    /// The files could not be read or compiled.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new files declare no domain while the running config has some.
    #[error(
        "no domain found in {}; the running config's limits stay (restart to run without any)",
        .0.display()
    )]
    EveryDomainGone(PathBuf),
    /// An xDS response that does not compile (it was NACKed).
    #[error(transparent)]
    Xds(#[from] crate::config::xds::resource::ResourceError),
}

/// What the reloader last did, for `/rlconfig` and metrics.
pub struct ReloadStatus {
    generation: AtomicU64,
    last_error: Mutex<Option<ReloadError>>,
    metrics: Arc<Metrics>,
}

impl ReloadStatus {
    pub fn new(metrics: Arc<Metrics>) -> ReloadStatus {
        ReloadStatus {
            generation: AtomicU64::new(0),
            last_error: Mutex::new(None),
            metrics,
        }
    }

    /// Marks the initial load (generation 1).
    pub fn loaded(&self) {
        self.record(Ok(()));
    }

    /// Attempts so far, counting the initial load as 1.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Why the last attempt was rejected; `None` when it was applied.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().as_ref().map(ToString::to_string)
    }

    /// Records one attempt; a rejection is logged once until its message changes.
    pub(in crate::config) fn record(&self, result: Result<(), ReloadError>) {
        self.metrics.config_reload(result.is_ok());
        if result.is_ok() {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.metrics.config_last_reload_success.set(now);
        }
        let mut last = self.last_error.lock();
        let new = result.err();
        let message = |e: Option<&ReloadError>| e.map(ToString::to_string);
        if let Some(error) = new
            .as_ref()
            .filter(|e| message(last.as_ref()) != message(Some(e)))
        {
            tracing::error!(%error, "config rejected; keeping the running config");
        }
        *last = new;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// Watches `path` and swaps `config` when its files change, until shutdown.
pub struct Reloader {
    pub path: PathBuf,
    pub load: LoadOptions,
    pub config: Arc<ArcSwap<Config>>,
    pub status: Arc<ReloadStatus>,
    pub every: Duration,
}

impl Reloader {
    /// Runs until shutdown. `current` is the text the running config was built from.
    pub async fn run(self, mut current: Vec<(String, String)>, shutdown: Shutdown) {
        // Why `current` was rejected, when it is not the running config's text.
        let mut rejected: Option<ReloadError> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = shutdown.wait() => return,
            }
            let sources = match read_sources(&self.path, self.load.files) {
                Ok(s) => s,
                Err(e) => {
                    self.status.record(Err(e.into()));
                    continue;
                }
            };
            if sources == current {
                match &rejected {
                    // Still the files last rejected: that is another failed attempt (an alert
                    // on failing reloads keeps firing while they stay broken).
                    Some(error) => self.status.record(Err(error.clone())),
                    // The running config's files, readable again after a failed read: the
                    // running config is what they say.
                    None if self.status.last_error().is_some() => self.status.record(Ok(())),
                    None => {}
                }
                continue;
            }
            let compiled = compile_sources(&sources, &self.load).map_err(ReloadError::from);
            let compiled = compiled.and_then(|c| {
                // Every domain gone at once is a deploy caught halfway (a directory emptied
                // before its new files arrive) far more often than a wish: keep the limits.
                if c.domains.is_empty() && !self.config.load().domains.is_empty() {
                    Err(ReloadError::EveryDomainGone(self.path.clone()))
                } else {
                    Ok(c)
                }
            });
            match compiled {
                Ok(c) => {
                    c.warn_if_empty(&self.path);
                    self.config.store(Arc::new(c));
                    tracing::info!(path = %self.path.display(), "config reloaded");
                    self.status.record(Ok(()));
                    rejected = None;
                }
                Err(e) => {
                    self.status.record(Err(e.clone()));
                    rejected = Some(e);
                }
            }
            current = sources;
        }
    }
}
