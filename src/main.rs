//! The `tollgate` binary: parses the command line and runs one subcommand.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tollgate::base::clock::SystemClock;
use tollgate::base::shutdown::Shutdown;
use tollgate::cli::compat;
use tollgate::cli::query;
use tollgate::cli::{Cli, ClockArg, Command, ServeArgs};
use tollgate::config::global::RegionCheck;
use tollgate::config::load::{load_path, LoadOptions};
use tollgate::serve::transport::{GrpcTls, Transport};
use tollgate::serve::{self, ConfigSource, ServerOptions};
use tollgate::service::settings::{HeaderNames, Settings};
use tollgate::service::validate::Bounds;
use tollgate::store::memory::MemoryStore;
use tollgate::store::redis::options::{ClockSource, RedisOptions};
use tollgate::store::redis::regional::RegionOptions;
use tollgate::store::redis::RedisStore;
use tollgate::telemetry::logging;
use tollgate::telemetry::metrics::Metrics;
use tollgate::telemetry::stats::mapper::model::Mapper;
use tollgate::telemetry::stats::registry::Statistics;

/// mimalloc: fewer cycles in malloc/free on the request path than the system allocator
/// (`--features system-allocator` builds without it, for a heap profiler).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process. mimalloc advises its arenas for them, and the
/// kernel's khugepaged then fills a sparsely used 2 MiB range in whole when its scan comes by:
/// RSS grew in steps of several MiB at the same minutes of every hour-long soak, whatever the
/// load did (RELIABILITY.md, "the hour on an idle box"). A service of tens of MiB gains little
/// from huge pages and an operator's memory limit wants RSS to follow the heap.
/// `TOLLGATE_THP=on` leaves the host's THP mode in force (with `always` the kernel still gives
/// them; with `madvise` none come, since mimalloc is built without its advice, `no_thp`).
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var("TOLLGATE_THP").as_deref() != Ok("on") {
        // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no memory of
        // ours; it sets a flag on the process's address space (inherited by children).
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    let (cli, notes) = if compat::invoked_as_ratelimit(&argv0) {
        // envoyproxy/ratelimit's interface: no arguments, its environment.
        if argv.next().is_some() {
            eprintln!(
                "error: invoked as `ratelimit`, tollgate reads envoyproxy/ratelimit's environment \
                 and takes no arguments; run `tollgate serve --help` for its flags"
            );
            return ExitCode::from(2);
        }
        match compat::translate(argv0, &|name| std::env::var(name).ok()) {
            Ok(t) => (Cli::parse_from(t.args), t.notes),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        (Cli::parse(), Vec::new())
    };
    if let Err(e) = logging::init_logs(&cli.log, cli.log_format.into()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    for note in notes {
        tracing::warn!("{note}");
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
            Command::Serve(args) => serve(*args).await.map(|()| 0),
            Command::CheckConfig(args) => {
                let config = load_path(
                    &args.path,
                    &LoadOptions {
                        merge_domains: args.merge_domains,
                        usage_domains: args.usage_domains.unwrap_or_default(),
                        region: match args.region {
                            Some(region) => RegionCheck::One {
                                region,
                                reachable: None,
                            },
                            None => RegionCheck::EveryNamed,
                        },
                        ..LoadOptions::default()
                    },
                )?;
                if config.domains.is_empty() {
                    anyhow::bail!("no domain found in {}", args.path.display());
                }
                if args.dump {
                    print!("{}", config.describe());
                } else {
                    print!("{}", config.explain());
                }
                Ok(0)
            }
            Command::Query(args) => {
                let output = if args.json {
                    query::Output::Json
                } else {
                    query::Output::Text
                };
                let answer = query::run(
                    &args.addr,
                    &args.domain,
                    &args.descriptors,
                    args.hits,
                    output,
                )
                .await?;
                print!("{}", answer.text);
                Ok(answer.exit_code)
            }
            Command::Counters(args) => {
                print!("{}", tollgate::cli::counters::counters(&args).await?);
                Ok(0)
            }
            Command::Top(args) => {
                tollgate::cli::top::run(&args).await?;
                Ok(0)
            }
            Command::Reset(args) => {
                print!("{}", tollgate::cli::counters::reset(&args).await?);
                Ok(0)
            }
            Command::MoveHome(args) => {
                print!("{}", tollgate::cli::region::move_home(&args).await?);
                Ok(0)
            }
        }
    });
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, as anyhow's `{:#}` writes them (`outer: inner: …`), each cause
/// once: tollgate's errors quote their source's text (`cannot read: <io error>`) and keep it
/// as the source too, so a cause whose text already ends the message is not written again.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let _traces = logging::init_traces(&args.traces.options())?;
    if args.disabled {
        tracing::warn!("--disabled: every request is answered OK without a decision");
    }
    let statistics = match args.disable_stats {
        true => None,
        false => Some(Arc::new(Statistics::new(
            read_mapper(args.prometheus_mapper.as_deref())?,
            args.near_limit_ratio,
        ))),
    };
    let metrics = Arc::new(match &statistics {
        Some(s) => Metrics::new().with_statistics(s.clone()),
        None => Metrics::new(),
    });
    let opts = server_options(&args, statistics.clone(), metrics.clone())?;
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let statsd = tollgate::telemetry::stats::statsd::spawn(
        &args.statsd,
        statistics.clone(),
        shutdown.clone(),
    );
    let running = match &args.redis_url {
        None if args.regions.region.is_some() => {
            anyhow::bail!("--region needs --redis-url: a region's leases live in its Redis")
        }
        None => {
            let store = MemoryStore::new(Arc::new(SystemClock))
                .with_metrics(metrics)
                .with_max_bytes(args.max_store_bytes);
            serve::start(opts, store.into(), shutdown).await?
        }
        Some(url) => {
            let store = redis_store(&args, url, metrics).await?;
            serve::start(opts, store.into(), shutdown).await?
        }
    };
    running.wait().await?;
    if let Some(statsd) = statsd {
        // Its last flush, briefly.
        let _ = tokio::time::timeout(Duration::from_secs(1), statsd).await;
    }
    Ok(())
}

