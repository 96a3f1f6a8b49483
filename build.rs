//! Compiles the Envoy rate limit protos with `protox` (pure Rust), so building
//! tollgate never needs a system `protoc`. The descriptor set is also written to `OUT_DIR` for
//! `prost-reflect`, which maps the messages to and from proto3 JSON (`src/admin/json.rs`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
