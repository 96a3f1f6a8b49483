//! What a run measured, as a table for people or one JSON object for scripts.
//!
//! [`Report`] is plain data that [`crate::run`] fills in from the calls' merged tally;
//! rendering it is pure, so the table's lines and the JSON keys (which `scripts/bench.sh`
//! reads) are pinned by the tests below.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::keys::KeyChoice;

/// Latency percentiles in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// The percentiles of a µs histogram.
pub fn summarize(h: &Histogram<u64>) -> LatencySummary {
    LatencySummary {
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

/// What only the open loop measures: how well the schedule was kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleStats {
    pub target_rate: f64,
    /// Measured requests actually sent before the run's end, per second of the window.
    pub sent_per_sec: f64,
    /// Requests due while `concurrency` calls were already in flight; they were sent when
    /// one finished, and their latency still counts from the due time.
    pub late: u64,
    /// Requests due but never sent (the in-flight bound stayed full too long).
    pub unsent: u64,
    /// How far behind its due time a request left the scheduler, in µs.
    pub send_lag_p99_us: u64,
    pub send_lag_max_us: u64,
}

/// Everything one run measured, ready to print as a table or as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub addr: String,
    pub domain: String,
    pub keys: KeyChoice,
    pub concurrency: usize,
    pub connections: usize,
    pub warmup_s: f64,
    /// From the start of measuring until the last measured call finished.
    pub duration_s: f64,
    /// Measured requests: calls made (answered or failed) plus open-loop requests never sent.
    pub requests: u64,
    pub ok: u64,
    pub over_limit: u64,
    pub unknown: u64,
    /// Failed calls by gRPC status name, plus `TIMEOUT` and `UNSENT`.
    pub errors: BTreeMap<&'static str, u64>,
    pub latency: LatencySummary,
    /// `None` for the closed loop.
    pub schedule: Option<ScheduleStats>,
}

impl Report {
    /// Answered calls (whatever the answer).
    pub fn decisions(&self) -> u64 {
        self.ok + self.over_limit + self.unknown
    }

    pub fn decisions_per_sec(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.decisions() as f64 / self.duration_s
        } else {
            0.0
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn load_line(&self) -> String {
        let conns = format!(
            "{} in flight over {} connection{}",
            self.concurrency,
            self.connections,
            if self.connections == 1 { "" } else { "s" }
        );
        match &self.schedule {
            None => format!("closed loop, {conns}, {}", self.keys),
            Some(s) => format!(
                "open loop at {}/s, at most {conns}, {}",
                s.target_rate, self.keys
            ),
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let mut row = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<13}{value}");
        };
        row("target", format!("{}  domain {}", self.addr, self.domain));
        row("load", self.load_line());
        row(
            "measured",
            format!(
                "{:.2} s after {:.2} s warmup",
                self.duration_s, self.warmup_s
            ),
        );
        row("requests", self.requests.to_string());
        row("decisions/s", format!("{:.1}", self.decisions_per_sec()));
        row("ok", self.ok.to_string());
        row("over_limit", self.over_limit.to_string());
        if self.unknown > 0 {
            row("unknown", self.unknown.to_string());
        }
        let errors = if self.errors.is_empty() {
            "0".to_string()
        } else {
            let parts: Vec<String> = self
                .errors
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            format!("{} ({})", self.error_count(), parts.join(", "))
        };
        row("errors", errors);
        let l = &self.latency;
        row(
            "latency",
            format!(
                "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
                human_us(l.p50_us),
                human_us(l.p90_us),
                human_us(l.p99_us),
                human_us(l.p999_us),
                human_us(l.max_us)
            ),
        );
        if let Some(s) = &self.schedule {
            row(
                "schedule",
                format!(
                    "sent {:.1}/s, late {}, unsent {}, send lag p99 {} max {}",
                    s.sent_per_sec,
                    s.late,
                    s.unsent,
                    human_us(s.send_lag_p99_us),
                    human_us(s.send_lag_max_us)
                ),
            );
        }
        out
    }

