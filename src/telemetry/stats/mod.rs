//! envoyproxy/ratelimit's statistics, under its names and counting rules, served as
//! Prometheus through a statsd_exporter mapping file (`--prometheus-mapper`, or
//! envoyproxy/ratelimit's default mapping) beside tollgate's own `tollgate_*` metrics.
//!
//! - [`registry`]: the counters, by statsd name (`ratelimit.service.rate_limit.<key>.over_limit`,
//!   `ratelimit.service.config_load_success`, `ratelimit_server.ShouldRateLimit.total_requests`,
//!   …) and the `response_time` timer;
//! - [`key`]: which counters a compiled limit counts into, bound when a config is compiled;
//! - [`mapper`]: statsd_exporter's mapping of statsd names;
//! - [`exposition`]: at scrape time, each statistic's name through the mapping (once per
//!   name) and the Prometheus text statsd_exporter would serve.
//!
//! - [`statsd`]: the statsd sink (`--statsd`, `USE_STATSD`): [`registry::Statistics::visit`]
//!   gives every counter's statsd name and cumulative value (the flusher keeps the last
//!   values it sent and sends the differences every `--statsd-flush-interval`), and
//!   [`registry::Statistics::keep_timer_samples`] then [`registry::StatTimer::drain`] give
//!   the timer's samples (milliseconds) since the last flush.

pub mod exposition;
pub mod mapper;
pub mod name;
pub mod registry;
pub mod statsd;
