//! The `tollgate` binary: parses the command line and runs one subcommand.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tollgate::cli::{Cli, ClockArg, Command, ServeArgs};
use tollgate::clock::SystemClock;
use tollgate::config::{load_path, LoadOptions};
use tollgate::duration;
use tollgate::metrics::Metrics;
use tollgate::server::{self, ServerOptions};
use tollgate::settings::{HeaderNames, Settings};
use tollgate::shutdown::Shutdown;
use tollgate::store::memory::MemoryStore;
use tollgate::store::redis::{ClockSource, RedisOptions, RedisStore};
use tollgate::telemetry;
use tollgate::validate::Bounds;

/// mimalloc: fewer cycles in malloc/free on the request path than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = telemetry::init_logs(&cli.log, cli.log_format.into()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(*args).await,
            Command::CheckConfig(args) => {
                let config = load_path(
                    &args.path,
                    LoadOptions {
                        merge_domains: args.merge_domains,
                    },
                )?;
                print!("{}", config.describe());
                Ok(())
            }
            Command::Query(args) => {
                let out =
                    tollgate::query::run(&args.addr, &args.domain, &args.descriptors, args.hits)
                        .await?;
                print!("{out}");
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn duration_flag(name: &str, value: &str) -> anyhow::Result<Option<Duration>> {
    duration::parse_optional(value).map_err(|e| anyhow::anyhow!("--{name}: {e}"))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let _traces = telemetry::init_traces().map_err(anyhow::Error::msg)?;
    let settings = Settings {
        count_rejected: args.count_rejected,
        global_shadow: args.shadow_mode,
        headers: args.response_headers.then(|| HeaderNames {
            limit: args.header_limit.clone(),
            remaining: args.header_remaining.clone(),
            reset: args.header_reset.clone(),
            retry_after: args.header_retry_after.clone(),
        }),
        dynamic_metadata: args.dynamic_metadata,
        bounds: Bounds {
            max_descriptors: args.max_descriptors,
            max_entries: args.max_entries,
            max_value_len: args.max_value_len,
            max_hits: args.max_hits,
        },
        failure_mode: args.failure_mode.into(),
        local_fallback_share: args.local_fallback_share,
        store_failure_header: args.store_failure_header,
        max_in_flight: args.max_in_flight as usize,
    };
    let reload = duration_flag("config-reload-interval", &args.config_reload_interval)?;
    let metrics = Arc::new(Metrics::new());
    let opts = ServerOptions {
        grpc_addr: args.grpc_addr,
        http_addr: args.http_addr,
        config_path: args.config.clone(),
        load: LoadOptions {
            merge_domains: args.merge_domains,
        },
        settings,
        reload_interval: reload,
        drain_delay: duration_flag("drain-delay", &args.drain_delay)?.unwrap_or_default(),
        shutdown_grace: duration_flag("shutdown-grace", &args.shutdown_grace)?.unwrap_or_default(),
        metrics: metrics.clone(),
    };
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let running = match &args.redis_url {
        None => {
            let store = Arc::new(
                MemoryStore::new(Arc::new(SystemClock))
                    .with_metrics(metrics)
                    .with_max_bytes(args.max_store_bytes),
            );
            server::start(opts, store, shutdown).await?
        }
        Some(url) => {
            let password = match &args.redis_password_file {
                None => None,
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .map_err(|e| {
                            anyhow::anyhow!("--redis-password-file {}: {e}", path.display())
                        })?
                        .trim_end_matches(['\r', '\n'])
                        .to_string(),
                ),
            };
            let timeout = duration_flag("redis-timeout", &args.redis_timeout)?
                .ok_or_else(|| anyhow::anyhow!("--redis-timeout must be a positive duration"))?;
            let redis = RedisOptions {
                url: url.clone(),
                password,
                key_prefix: args.redis_key_prefix.clone(),
                timeout,
                clock: match args.clock {
                    ClockArg::Redis => ClockSource::Redis,
                    ClockArg::Local => ClockSource::Local(Arc::new(SystemClock)),
                },
                local_cache_size: args.local_cache_size,
                metrics,
                ca_file: args.redis_ca_file.clone(),
                client_cert: args
                    .redis_client_cert
                    .clone()
                    .zip(args.redis_client_key.clone()),
            };
            let store =
                RedisStore::connect(redis, Arc::new(SystemClock)).map_err(anyhow::Error::msg)?;
            server::start(opts, Arc::new(store), shutdown).await?
        }
    };
    running.wait().await
}
