//! The `tollgate` binary as a child process: started with chosen arguments and environment,
//! waited for until its admin port answers, killed when dropped, and when the test binary
//! dies (see [`super::process`]; it lives on when the test thread that started it ends, so a
//! fixture shared by a binary's tests may hold one).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::server::{http_client, ports};

/// The binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A running `tollgate` process.
pub struct Binary {
    pub child: Child,
    /// `http://host:port` of its gRPC listener.
    pub grpc_url: String,
    /// `http://host:port` of its admin listener.
    pub http_url: String,
    /// What it wrote to stderr so far is kept here when `keep_logs` was set.
    pub log_path: Option<std::path::PathBuf>,
}

impl Drop for Binary {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How to start the binary.
pub struct Start<'a> {
    /// The program to run (`BIN`, or a symlink to it).
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Drop the parent's environment first (only `PATH` stays).
    pub clear_env: bool,
    /// The gRPC and admin ports the process will listen on (for the readiness wait).
    pub grpc_port: u16,
    pub http_port: u16,
    /// Write stderr to this file instead of discarding it.
    pub log_path: Option<std::path::PathBuf>,
}

impl Binary {
    /// Starts the process and waits (up to 15 s) until `GET /healthz` answers.
    pub async fn start(start: Start<'_>) -> Binary {
        let mut command = Command::new(start.program);
        command.args(&start.args);
        if start.clear_env {
            command.env_clear();
            if let Some(path) = std::env::var_os("PATH") {
                command.env("PATH", path);
            }
        }
        command.envs(start.env.iter().map(|(k, v)| (k, v)));
        command.stdin(Stdio::null()).stdout(Stdio::null());
        match &start.log_path {
            Some(p) => {
                let file = std::fs::File::create(p).expect("log file");
                command.stderr(file);
            }
            None => {
                command.stderr(Stdio::null());
            }
        }
        let child = super::process::spawn(command).expect("start tollgate");
        let mut binary = Binary {
            child,
            grpc_url: format!("http://127.0.0.1:{}", start.grpc_port),
            http_url: format!("http://127.0.0.1:{}", start.http_port),
            log_path: start.log_path,
        };
        binary.wait_admin().await;
        binary
    }

    async fn wait_admin(&mut self) {
        let http = http_client();
        let url = format!("{}/healthz", self.http_url);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(resp) = http.get(&url).send().await {
                if resp.status() == 200 {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("tollgate exited early ({status}); log: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{url} never answered; log: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `tollgate serve --config CONFIG` on loopback ports of its own, with `extra` arguments,
    /// only `PATH` in its environment, and its stderr in `log` when given.
    pub async fn serve(config: &Path, extra: &[&str], log: Option<PathBuf>) -> Binary {
        let [grpc, http] = ports::<2>();
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.to_string_lossy().into_owned(),
            "--grpc-addr".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-addr".into(),
            format!("127.0.0.1:{http}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Binary::start(Start {
            program: Path::new(BIN),
            args,
            env: Vec::new(),
            clear_env: true,
            grpc_port: grpc,
            http_port: http,
            log_path: log,
        })
        .await
    }

    /// The binary run as envoyproxy/ratelimit's image runs it: a `ratelimit` symlink made in
    /// `dir`, no arguments, only `env` (and `PATH`), its stderr in `dir/ratelimit.log`.
    pub async fn as_ratelimit(
        dir: &Path,
        env: Vec<(String, String)>,
        grpc_port: u16,
        http_port: u16,
    ) -> Binary {
        Binary::start(Start {
            program: &ratelimit_symlink(dir),
            args: Vec::new(),
            env,
            clear_env: true,
            grpc_port,
            http_port,
            log_path: Some(dir.join("ratelimit.log")),
        })
        .await
    }

    /// The port of its gRPC listener.
    pub fn grpc_port(&self) -> u16 {
        self.grpc_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a gRPC port")
    }

    /// Waits (up to 15 s) until `GET /readyz` answers 200.
    pub async fn wait_ready(&mut self) {
        let http = http_client();
        let url = format!("{}/readyz", self.http_url);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(resp) = http.get(&url).send().await {
                if resp.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{url} never answered 200; log: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the process (SIGKILL, as a crash) and reaps it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What the process wrote to stderr (when it was kept).
    pub fn log(&self) -> String {
        self.log_path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

/// A `ratelimit` symlink to the test binary in `dir` (argv[0] `ratelimit`: envoyproxy/
/// ratelimit's environment is read).
pub fn ratelimit_symlink(dir: &Path) -> PathBuf {
    let link = dir.join("ratelimit");
    std::os::unix::fs::symlink(BIN, &link).expect("symlink ratelimit -> tollgate");
    link
}
