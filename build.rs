//! Compiles the Envoy rate limit protos with `protox` (pure Rust), so building
//! tollgate never needs a system `protoc`. The descriptor set is also written to `OUT_DIR` for
//! `prost-reflect`, which maps the messages to and from proto3 JSON (`src/admin/json.rs`).
//!
//! It joins the decision script's parts (`lua/decide/`, in [`DECIDE_PARTS`]'s order) into the
//! one script Redis loads: `OUT_DIR/tollgate.lua` for the crate, and the same bytes at
//! `target/<profile>/tollgate.lua` for the scripts that load it into Redis themselves.
//!
//! It also names the commit the binary is built from (`TOLLGATE_COMMIT`, read by
//! `src/base/version.rs`): the build environment's `TOLLGATE_COMMIT` when set (the Dockerfile's
//! build argument: its build context has no `.git`), else `git rev-parse` of the checkout, else
//! `unknown`.

use std::path::Path;
use std::process::Command;

/// The decision script's parts, in the order they are joined (`lua/decide/call.lua` says what
/// each holds). Every file of `lua/decide/` is one of them.
const DECIDE_PARTS: &[&str] = &[
    "call",
    "fixed",
    "sliding",
    "window",
    "reservation",
    "direct",
    "build",
    "concurrency",
    "bucket",
    "shares",
    "fair",
    "counter",
    "verdict",
    "settle",
    "general",
    "main",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rustc-env=TOLLGATE_COMMIT={}", commit());
    join_decide_script(Path::new(&std::env::var("OUT_DIR")?))?;
    let files = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        // The xDS config client (`src/config/xds/`): ADS and the rate limit config resource.
        "proto/envoy/service/discovery/v3/discovery.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
        // Concurrency slots for direct callers (`src/serve/slots.rs`).
        "proto/tollgate/slots/v1/slots.proto",
        // Reservations for direct callers (`src/serve/reservations.rs`).
        "proto/tollgate/reservations/v1/reservations.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler
        .include_source_info(true)
        .include_imports(true)
        .open_files(files)?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("rls_descriptors.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}

/// The commit being built (12 hex digits), or `unknown`. Git is asked only where the package
/// root has a `.git`, and the build script runs again when the checked-out commit moves.
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=TOLLGATE_COMMIT");
    if let Some(given) = std::env::var("TOLLGATE_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
    {
        // A full hash (`git rev-parse HEAD`) is shortened as git would; anything else that is
        // not a plain word is refused rather than printed.
        if !given
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            panic!("TOLLGATE_COMMIT={given:?}: letters, digits, '.', '_' and '-' only");
        }
        let hex = given.bytes().all(|b| b.is_ascii_hexdigit());
        return if hex && given.len() > 12 {
            given[..12].to_string()
        } else {
            given
        };
    }
    let git = Path::new(".git");
    if !git.exists() {
        return "unknown".into();
    }
    for moved in ["HEAD", "packed-refs"] {
        println!("cargo:rerun-if-changed=.git/{moved}");
    }
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".into())
}

/// Joins `lua/decide/` into `out/tollgate.lua`, and copies it beside the binaries.
fn join_decide_script(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=lua/decide");
    let mut listed: Vec<String> = DECIDE_PARTS.iter().map(|p| format!("{p}.lua")).collect();
    listed.sort();
    let mut found: Vec<String> = std::fs::read_dir("lua/decide")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".lua"))
        .collect();
    found.sort();
    if found != listed {
        return Err(format!(
            "lua/decide holds {found:?}, build.rs's DECIDE_PARTS joins {listed:?}: list every part once"
        )
        .into());
    }
    let mut lua = String::new();
    for part in DECIDE_PARTS {
        let path = format!("lua/decide/{part}.lua");
        lua.push_str(&std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?);
    }
    write_if_changed(&out.join("tollgate.lua"), &lua)?;
    // OUT_DIR is target/<profile>/build/<package>-<hash>/out.
    if let Some(profile) = out.ancestors().nth(3) {
        write_if_changed(&profile.join("tollgate.lua"), &lua)?;
    }
    Ok(())
}

fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text)?;
    }
    Ok(())
}
