//! Decision deadlines without a timer per decision.
//!
//! A tokio timer that ends before every other timer of its runtime wakes the runtime's driver
//! (an `eventfd` write, then an `epoll_wait` that returns at once), and a decision's deadline
//! (now + `--redis-timeout`) often is such a timer: measured on the Redis path, 0.41 wake-ups
//! per decision, nearly half of its system calls. On a serving thread the decisions whose
//! deadlines fall in one millisecond share one timer instead; a deadline is rounded up to the
//! millisecond. Elsewhere each deadline has a timer of its own.

use std::cell::RefCell;
use std::time::Duration;

use futures::future::{Either, FutureExt, Shared};
use tokio::time::{sleep_until, Instant, Sleep};

thread_local! {
    /// On a serving thread: its shared timer, with the instant it ends.
    static SHARED: RefCell<Option<Timers>> = const { RefCell::new(None) };
}

struct Timers {
    /// Deadlines are rounded up to a whole millisecond after this.
    epoch: Instant,
    current: Option<(Instant, Shared<Sleep>)>,
}

/// Runs `serve` with this thread's decisions sharing timers (see the module docs).
pub async fn shared_on_this_thread<F: std::future::Future>(serve: F) -> F::Output {
    SHARED.with_borrow_mut(|t| {
        *t = Some(Timers {
            epoch: Instant::now(),
            current: None,
        })
    });
    let out = serve.await;
    SHARED.with_borrow_mut(|t| *t = None);
    out
}

/// A future that ends at `deadline` (on a serving thread: at most a millisecond later).
pub fn at(deadline: Instant) -> Either<Shared<Sleep>, Sleep> {
    SHARED.with_borrow_mut(|timers| match timers {
        None => Either::Right(sleep_until(deadline)),
        Some(t) => {
            let micros = deadline.saturating_duration_since(t.epoch).as_micros();
            let end = t.epoch + Duration::from_millis(micros.div_ceil(1000) as u64);
            match &t.current {
                Some((at, timer)) if *at == end => Either::Left(timer.clone()),
                _ => {
                    let timer = sleep_until(end).shared();
                    t.current = Some((end, timer.clone()));
                    Either::Left(timer)
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn deadlines_in_one_millisecond_share_a_timer_that_ends_after_each() {
        shared_on_this_thread(async {
            let start = SHARED.with_borrow(|t| t.as_ref().expect("shared here").epoch);
            let a = start + Duration::from_micros(10_200);
            let b = start + Duration::from_micros(10_900);
            let c = start + Duration::from_micros(11_100);
            let (ta, tb, tc) = (at(a), at(b), at(c));
            let (Either::Left(ta), Either::Left(tb), Either::Left(tc)) = (ta, tb, tc) else {
                panic!("a serving thread's timers are shared");
            };
            assert!(ta.ptr_eq(&tb), "10.2 ms and 10.9 ms share a timer");
            assert!(!tb.ptr_eq(&tc), "11.1 ms has its own");
            tb.await;
            assert!(Instant::now() >= b, "ends after every deadline it stands for");
            tc.await;
            assert!(Instant::now() >= c);
        })
        .await;
        assert!(matches!(at(Instant::now()), Either::Right(_)));
    }
}
