//! `--redis-wait-replicas`: a charge answered only once replicas hold it (`durable.rs`: what a
//! `WAIT` asks and the `EVALSHA` + `WAIT` pipeline; `commit.rs`: one `WAIT` per connection
//! covering every call before it), and the replicas it counts on (`replication.rs`).

pub(super) mod commit;
pub(super) mod durable;
pub mod replication;
