//! The operator's endpoints and commands against the real binary: `GET /counters` (open
//! without a token file, 401 without the token once one is set), `POST /counters/reset` only
//! on the write listener and only with the token (logged at WARN with the peer, counted),
//! `tollgate counters` and `tollgate reset`, and hostile descriptor values (quotes, `<script>`,
//! `,`, `=`, `&`, `%`) that come back whole in JSON.

use std::path::Path;
use std::process::Command;

use crate::support::binary::{Binary, BIN};
use crate::support::server::{http_client, ports, TempConfig};

const CONFIG: &str = "\
domain: ops
descriptors:
  - key: tenant
    rate_limits:
      - {name: per_tenant, unit: minute, requests_per_unit: 5}
      - {name: global, unit: minute, requests_per_unit: 1000, shared: true}
";

const HOSTILE: &str = "<script>alert(\"x\")</script>,a=b&c%20'";

/// `tollgate <args>`: its exit code, stdout and stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run tollgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn charge(grpc_url: &str, value: &str, n: usize) {
    let entry = format!("tenant={value}");
    for _ in 0..n {
        let (code, out, err) = tokio::task::block_in_place(|| {
            run(&[
                "query",
                "--addr",
                grpc_url,
                "--domain",
                "ops",
                "--descriptor",
                &entry,
            ])
        });
        assert!(code == 0 || code == 3, "{out}{err}");
    }
}

