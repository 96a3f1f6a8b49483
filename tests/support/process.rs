//! Child processes that die with the test binary, however it ends.
//!
//! A test runner killed by a timeout or SIGPIPE skips every `Drop`, so `redis-server` and
//! `tollgate` children would live on. Every child is therefore spawned by one long-lived
//! thread with `PR_SET_PDEATHSIG` = SIGKILL: Linux kills the child when the thread that forked
//! it exits, and this thread exits only with the process.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;

type Job = (Command, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    die_with_parent(&mut command);
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the child-spawner thread");
        Mutex::new(tx)
    })
}

/// Makes `command`'s process get SIGKILL when the spawning thread exits.
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid, kill).
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Spawns `command` so that its process dies with this test binary.
pub fn spawn(command: Command) -> io::Result<Child> {
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, tx))
        .map_err(|_| io::Error::other("child-spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("child-spawner thread is gone"))?
}
