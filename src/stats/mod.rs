//! Statistics as Prometheus series: statsd_exporter's mapping of statsd names ([`mapper`]).

pub mod mapper;
