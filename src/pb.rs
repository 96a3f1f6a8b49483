//! Generated protobuf and gRPC code for Envoy's rate limit service and the xDS config client
//! (see `build.rs`).
#![allow(clippy::all, missing_docs)]

pub mod tollgate {
    pub mod slots {
        pub mod v1 {
            tonic::include_proto!("tollgate.slots.v1");
        }
    }
    pub mod reservations {
        pub mod v1 {
            tonic::include_proto!("tollgate.reservations.v1");
        }
    }
}

pub mod envoy {
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
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

pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

/// `envoy.config.core.v3`: header values, the xDS node.
pub use envoy::config::core::v3 as core;
/// `envoy.extensions.common.ratelimit.v3`: descriptors.
pub use envoy::extensions::common::ratelimit::v3 as common;
/// `envoy.service.discovery.v3`: the aggregated discovery service (state of the world).
pub use envoy::service::discovery::v3 as ads;
/// `envoy.service.ratelimit.v3`: request, response, service.
pub use envoy::service::ratelimit::v3 as rls;
/// `ratelimit.config.ratelimit.v3`: the rate limit config resource served over xDS.
pub use ratelimit::config::ratelimit::v3 as rls_conf;