/// How the service answers beyond the config (`serve`'s answer flags).
fn settings(args: &ServeArgs) -> Settings {
    Settings {
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
        max_held: args.max_held,
        disabled: args.disabled,
        max_store_bytes: args.max_store_bytes,
        reservation_pair_keys: args
            .reservation_pair_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect(),
    }
}

/// The server's listeners, admin endpoints, transport, config source and lifetimes.
fn server_options(
    args: &ServeArgs,
    statistics: Option<Arc<Statistics>>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<ServerOptions> {
    Ok(ServerOptions {
        grpc_addr: args.grpc_addr,
        http_addr: args.http_addr,
        extra_admin_addrs: args
            .debug_addr
            .into_iter()
            .chain(args.metrics_addr)
            .collect(),
        admin_json: args.admin.admin_json,
        admin_ui: args.admin.admin_ui,
        admin_write_addr: args.admin.admin_write_addr,
        admin_max_connections: args.admin.admin_max_connections as usize,
        admin_token: match &args.admin.admin_token_file {
            Some(path) => Some(Arc::new(tollgate::admin::token::AdminToken::from_file(
                path,
            )?)),
            None => None,
        },
        transport: Transport {
            keepalive: args
                .grpc_keepalive
                .0
                .map(|every| (every, Duration::from_secs(20))),
            max_connection_age: args.grpc_max_connection_age,
            max_connection_age_grace: args.grpc_max_connection_age_grace,
            max_connections: args.grpc_max_connections as usize,
            max_concurrent_streams: args.grpc_max_concurrent_streams,
            max_connection_idle: args.grpc_max_connection_idle.0,
            tls: args
                .grpc_tls_cert
                .clone()
                .zip(args.grpc_tls_key.clone())
                .map(|(cert, key)| GrpcTls {
                    cert,
                    key,
                    client_ca: args.grpc_client_ca.clone(),
                }),
        },
        config: match (&args.config, args.xds.options()) {
            (_, Some(xds)) => ConfigSource::Xds(Box::new(xds)),
            (Some(path), None) => ConfigSource::Files(path.clone()),
            (None, None) => anyhow::bail!("--config or --config-xds is required"),
        },
        ready_needs_config: args.ready_needs_config,
        load: LoadOptions {
            merge_domains: args.merge_domains,
            files: args.config_files,
            usage_domains: args.usage_domains.clone().unwrap_or_default(),
            stats: statistics,
            region: match &args.regions.region {
                Some(region) => RegionCheck::One {
                    region: region.clone(),
                    // Its own Redis, and each --region-redis.
                    reachable: Some(
                        std::iter::once(region.clone())
                            .chain(args.regions.region_redis.iter().map(|(n, _)| n.clone()))
                            .collect(),
                    ),
                },
                None => RegionCheck::None,
            },
        },
        metrics_path: args.metrics_path.clone(),
        settings: settings(args),
        reload_interval: args.config_reload_interval.0,
        drain_delay: args.drain_delay,
        shutdown_grace: args.shutdown_grace,
        metrics,
        serving_threads: args.serving_threads,
    })
}

/// The Redis store `--redis-url` names, in `--region`'s region when given, its
/// `--redis-wait-replicas` checked against the topology.
async fn redis_store(
    args: &ServeArgs,
    url: &str,
    metrics: Arc<Metrics>,
) -> anyhow::Result<RedisStore> {
    let password = match &args.redis_password_file {
        None => None,
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--redis-password-file {}: {e}", path.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
    };
    let redis = RedisOptions {
        url: url.to_string(),
        password,
        key_prefix: args.redis_key_prefix.clone(),
        timeout: args.redis_timeout,
        connect_timeout: args.redis_connect_timeout,
        clock: match args.clock {
            ClockArg::Redis => ClockSource::Redis,
            ClockArg::Local => ClockSource::Local(Arc::new(SystemClock)),
        },
        local_cache_size: args.local_cache_size,
        read_replicas: args.read_replicas,
        wait_replicas: args.redis_wait_replicas,
        metrics,
        ca_file: args.redis_ca_file.clone(),
        client_cert: args
            .redis_client_cert
            .clone()
            .zip(args.redis_client_key.clone()),
    };
    let store = RedisStore::connect(redis, Arc::new(SystemClock))?;
    if let Some(region) = &args.regions.region {
        store
            .with_region(RegionOptions {
                region: region.clone(),
                homes: args.regions.region_redis.clone(),
            })
            .map_err(anyhow::Error::msg)?;
    }
    store
        .check_wait_replicas(args.redis_connect_timeout * 3)
        .await?;
    Ok(store)
}

/// `--prometheus-mapper`: the mapping file, parsed (an error names the file and line).
fn read_mapper(path: Option<&std::path::Path>) -> anyhow::Result<Option<Mapper>> {
    let Some(path) = path else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--prometheus-mapper {}: {e}", path.display()))?;
    Mapper::parse(&text, &path.display().to_string())
        .map(Some)
        .map_err(|e| anyhow::anyhow!("statsd mapping file {e}"))
}
