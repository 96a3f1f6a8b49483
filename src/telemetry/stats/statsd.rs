//! The statsd sink (`--statsd`, envoyproxy/ratelimit's `USE_STATSD`): every
//! `--statsd-flush-interval` a background task sends each counter's increase since the last
//! flush (`name:N|c`, zero increases left out, as gostats does) and each `response_time`
//! sample (`name:N|ms`, whole milliseconds as envoyproxy/ratelimit times them) over UDP,
//! through cadence's buffered UDP sink (datagrams of at most 1432 bytes, as gostats).
//!
//! Tags (`--statsd-tags`, `EXTRA_TAGS`) go where gostats puts them: in the name
//! (`….total_hits.__k=v`, sorted by key, `.:|` in values turned into `_`), or with
//! `--statsd-dogstatsd` as DogStatsD tags (`…|#k:v`), as envoyproxy/ratelimit's dogstatsd
//! sink sends them.
//!
//! Decisions never wait on it: they add to atomic counters; the task reads them. The socket
//! is non-blocking, the address is resolved on the task (again after a failed send), and a
//! failure is logged at most once per ten seconds.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use cadence::prelude::*;
use cadence::{BufferedUdpMetricSink, StatsdClient};
use clap::Args;

use crate::base::duration;
use crate::base::shutdown::Shutdown;
use crate::telemetry::stats::registry::Statistics;

/// gostats' UDP buffer: no datagram is fragmented.
const DATAGRAM: usize = 1432;

/// The statsd sink's flags.
#[derive(Debug, Clone, Args)]
pub struct StatsdArgs {
    /// Send envoyproxy/ratelimit's statistics to this statsd server (`host:port`, UDP)
    /// every --statsd-flush-interval (envoyproxy/ratelimit's USE_STATSD, STATSD_HOST,
    /// STATSD_PORT). Off with --disable-stats.
    #[arg(long, env = "TOLLGATE_STATSD")]
    pub statsd: Option<String>,
    /// How often statistics are sent to --statsd (envoyproxy/ratelimit's
    /// STATS_FLUSH_INTERVAL).
    #[arg(long, env = "TOLLGATE_STATSD_FLUSH_INTERVAL", default_value = "10s", value_parser = duration::parse_positive)]
    pub statsd_flush_interval: Duration,
    /// Tags on every statistic sent to --statsd, `k1:v1,k2:v2` (envoyproxy/ratelimit's
    /// EXTRA_TAGS): in the name as gostats writes them (`name.__k1=v1.__k2=v2`), or as
    /// DogStatsD tags with --statsd-dogstatsd.
    #[arg(long, env = "TOLLGATE_STATSD_TAGS", value_parser = crate::base::pairs::parse_pairs)]
    pub statsd_tags: Option<crate::base::pairs::Pairs>,
    /// Send tags the DogStatsD way (`name:1|c|#k:v`), as envoyproxy/ratelimit's
    /// USE_DOG_STATSD.
    #[arg(long, env = "TOLLGATE_STATSD_DOGSTATSD")]
    pub statsd_dogstatsd: bool,
}

/// How the sink names and tags what it sends.
#[derive(Debug, Clone)]
struct Naming {
    /// `(key, value)`, sorted by key, values sanitized as gostats does.
    tags: Vec<(String, String)>,
    dogstatsd: bool,
    /// `.__k=v…`, for plain statsd.
    suffix: String,
}

impl Naming {
    fn new(tags: &[(String, String)], dogstatsd: bool) -> Naming {
        let mut tags: Vec<(String, String)> = tags
            .iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k.clone(), v.replace(['.', ':', '|'], "_")))
            .collect();
        tags.sort_by(|a, b| a.0.cmp(&b.0));
        tags.dedup_by(|a, b| a.0 == b.0);
        let suffix = match dogstatsd {
            true => String::new(),
            false => tags.iter().map(|(k, v)| format!(".__{k}={v}")).collect(),
        };
        Naming {
            tags,
            dogstatsd,
            suffix,
        }
    }

    fn name(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    fn with_tags<'a, T: cadence::Metric + From<String>>(
        &'a self,
        mut b: cadence::MetricBuilder<'a, 'a, T>,
    ) -> cadence::MetricBuilder<'a, 'a, T> {
        if self.dogstatsd {
            for (k, v) in &self.tags {
                b = b.with_tag(k, v);
            }
        }
        b
    }
}