async fn serve(dir: &Path, write: bool) -> (Binary, Option<String>) {
    let config = dir.join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "  t0ken-\u{e9}\n").unwrap();
    let token_path = token.to_string_lossy().into_owned();
    let [write_port] = ports::<1>();
    let write_addr = format!("127.0.0.1:{write_port}");
    let mut extra = vec![];
    if write {
        extra = vec![
            "--admin-write-addr",
            &write_addr,
            "--admin-token-file",
            &token_path,
        ];
    }
    let log = dir.join("log");
    let bin = Binary::serve(&config, &extra, Some(log)).await;
    (bin, write.then(|| format!("http://{write_addr}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_are_read_openly_without_a_token_file_and_never_reset_there() {
    let dir = TempConfig::new(CONFIG);
    let (bin, _) = serve(&dir.dir, false).await;
    charge(&bin.grpc_url, "a", 2).await;
    let http = http_client();
    let url = format!("{}/counters?domain=ops&descriptor=tenant=a", bin.http_url);
    let resp = http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    let per_tenant = body["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "per_tenant")
        .unwrap();
    assert_eq!(
        (
            per_tenant["used"].as_u64(),
            per_tenant["remaining"].as_u64()
        ),
        (Some(2), Some(3))
    );
    // The descriptor encoded whole, as `curl -G --data-urlencode descriptor=tenant=a` and
    // Python's urlencode write it: the same counters.
    let standard: serde_json::Value = http
        .get(format!(
            "{}/counters?domain=ops&descriptor=tenant%3Da",
            bin.http_url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(standard, body);
    // Every admin response tells a browser not to sniff it, frame it or pass on the referrer.
    for path in [
        "/",
        "/counters?domain=ops&descriptor=tenant=a",
        "/healthz",
        "/nowhere",
    ] {
        let resp = http
            .get(format!("{}{path}", bin.http_url))
            .send()
            .await
            .unwrap();
        let h = resp.headers();
        for (name, want) in [
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("content-security-policy", "frame-ancestors 'none'"),
            ("referrer-policy", "no-referrer"),
        ] {
            assert_eq!(
                h.get(name).and_then(|v| v.to_str().ok()),
                Some(want),
                "{path}: {h:?}"
            );
        }
    }
    // No reset on the admin port, with or without the form of one.
    let resp = http
        .post(format!(
            "{}/counters/reset?domain=ops&descriptor=tenant=a",
            bin.http_url
        ))
        .send()
        .await
        .unwrap();
    assert!(
        resp.status() == 404 || resp.status() == 405,
        "{}",
        resp.status()
    );
    // Bad selectors are 400 and say why; an unknown domain is 404.
    for (q, status, says) in [
        ("domain=ops", 400, "descriptor is required"),
        ("descriptor=tenant=a", 400, "domain is required"),
        ("domain=nope&descriptor=tenant=a", 404, "not configured"),
    ] {
        let resp = http
            .get(format!("{}/counters?{q}", bin.http_url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{q}");
        assert!(resp.text().await.unwrap().contains(says), "{q}");
    }
    // The CLI's table.
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "counters",
            "--addr",
            &bin.http_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
        ])
    });
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("per_tenant"))
        .expect(&out);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[1..6],
        ["fixed_window", "60s", "5", "2", "3"],
        "{out}"
    );
    assert!(out.contains("global (shared)"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_need_the_write_listener_and_the_token_and_are_logged() {
    let dir = TempConfig::new(CONFIG);
    let (bin, write_url) = serve(&dir.dir, true).await;
    let write_url = write_url.unwrap();
    let token_file = dir.dir.join("token");
    let token_file = token_file.to_str().unwrap();
    charge(&bin.grpc_url, "a", 6).await;
    let http = http_client();
    let q = "domain=ops&descriptor=tenant=a";
    // Reading now needs the token too (and a browser is asked for it).
    for path in [
        format!("/counters?{q}"),
        "/top?domain=ops".into(),
        "/".into(),
    ] {
        let resp = http
            .get(format!("{}{path}", bin.http_url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
    }
    let resp = http
        .get(format!("{}/counters?{q}", bin.http_url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
    let resp = http
        .get(format!("{}/counters?{q}", bin.http_url))
        .basic_auth("anyone", Some("t0ken-\u{e9}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A reset without the token, or with a wrong one, resets nothing.
    for token in [None, Some("t0ken"), Some("t0ken-\u{e9}x")] {
        let mut req = http.post(format!("{write_url}/counters/reset?{q}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        assert_eq!(req.send().await.unwrap().status(), 401, "{token:?}");
    }
    // Cross-site request forgery: a browser replays Basic credentials and marks what it sends.
    // The right token as a Basic password, or any request a browser marked, resets nothing.
    let basic = http
        .post(format!("{write_url}/counters/reset"))
        .basic_auth("anyone", Some("t0ken-\u{e9}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(q)
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);
    assert!(basic.text().await.unwrap().contains("not HTTP Basic"));
    for (mark, value) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let resp = http
            .post(format!("{write_url}/counters/reset"))
            .bearer_auth("t0ken-\u{e9}")
            .header(mark, value)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(q)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{mark}");
        assert!(resp
            .text()
            .await
            .unwrap()
            .contains("refused from a browser"));
    }
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "counters",
            "--addr",
            &bin.http_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
            "--token-file",
            token_file,
            "--json",
        ])
    });
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"used\":5"), "{out}");
    // The CLI without the token says so.
    let (code, _, err) = tokio::task::block_in_place(|| {
        run(&[
            "reset",
            "--addr",
            &write_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
        ])
    });
    assert_eq!(code, 1);
    assert!(err.contains("--token-file"), "{err}");
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "reset",
            "--addr",
            &write_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
            "--token-file",
            token_file,
        ])
    });
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("reset per_tenant") && out.contains("cleared 5 used"),
        "{out}"
    );
    assert!(
        !out.contains("global"),
        "a shared limit only by name: {out}"
    );
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "reset",
            "--addr",
            &write_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
            "--limit",
            "global",
            "--token-file",
            token_file,
        ])
    });
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("reset global"), "{out}");
    // Admitted again; the log names the peer; the metric counts both resets.
    let (code, _, _) = tokio::task::block_in_place(|| {
        run(&[
            "query",
            "--addr",
            &bin.grpc_url,
            "--domain",
            "ops",
            "--descriptor",
            "tenant=a",
        ])
    });
    assert_eq!(code, 0);
    let log = bin.log();
    assert!(
        log.contains("counter reset by an operator") && log.contains("peer=127.0.0.1"),
        "{log}"
    );
    let metrics = http
        .get(format!("{}/metrics", bin.http_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("tollgate_counter_resets_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_are_selected_whole_and_come_back_escaped() {
    let dir = TempConfig::new(CONFIG);
    let (bin, _) = serve(&dir.dir, false).await;
    let entry = format!("tenant={HOSTILE}");
    let http = http_client();
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "counters",
            "--addr",
            &bin.http_url,
            "--domain",
            "ops",
            "--entry",
            &entry,
            "--json",
        ])
    });
    assert_eq!(code, 0, "{err}");
    let body: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(body["descriptor"][0]["value"], HOSTILE);
    let key = body["counters"][0]["key"].as_str().unwrap().to_string();
    assert!(key.contains("<script>"), "{key}");
    // The same selector as form pairs.
    let url = format!("{}/counters", bin.http_url);
    let form = |value: &str| {
        format!(
            "{url}?domain=ops&key=tenant&value={}",
            tollgate::admin::counters::encode(value)
        )
    };
    let resp = http.get(form(HOSTILE)).send().await.unwrap();
    let pairs: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(pairs["counters"][0]["key"], key.as_str());
    // A value over --max-value-len is refused as the gRPC port refuses it.
    let long = "v".repeat(10 * 1024);
    let resp = http.get(form(&long)).send().await.unwrap();
    assert_eq!(resp.status(), 400);
}

