//! The Lua scripts Redis runs: the decision script's arguments and replies (`script.rs`), one
//! request decided in Redis (`decide.rs`), calls that arrive together sent as one `EVALSHA`
//! (`coalesce.rs`), check-only decisions on replicas, and the operator's reads and resets
//! (`admin.rs`, `lua/admin.lua`).

pub(super) mod admin;
pub(super) mod coalesce;
pub(super) mod decide;
pub(super) mod replicas;
pub mod script;