/// Starts the sink when `--statsd` is set; the task sends a last flush on shutdown.
pub fn spawn(
    args: &StatsdArgs,
    stats: Option<Arc<Statistics>>,
    shutdown: Shutdown,
) -> Option<tokio::task::JoinHandle<()>> {
    let addr = args.statsd.clone()?;
    let Some(stats) = stats else {
        tracing::warn!(statsd = %addr, "--disable-stats: nothing is sent to statsd");
        return None;
    };
    let tags = args.statsd_tags.clone().unwrap_or_default().0;
    let flusher = Flusher {
        stats,
        addr,
        naming: Naming::new(&tags, args.statsd_dogstatsd),
        client: None,
        last: HashMap::new(),
    };
    tracing::info!(statsd = %flusher.addr, interval = %duration::format(args.statsd_flush_interval), dogstatsd = args.statsd_dogstatsd, "statsd sink");
    flusher.stats.keep_timer_samples(true);
    Some(tokio::spawn(
        flusher.run(args.statsd_flush_interval, shutdown),
    ))
}

struct Flusher {
    stats: Arc<Statistics>,
    addr: String,
    naming: Naming,
    client: Option<StatsdClient>,
    /// The cumulative value each counter had at the last flush.
    last: HashMap<String, u64>,
}

impl Flusher {
    async fn run(mut self, every: Duration, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait() => {
                    self.flush().await;
                    return;
                }
            }
            self.flush().await;
        }
    }

    async fn flush(&mut self) {
        let mut counters = Vec::new();
        self.stats.visit(&mut |v| {
            let last = self.last.get(v.name).copied().unwrap_or(0);
            if v.value != last {
                counters.push((v.name.to_string(), v.value.saturating_sub(last)));
                self.last.insert(v.name.to_string(), v.value);
            }
        });
        let timers: Vec<(&str, Vec<f64>)> = self
            .stats
            .timers()
            .iter()
            .map(|(name, t)| (*name, t.drain()))
            .collect();
        if counters.is_empty() && timers.iter().all(|(_, s)| s.is_empty()) {
            return;
        }
        if self.client.is_none() {
            self.resolve().await;
        }
        let Some(client) = self.client.as_ref() else {
            return;
        };
        let n = &self.naming;
        let mut error: Option<String> = None;
        let mut note = |r: Result<(), cadence::MetricError>| {
            if let (Err(e), None) = (r, &error) {
                error = Some(e.to_string());
            }
        };
        for (name, delta) in &counters {
            let name = n.name(name);
            note(
                n.with_tags(client.count_with_tags(&name, *delta))
                    .try_send()
                    .map(drop),
            );
        }
        for (name, samples) in &timers {
            let name = n.name(name);
            for ms in samples {
                let ms = ms.max(0.0) as u64;
                note(
                    n.with_tags(client.time_with_tags(&name, ms))
                        .try_send()
                        .map(drop),
                );
            }
        }
        note(client.flush());
        if let Some(e) = error {
            failed(&self.addr, &e);
            // Resolve again next time (a moved statsd, a DNS change).
            self.client = None;
        }
    }

    /// Resolves `--statsd` and makes the client.
    async fn resolve(&mut self) {
        let resolved = tokio::net::lookup_host(self.addr.as_str())
            .await
            .and_then(|mut a| a.next().ok_or_else(|| io::Error::other("no address")));
        match resolved.and_then(connect) {
            Ok(client) => self.client = Some(client),
            Err(e) => failed(&self.addr, &e.to_string()),
        }
    }
}

/// A non-blocking UDP socket and cadence's buffered sink towards `to`.
fn connect(to: SocketAddr) -> io::Result<StatsdClient> {
    let local: SocketAddr = match to {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)?;
    socket.set_nonblocking(true)?;
    let sink =
        BufferedUdpMetricSink::with_capacity(to, socket, DATAGRAM).map_err(io::Error::other)?;
    Ok(StatsdClient::from_sink("", sink))
}

fn failed(addr: &str, error: &str) {
    if let Some(held) = crate::base::log_throttle::due("statsd") {
        tracing::warn!(statsd = %addr, error, suppressed = held, "statsd: statistics not sent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_as_gostats_writes_them() {
        let tags = vec![
            ("zone".to_string(), "eu.west:1".to_string()),
            ("app".to_string(), "rl".to_string()),
            ("empty".to_string(), String::new()),
        ];
        let n = Naming::new(&tags, false);
        assert_eq!(n.name("a.b"), "a.b.__app=rl.__zone=eu_west_1");
        let d = Naming::new(&tags, true);
        assert_eq!(d.name("a.b"), "a.b");
        assert_eq!(
            d.tags,
            [
                ("app".into(), "rl".into()),
                ("zone".into(), "eu_west_1".into())
            ]
        );
    }
}
