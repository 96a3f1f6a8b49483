//! Graceful shutdown as one small type: a signal the servers wait on, and the trigger
//! (SIGTERM / SIGINT, or a test calling [`Shutdown::trigger`]).

use tokio::sync::watch;

/// Cloneable shutdown signal; every clone sees one trigger.
#[derive(Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown {
            tx: watch::Sender::new(false),
        }
    }

    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once shutdown is triggered.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // Err only if the sender is gone, which `self` prevents.
        let _ = rx.wait_for(|&v| v).await;
    }

    /// Triggers on SIGTERM or SIGINT.
    pub fn on_signals(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            let ctrl_c = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                use tokio::signal::unix::{signal, SignalKind};
                match signal(SignalKind::terminate()) {
                    Ok(mut term) => {
                        tokio::select! {
                            _ = ctrl_c => {}
                            _ = term.recv() => {}
                        }
                    }
                    Err(_) => {
                        let _ = ctrl_c.await;
                    }
                }
            }
            #[cfg(not(unix))]
            {
                let _ = ctrl_c.await;
            }
            tracing::info!("shutdown signal received: draining");
            me.trigger();
        });
    }
}
