//! Generated protobuf and gRPC code for Envoy's rate limit service (see `build.rs`).
#![allow(clippy::all, missing_docs)]

pub mod envoy {
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}

/// `envoy.config.core.v3`: header values.
pub use envoy::config::core::v3 as core;
/// `envoy.extensions.common.ratelimit.v3`: descriptors.
pub use envoy::extensions::common::ratelimit::v3 as common;
/// `envoy.service.ratelimit.v3`: request, response, service.
pub use envoy::service::ratelimit::v3 as rls;
