//! Transparent huge pages off for tollgate's own process (src/main.rs,
//! docs/operations.md "Memory").

use std::path::Path;

use crate::support::binary::{Binary, Start, BIN};
use crate::support::server::{ports, TempConfig};

/// The process's `THP_enabled:` line in `/proc/<pid>/status` (Linux 5.0 on), `None` without it.
fn thp_enabled(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
}

/// Transparent huge pages are off for tollgate's own process (docs/operations.md,
/// "Memory"): with them, an idle instance held about twice its heap and grew in steps as the
/// kernel's khugepaged filled out its allocator's pages. `TOLLGATE_THP=on` leaves the
/// host's setting in force.
#[tokio::test]
async fn transparent_huge_pages_are_off_unless_asked_for() {
    let config = TempConfig::new(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    if thp_enabled(std::process::id()).is_none() {
        println!("this kernel shows no THP_enabled line: nothing to check");
        return;
    }
    for (env, want) in [(None, "0"), (Some("on"), "1")] {
        let [grpc, http] = ports::<2>();
        let mut binary = Binary::start(Start {
            program: Path::new(BIN),
            args: [
                "serve",
                "--config",
                config.path.to_str().expect("utf-8"),
                "--grpc-addr",
                &format!("127.0.0.1:{grpc}"),
                "--http-addr",
                &format!("127.0.0.1:{http}"),
            ]
            .map(String::from)
            .to_vec(),
            env: env
                .map(|v| vec![("TOLLGATE_THP".to_string(), v.to_string())])
                .unwrap_or_default(),
            clear_env: true,
            grpc_port: grpc,
            http_port: http,
            log_path: None,
        })
        .await;
        binary.wait_ready().await;
        let got = thp_enabled(binary.child.id());
        binary.stop();
        // With TOLLGATE_THP=on the process keeps what it inherited (this test's own setting).
        let want = if env.is_some() {
            thp_enabled(std::process::id()).unwrap_or_default()
        } else {
            want.to_string()
        };
        assert_eq!(
            got.as_deref(),
            Some(want.as_str()),
            "THP_enabled of tollgate with TOLLGATE_THP={env:?}"
        );
    }
}
