//! `--redis-wait-replicas`: a charge answered only once replicas hold it (`durable.rs`: the
//! `WAIT` after an `EVALSHA`), and the replicas it counts on (`replication.rs`).

pub(super) mod durable;
pub mod replication;
