//! Compiles the Envoy rate limit protos with `protox` (pure Rust), so building
//! tollgate never needs a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
