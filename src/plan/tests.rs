//! The plan's hash tags: a constant first entry does not put every tenant on one hash slot,
//! a level with a counter of its own keeps its descriptor on one.

use super::pipeline::plan;
use crate::config::load::{compile_sources, LoadOptions};
use crate::pb::common::rate_limit_descriptor::Entry;
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;

const TIERS: &str = "\
domain: llm
descriptors:
  - key: tier
    value: free
    descriptors:
      - key: tenant
        hierarchical: true
        rate_limit: {name: tenant, unit: minute, requests_per_unit: 100}
        descriptors:
          - key: model
            rate_limit: {name: model, unit: minute, requests_per_unit: 10}
  - key: tier
    value: pro
    hierarchical: true
    rate_limit: {name: tier, unit: minute, requests_per_unit: 1000}
    descriptors:
      - key: tenant
        rate_limit: {name: tenant, unit: minute, requests_per_unit: 100}
  - key: tenant
    rate_limits:
      - {name: tenant, unit: minute, requests_per_unit: 100}
      - {name: global, unit: minute, requests_per_unit: 5000, shared: true}
  - key: ip
    value: '10.*'
    share_threshold: true
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10}
";

fn tags(descriptors: &[&[(&str, &str)]]) -> Vec<String> {
    let config = compile_sources(&[("t.yaml".into(), TIERS.into())], &LoadOptions::default())
        .expect("config compiles");
    let req = RateLimitRequest {
        domain: "llm".into(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    };
    let plan = plan(&config, &req).expect("plans");
    plan.charges.iter().map(|c| c.tag().to_string()).collect()
}

#[test]
fn a_constant_first_entry_does_not_put_every_tenant_on_one_hash_slot() {
    let a = tags(&[&[("tier", "free"), ("tenant", "a"), ("model", "gpt")]]);
    let b = tags(&[&[("tier", "free"), ("tenant", "b"), ("model", "gpt")]]);
    // Both charges of a descriptor (tenant, model) share the tenant's tag: one script.
    assert_eq!(a, ["llm|tier=free|tenant=a", "llm|tier=free|tenant=a"]);
    assert_eq!(b, ["llm|tier=free|tenant=b", "llm|tier=free|tenant=b"]);
}

#[test]
fn a_counter_owned_by_the_constant_level_keeps_the_descriptor_on_its_slot() {
    // `tier=pro` has a counter of its own (shared by its tenants): atomicity first.
    let t = tags(&[&[("tier", "pro"), ("tenant", "a")]]);
    assert_eq!(t, ["llm|tier=pro", "llm|tier=pro"]);
}

#[test]
fn a_per_value_first_entry_is_the_tag_as_before_and_shared_limits_have_their_own() {
    let t = tags(&[&[("tenant", "a")]]);
    assert_eq!(t, ["llm|tenant=a", "llm|tenant=*|*"]);
}

#[test]
fn a_share_threshold_level_is_a_constant_not_a_per_value_level() {
    let a = tags(&[&[("ip", "10.1.2.3"), ("path", "/x")]]);
    let b = tags(&[&[("ip", "10.9.9.9"), ("path", "/y")]]);
    assert_eq!(a, ["llm|ip=10.*|path=/x"]);
    assert_eq!(b, ["llm|ip=10.*|path=/y"]);
}