    /// One JSON object; every key is always present (`null` where a mode has no value).
    pub fn json(&self) -> serde_json::Value {
        let s = self.schedule.as_ref();
        serde_json::json!({
            "mode": if s.is_some() { "open" } else { "closed" },
            "addr": self.addr,
            "domain": self.domain,
            "keys": self.keys.keys(),
            "hot_share": self.keys.hot_share(),
            "concurrency": self.concurrency,
            "connections": self.connections,
            "warmup_s": self.warmup_s,
            "duration_s": round3(self.duration_s),
            "requests": self.requests,
            "decisions": self.decisions(),
            "decisions_per_sec": round3(self.decisions_per_sec()),
            "ok": self.ok,
            "over_limit": self.over_limit,
            "unknown": self.unknown,
            "errors": self.error_count(),
            "errors_by_code": self.errors,
            "p50_us": self.latency.p50_us,
            "p90_us": self.latency.p90_us,
            "p99_us": self.latency.p99_us,
            "p999_us": self.latency.p999_us,
            "max_us": self.latency.max_us,
            "mean_us": round3(self.latency.mean_us),
            "target_rate": s.map(|s| s.target_rate),
            "sent_per_sec": s.map(|s| round3(s.sent_per_sec)),
            "late": s.map(|s| s.late),
            "unsent": s.map(|s| s.unsent),
            "send_lag_p99_us": s.map(|s| s.send_lag_p99_us),
            "send_lag_max_us": s.map(|s| s.send_lag_max_us),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `850 µs`, `1.25 ms`, `2.00 s`.
pub fn human_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{:.2} s", us as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::new_histogram;

    #[test]
    fn summary_percentiles_within_three_digits() {
        let mut h = new_histogram();
        for v in 1..=100_000 {
            h.record(v).unwrap();
        }
        let l = summarize(&h);
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64 <= 0.001;
        assert!(close(l.p50_us, 50_000), "{l:?}");
        assert!(close(l.p90_us, 90_000), "{l:?}");
        assert!(close(l.p99_us, 99_000), "{l:?}");
        assert!(close(l.p999_us, 99_900), "{l:?}");
        assert!(close(l.max_us, 100_000), "{l:?}");
        assert!((l.mean_us - 50_000.5).abs() < 50.0, "{l:?}");
        assert_eq!(summarize(&new_histogram()).max_us, 0);
    }

    #[test]
    fn latencies_print_in_a_readable_unit() {
        assert_eq!(human_us(850), "850 µs");
        assert_eq!(human_us(1_250), "1.25 ms");
        assert_eq!(human_us(2_000_000), "2.00 s");
    }

    fn sample_report(schedule: Option<ScheduleStats>) -> Report {
        Report {
            addr: "http://127.0.0.1:8081".into(),
            domain: "edge".into(),
            keys: KeyChoice::new(100, Some(0.9)),
            concurrency: 64,
            connections: 4,
            warmup_s: 2.0,
            duration_s: 5.0,
            requests: 10_003,
            ok: 8_000,
            over_limit: 2_000,
            unknown: 0,
            errors: BTreeMap::from([("TIMEOUT", 1), ("UNAVAILABLE", 2)]),
            latency: LatencySummary {
                p50_us: 420,
                p90_us: 900,
                p99_us: 1_500,
                p999_us: 3_000,
                max_us: 12_000,
                mean_us: 500.0,
            },
            schedule,
        }
    }

    #[test]
    fn table_shows_every_measure() {
        let t = sample_report(None).table();
        assert!(
            t.contains("closed loop, 64 in flight over 4 connections, 100 keys, 90.0% on key 0")
        );
        assert!(t.contains("decisions/s  2000.0\n"), "{t}");
        assert!(
            t.contains("errors       3 (TIMEOUT 1, UNAVAILABLE 2)\n"),
            "{t}"
        );
        assert!(t.contains(
            "latency      p50 420 µs  p90 900 µs  p99 1.50 ms  p99.9 3.00 ms  max 12.00 ms"
        ));
        assert!(!t.contains("unknown") && !t.contains("schedule"), "{t}");

        let open = sample_report(Some(ScheduleStats {
            target_rate: 2000.0,
            sent_per_sec: 1999.8,
            late: 3,
            unsent: 0,
            send_lag_p99_us: 45,
            send_lag_max_us: 310,
        }))
        .table();
        assert!(
            open.contains("open loop at 2000/s, at most 64 in flight"),
            "{open}"
        );
        assert!(open.contains(
            "schedule     sent 1999.8/s, late 3, unsent 0, send lag p99 45 µs max 310 µs"
        ));
    }

    #[test]
    fn json_has_the_same_numbers() {
        let j = sample_report(None).json();
        assert_eq!(j["mode"], "closed");
        assert_eq!(j["decisions_per_sec"], 2000.0);
        assert_eq!(j["requests"], 10_003);
        assert_eq!(j["ok"], 8_000);
        assert_eq!(j["over_limit"], 2_000);
        assert_eq!(j["errors"], 3);
        assert_eq!(j["errors_by_code"]["UNAVAILABLE"], 2);
        assert_eq!(j["p50_us"], 420);
        assert_eq!(j["p999_us"], 3_000);
        assert_eq!(j["max_us"], 12_000);
        assert_eq!(j["duration_s"], 5.0);
        assert_eq!(j["hot_share"], 0.9);
        assert!(j["target_rate"].is_null() && j["late"].is_null());
    }

    /// `scripts/bench.sh` and other readers rely on every key being there in both modes.
    #[test]
    fn json_keys_are_the_same_in_both_modes() {
        const KEYS: [&str; 29] = [
            "mode",
            "addr",
            "domain",
            "keys",
            "hot_share",
            "concurrency",
            "connections",
            "warmup_s",
            "duration_s",
            "requests",
            "decisions",
            "decisions_per_sec",
            "ok",
            "over_limit",
            "unknown",
            "errors",
            "errors_by_code",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "max_us",
            "mean_us",
            "target_rate",
            "sent_per_sec",
            "late",
            "unsent",
            "send_lag_p99_us",
            "send_lag_max_us",
        ];
        let open = sample_report(Some(ScheduleStats {
            target_rate: 2000.0,
            sent_per_sec: 1999.8,
            late: 3,
            unsent: 0,
            send_lag_p99_us: 45,
            send_lag_max_us: 310,
        }));
        for report in [sample_report(None), open] {
            let j = report.json();
            let mut got: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
            let mut want = KEYS.to_vec();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
        assert_eq!(sample_report(None).json()["keys"], 100);
    }
}
