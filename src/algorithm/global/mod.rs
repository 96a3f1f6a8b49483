//! One limit across regions (docs/multi-region.md): the home region's *authority* grants units
//! to regions, and each region's *lease* spends them without a round trip to home.
//!
//! Pure arithmetic: time is an input (µs; the authority's own clock for home, a
//! region's monotonic clock for a region), and so is the network (whoever drives these types
//! carries asks and grants, or loses them). The simulation
//! (`tollgate-bench/src/bin/region-sim.rs`) drives them with injected time and links.
//!
//! The promise: a region spends only units the authority counted as issued, in the window they
//! were counted in. A grant carries the time left in its window as the authority saw it, and
//! the region counts that down from before it sent the ask, so a lease lapses no later than
//! the authority's window ends whatever the regions' clocks say.
//!
//! [`terms`] holds what both sides say to each other and how a limit is run; [`authority`] is
//! home's side, [`region`] a region's.

pub mod authority;
pub mod region;
pub mod terms;

#[cfg(test)]
mod tests;