#[test]
fn a_write_listener_without_a_token_file_is_refused_at_start() {
    let dir = TempConfig::new(CONFIG);
    let [g, h, w] = ports::<3>();
    let (code, _, err) = run(&[
        "serve",
        "--config",
        dir.path.to_str().unwrap(),
        "--grpc-addr",
        &format!("127.0.0.1:{g}"),
        "--http-addr",
        &format!("127.0.0.1:{h}"),
        "--admin-write-addr",
        &format!("127.0.0.1:{w}"),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--admin-write-addr needs --admin-token-file"),
        "{err}"
    );
}

/// `GET /top` on two instances, and `tollgate top --once` merging them into one fleet view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_reports_who_is_limited_and_the_cli_merges_instances() {
    let dir_a = TempConfig::new(CONFIG);
    let dir_b = TempConfig::new(CONFIG);
    let (a, _) = serve(&dir_a.dir, false).await;
    let (b, _) = serve(&dir_b.dir, false).await;
    // Limit 5 a minute: a's "hot" gets 4 OVER_LIMIT answers, its "warm" 1; b's "hot" 2.
    charge(&a.grpc_url, "hot", 9).await;
    charge(&a.grpc_url, "warm", 6).await;
    charge(&b.grpc_url, "hot", 7).await;
    charge(&b.grpc_url, "fine", 3).await;
    let http = http_client();
    let body: serde_json::Value = http
        .get(format!("{}/top?domain=ops", a.http_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["total_minute"], 5, "{body}");
    assert_eq!(body["minute"][0]["descriptor"], "tenant=hot");
    assert_eq!(body["minute"][0]["over_limit"], 4);
    assert_eq!(body["minute"][1]["descriptor"], "tenant=warm");
    assert_eq!(body["per_minute"].as_array().unwrap().len(), 60);
    for (q, status) in [("", 400), ("domain=nope", 404), ("domain=ops&n=0", 400)] {
        let resp = http
            .get(format!("{}/top?{q}", a.http_url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{q}");
    }
    let (code, out, err) = tokio::task::block_in_place(|| {
        run(&[
            "top",
            "--once",
            "--domain",
            "ops",
            "--addr",
            &a.http_url,
            "--addr",
            &b.http_url,
            "--addr",
            "http://127.0.0.1:9",
        ])
    });
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("7 OVER_LIMIT in the last minute") && out.contains("2 of 3 instance(s)"),
        "{out}"
    );
    assert!(out.contains("no answer from http://127.0.0.1:9"), "{out}");
    let hot = out
        .lines()
        .find(|l| l.starts_with("tenant=hot"))
        .expect(&out);
    assert_eq!(
        hot.split_whitespace().collect::<Vec<_>>(),
        ["tenant=hot", "6", "6"],
        "{out}"
    );
    assert!(!out.contains("tenant=fine"), "{out}");
}
