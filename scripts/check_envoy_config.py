"""Checks the Envoy and Istio examples against Envoy's own generated protos (PyPI xds-protos).

This is a schema check, not `envoy --mode validate`: no Envoy binary runs. It does what Envoy's
config loader does before it builds anything:

1. YAML → proto: every file is parsed with protobuf's JSON mapping (unknown fields are errors)
   into the real message: examples/envoy/envoy.yaml into envoy.config.bootstrap.v3.Bootstrap, the
   Istio EnvoyFilter's patch values into HttpFilter and VirtualHost. `typed_config` values (`Any`,
   with "@type") are resolved by importing the xds-protos package of each type URL; a type no
   module defines is reported by name.
2. The protoc-gen-validate rules in Envoy's protos (required fields, string lengths, number and
   duration ranges, defined enums, required oneofs, ...), plus a ban on deprecated fields.
3. What the protos cannot say: the ratelimit filter's domain exists in the tollgate config it
   calls, its cluster exists and speaks HTTP/2, its timeout is explicit and above tollgate's
   Redis deadline, every rate limit action's descriptor reaches a limit of that config, every
   limit of the config is reached by some route, and the kustomization changes only the image.

Usage: check_envoy_config.py REPO_ROOT   (exit status 0 = every check passed)
"""

import importlib
import importlib.util
import os
import pkgutil
import re
import sys

try:
    import yaml

    from google.protobuf import descriptor_pool, json_format, message_factory

    from envoy.config.bootstrap.v3 import bootstrap_pb2
    from envoy.config.core.v3 import config_source_pb2
    from envoy.config.route.v3 import route_components_pb2
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2,
    )
    from validate import validate_pb2
except ImportError as e:  # a missing package is a failure, never a skip
    sys.exit(
        f"error: {e}; run scripts/check-envoy-config.sh (it builds the CI venv with xds-protos)"
    )

TYPE_URL_PREFIX = "type.googleapis.com/"
RATELIMIT_FILTER = "envoy.extensions.filters.http.ratelimit.v3.RateLimit"
RATELIMIT_PER_ROUTE = "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"
HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "envoy.extensions.filters.http.router.v3.Router"
HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# Envoy's default filter timeout and tollgate's default --redis-timeout, in nanoseconds.
ENVOY_DEFAULT_TIMEOUT_NS = 20_000_000
TOLLGATE_REDIS_TIMEOUT_NS = 10_000_000
# tollgate's gRPC health answers for these service names.
HEALTH_SERVICE_NAMES = {"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"}
# Istio's sample: Service "ratelimit" in namespace default, port grpc-port 8081.
ISTIO_RLS_CLUSTER = "outbound|8081||ratelimit.default.svc.cluster.local"
ISTIO_SAMPLE_IMAGES = {"docker.io/envoyproxy/ratelimit", "envoyproxy/ratelimit"}

POOL = descriptor_pool.Default()


class Report:
    def __init__(self):
        self.failures = 0

    def step(self, title):
        print(f"\n== {title}")

    def ok(self, what):
        print(f"   ok   {what}")

    def bad(self, what):
        print(f"   FAIL {what}")
        self.failures += 1

    def check(self, cond, what, why=""):
        if cond:
            self.ok(what)
        else:
            self.bad(f"{what}{': ' + why if why else ''}")
        return cond


# ------------------------------------------------------------------------------------ YAML


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _strict_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=StrictLoader)


# ------------------------------------------------------------------ type URLs and parsing


def type_urls(value):
    """Every "@type" in a YAML tree."""
    if isinstance(value, dict):
        if isinstance(value.get("@type"), str):
            yield value["@type"]
        for v in value.values():
            yield from type_urls(v)
    elif isinstance(value, list):
        for v in value:
            yield from type_urls(v)


def resolve_type(full_name):
    """Makes the message full_name known to the default pool by importing every *_pb2 module of
    the xds-protos package its proto package maps to (envoy.a.v3.Foo → envoy/a/v3/*_pb2.py).
    Returns the descriptor, or None when no module defines it."""
    try:
        return POOL.FindMessageTypeByName(full_name)
    except KeyError:
        pass
    parts = full_name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # nested messages: drop names until a package
        package = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for mod in pkgutil.iter_modules(spec.submodule_search_locations):
            if mod.name.endswith("_pb2"):
                importlib.import_module(f"{package}.{mod.name}")
        try:
            return POOL.FindMessageTypeByName(full_name)
        except KeyError:
            return None
    return None


def message_class(full_name):
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def parse(report, doc, message_cls, label):
    """YAML tree → message, as Envoy's loader does (unknown fields and types are errors)."""
    unknown = []
    for url in sorted(set(type_urls(doc))):
        if not url.startswith(TYPE_URL_PREFIX):
            unknown.append(f"{url} (type URLs start with {TYPE_URL_PREFIX})")
        elif resolve_type(url[len(TYPE_URL_PREFIX) :]) is None:
            unknown.append(f"{url} (no message of that name in xds-protos)")
    if unknown:
        for u in unknown:
            report.bad(f"{label}: unknown type {u}")
        return None
    msg = message_cls()
    try:
        json_format.ParseDict(doc, msg, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        report.bad(f"{label} does not parse into {msg.DESCRIPTOR.full_name}: {e}")
        return None
    report.ok(f"{label} parses into {msg.DESCRIPTOR.full_name}")
    return msg


def unpack(any_msg):
    """Any → the concrete message (its type was resolved by parse)."""
    cls = message_class(any_msg.type_url[len(TYPE_URL_PREFIX) :])
    inner = cls()
    inner.ParseFromString(any_msg.value)
    return inner


# ------------------------------------------------------- protoc-gen-validate rules + deprecation

WRAPPERS = {
    f"google.protobuf.{n}Value"
    for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
HEADER_NAME_STRICT = re.compile(r"^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$")
HEADER_VALUE_STRICT = re.compile(r"^[^\x00-\x08\x0a-\x1f\x7f]*$")
HEADER_LOOSE = re.compile(r"^[^\x00\x0a\x0d]*$")


def duration_ns(d):
    return d.seconds * 1_000_000_000 + d.nanos


def has(rules, name):
    return name in rules.DESCRIPTOR.fields_by_name and rules.HasField(name)


def in_range(v, r, conv=lambda x: x):
    """PGV's const/lt/lte/gt/gte/in/not_in; a lower bound above the upper one means 'outside'."""
    if has(r, "const") and v != conv(r.const):
        return f"must equal {conv(r.const)}"
    lo = hi = None
    if has(r, "gt"):
        lo = (conv(r.gt), lambda x, b: x > b, ">")
    elif has(r, "gte"):
        lo = (conv(r.gte), lambda x, b: x >= b, ">=")
    if has(r, "lt"):
        hi = (conv(r.lt), lambda x, b: x < b, "<")
    elif has(r, "lte"):
        hi = (conv(r.lte), lambda x, b: x <= b, "<=")
    if lo and hi and hi[0] < lo[0]:
        if not (lo[1](v, lo[0]) or hi[1](v, hi[0])):
            return f"must be {lo[2]} {lo[0]} or {hi[2]} {hi[0]}"
    else:
        for bound in (lo, hi):
            if bound and not bound[1](v, bound[0]):
                return f"must be {bound[2]} {bound[0]}"
    allowed = [conv(x) for x in getattr(r, "in", [])]
    if allowed and v not in allowed:
        return f"must be one of {allowed}"
    if v in [conv(x) for x in getattr(r, "not_in", [])]:
        return "is a forbidden value"
    return None


def check_string(v, r):
    if r.ignore_empty and v == "":
        return None
    b = v.encode()
    checks = [
        (r.HasField("const") and v != r.const, f"must equal {r.const!r}"),
        (r.HasField("len") and len(v) != r.len, f"must have {r.len} characters"),
        (
            r.HasField("min_len") and len(v) < r.min_len,
            f"must have at least {r.min_len} characters",
        ),
        (r.HasField("max_len") and len(v) > r.max_len, f"must have at most {r.max_len} characters"),
        (r.HasField("len_bytes") and len(b) != r.len_bytes, f"must have {r.len_bytes} bytes"),
        (
            r.HasField("min_bytes") and len(b) < r.min_bytes,
            f"must have at least {r.min_bytes} bytes",
        ),
        (
            r.HasField("max_bytes") and len(b) > r.max_bytes,
            f"must have at most {r.max_bytes} bytes",
        ),
        (r.HasField("pattern") and not re.search(r.pattern, v), f"must match /{r.pattern}/"),
        (r.HasField("prefix") and not v.startswith(r.prefix), f"must start with {r.prefix!r}"),
        (r.HasField("suffix") and not v.endswith(r.suffix), f"must end with {r.suffix!r}"),
        (r.HasField("contains") and r.contains not in v, f"must contain {r.contains!r}"),
        (
            r.HasField("not_contains") and r.not_contains in v,
            f"must not contain {r.not_contains!r}",
        ),
        (
            len(getattr(r, "in")) > 0 and v not in getattr(r, "in"),
            f"must be one of {list(getattr(r, 'in'))}",
        ),
        (v in r.not_in, "is a forbidden value"),
    ]
    if r.WhichOneof("well_known") == "well_known_regex":
        strict = not r.HasField("strict") or r.strict
        if r.well_known_regex == validate_pb2.HTTP_HEADER_NAME:
            pat = HEADER_NAME_STRICT if strict else HEADER_LOOSE
            checks.append((not pat.match(v), "is not a valid HTTP header name"))
        elif r.well_known_regex == validate_pb2.HTTP_HEADER_VALUE:
            pat = HEADER_VALUE_STRICT if strict else HEADER_LOOSE
            checks.append((not pat.match(v), "is not a valid HTTP header value"))
    for failed, why in checks:
        if failed:
            return why
    return None


def check_scalar(v, rules, field):
    kind = rules.WhichOneof("type")
    if kind is None:
        return None
    r = getattr(rules, kind)
    if kind == "string":
        return check_string(v, r)
    if kind == "bytes":
        if r.HasField("min_len") and len(v) < r.min_len:
            return f"must have at least {r.min_len} bytes"
        if r.HasField("max_len") and len(v) > r.max_len:
            return f"must have at most {r.max_len} bytes"
        return None
    if kind == "bool":
        return f"must be {r.const}" if r.HasField("const") and v != r.const else None
    if kind == "enum":
        if r.defined_only and field.enum_type.values_by_number.get(v) is None:
            return f"{v} is not a value of {field.enum_type.full_name}"
        return in_range(v, r)
    # Numbers: int32, uint64, double, fixed32, ...
    if getattr(r, "ignore_empty", False) and v == 0:
        return None
    return in_range(v, r)


def validate(msg, path, problems=None):
    """Applies the protoc-gen-validate rules of msg's descriptor (recursively, through Any) and
    refuses deprecated fields. Returns the list of problems as 'path: why'."""
    problems = [] if problems is None else problems
    desc = msg.DESCRIPTOR
    mopts = desc.GetOptions()
    if mopts.Extensions[validate_pb2.disabled] or mopts.Extensions[validate_pb2.ignored]:
        return problems
    for oneof in desc.oneofs:
        if (
            oneof.GetOptions().Extensions[validate_pb2.required]
            and msg.WhichOneof(oneof.name) is None
        ):
            problems.append(f"{path}: one of {[f.name for f in oneof.fields]} is required")
    for field in desc.fields:
        fpath = f"{path}.{field.name}"
        if field.containing_oneof and msg.WhichOneof(field.containing_oneof.name) != field.name:
            continue
        fopts = field.GetOptions()
        rules = (
            fopts.Extensions[validate_pb2.rules] if fopts.HasExtension(validate_pb2.rules) else None
        )
        value = getattr(msg, field.name)
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        is_repeated = field.is_repeated
        present = (
            (len(value) > 0)
            if is_repeated
            else (msg.HasField(field.name) if field.has_presence else value != field.default_value)
        )
        if fopts.deprecated and present:
            problems.append(
                f"{fpath}: deprecated field (Envoy warns or refuses it; use its replacement)"
            )
        if is_map:
            r = rules.map if rules is not None and rules.WhichOneof("type") == "map" else None
            if r is not None and not (r.ignore_empty and len(value) == 0):
                if r.HasField("min_pairs") and len(value) < r.min_pairs:
                    problems.append(f"{fpath}: needs at least {r.min_pairs} entries")
                if r.HasField("max_pairs") and len(value) > r.max_pairs:
                    problems.append(f"{fpath}: allows at most {r.max_pairs} entries")
            vfield = field.message_type.fields_by_name["value"]
            value_rules = r.values if r is not None and r.HasField("values") else None
            for k in value:
                v = value[k]
                if vfield.message_type is not None:
                    validate_message_value(v, f"{fpath}[{k!r}]", value_rules, problems)
                elif value_rules is not None:
                    why = check_scalar(v, value_rules, vfield)
                    if why:
                        problems.append(f"{fpath}[{k!r}]: {why}")
        elif is_repeated:
            r = (
                rules.repeated
                if rules is not None and rules.WhichOneof("type") == "repeated"
                else None
            )
            if r is not None and not (r.ignore_empty and len(value) == 0):
                if r.HasField("min_items") and len(value) < r.min_items:
                    problems.append(f"{fpath}: needs at least {r.min_items} items")
                if r.HasField("max_items") and len(value) > r.max_items:
                    problems.append(f"{fpath}: allows at most {r.max_items} items")
            item_rules = r.items if r is not None and r.HasField("items") else None
            for i, v in enumerate(value):
                if field.message_type is not None:
                    validate_message_value(v, f"{fpath}[{i}]", item_rules, problems)
                elif item_rules is not None:
                    why = check_scalar(v, item_rules, field)
                    if why:
                        problems.append(f"{fpath}[{i}]: {why}")
        elif field.message_type is not None:
            if (
                rules is not None
                and rules.WhichOneof("type") == "message"
                and rules.message.required
                and not present
            ):
                problems.append(f"{fpath}: required")
            if rules is not None:
                kind = rules.WhichOneof("type")
                if (
                    kind in ("duration", "any", "timestamp")
                    and getattr(rules, kind).required
                    and not present
                ):
                    problems.append(f"{fpath}: required")
            if present:
                validate_message_value(value, fpath, rules, problems)
        elif rules is not None and (present or not field.has_presence):
            why = check_scalar(value, rules, field)
            if why:
                problems.append(f"{fpath}: {why!s} (is {value!r})")
    return problems


def validate_message_value(value, path, rules, problems):
    """A set message field: its own field rules (duration, any, wrappers), then its contents."""
    name = value.DESCRIPTOR.full_name
    kind = rules.WhichOneof("type") if rules is not None else None
    if name == "google.protobuf.Duration":
        if kind == "duration":
            r = rules.duration
            why = in_range(duration_ns(value), r, duration_ns)
            if why:
                problems.append(f"{path}: duration {why} ns (is {duration_ns(value)} ns)")
        return
    if name == "google.protobuf.Any":
        if kind == "any":
            allowed = list(getattr(rules.any, "in"))
            if allowed and value.type_url not in allowed:
                problems.append(f"{path}: type must be one of {allowed}")
        validate(unpack(value), f"{path}<{value.type_url[len(TYPE_URL_PREFIX) :]}>", problems)
        return
    if name in WRAPPERS:
        if kind is not None and kind not in ("message",):
            why = check_scalar(value.value, rules, value.DESCRIPTOR.fields_by_name["value"])
            if why:
                problems.append(f"{path}: {why} (is {value.value!r})")
        return
    if name in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.Timestamp"):
        return
    if kind == "message" and rules.message.skip:
        return
    validate(value, path, problems)


def report_validation(report, msg, label):
    problems = validate(msg, label)
    for p in problems:
        report.bad(p)
    if not problems:
        report.ok(f"{label}: Envoy's validation rules hold, no deprecated field is used")
    return not problems


# ------------------------------------------------- rate limit actions → tollgate descriptors


def action_entry(action):
    """One rate limit action → (descriptor key, fixed value or None for "whatever the request
    carries"), as Envoy builds the descriptor entry; None for actions whose key cannot be known."""
    kind = action.WhichOneof("action_specifier")
    a = getattr(action, kind)
    if kind == "remote_address":
        return ("remote_address", None)
    if kind == "masked_remote_address":
        return ("masked_remote_address", None)
    if kind == "source_cluster":
        return ("source_cluster", None)
    if kind == "destination_cluster":
        return ("destination_cluster", None)
    if kind in ("request_headers", "query_parameters", "metadata"):
        return (a.descriptor_key, None)
    if kind == "generic_key":
        return (a.descriptor_key or "generic_key", a.descriptor_value)
    if kind == "header_value_match":
        return (a.descriptor_key or "header_match", a.descriptor_value)
    if kind == "query_parameter_value_match":
        return (a.descriptor_key or "query_match", a.descriptor_value)
    return None


def rule_has_limit(rule):
    return "rate_limit" in rule or "rate_limits" in rule


def value_matches(rule_value, value):
    if rule_value.endswith("*"):
        return value.startswith(rule_value[:-1])
    return rule_value == value


def reaches_limit(rules, entries):
    """Can a descriptor with these entries reach a limit of the tollgate config? At each level a
    fixed value takes the rule tollgate would pick (exact, then the first "prefix*", then the
    key-only rule); a request-dependent value may take any rule of its key. A limit applies only
    at the descriptor's exact depth."""
    (key, value), rest = entries[0], entries[1:]
    same_key = [r for r in rules if r.get("key") == key]
    if value is not None:
        exact = [r for r in same_key if "value" in r and str(r["value"]) == value]
        wild = [
            r
            for r in same_key
            if "value" in r
            and str(r["value"]).endswith("*")
            and value_matches(str(r["value"]), value)
        ]
        bare = [r for r in same_key if "value" not in r]
        candidates = (exact or wild or bare)[:1]
    else:
        candidates = same_key
    for r in candidates:
        if not rest and rule_has_limit(r):
            return True
        if rest and reaches_limit(r.get("descriptors") or [], rest):
            return True
    return False


def limited_paths(rules, prefix=()):
    """Every rule path of the config that carries a limit: ((key, value or None), ...)."""
    for r in rules:
        path = prefix + ((r["key"], str(r["value"]) if "value" in r else None),)
        if rule_has_limit(r):
            yield path
        yield from limited_paths(r.get("descriptors") or [], path)


def covers(entries, path):
    """Does a descriptor with these entries match the config path (same keys, values allowed)?"""
    if len(entries) != len(path):
        return False
    for (k, v), (pk, pv) in zip(entries, path, strict=True):
        if k != pk or (v is not None and pv is not None and not value_matches(pv, v)):
            return False
    return True


def fmt_entries(entries):
    return ", ".join(f"{k}={v if v is not None else '<request>'}" for k, v in entries)


def check_rate_limits(report, where, rate_limits, config, stage, produced):
    """Each rate limit entry (one descriptor) reaches a limit of the config."""
    for i, rl in enumerate(rate_limits):
        label = f"{where}.rate_limits[{i}]"
        entry_stage = rl.stage.value if rl.HasField("stage") else 0
        if entry_stage != stage:
            report.bad(
                f"{label}: stage {entry_stage} differs from the filter's {stage}: never sent"
            )
            continue
        entries = [action_entry(a) for a in rl.actions]
        if any(e is None for e in entries):
            report.bad(f"{label}: an action whose descriptor key cannot be checked")
            continue
        produced.append(entries)
        report.check(
            reaches_limit(config["descriptors"], entries),
            f"{label}: ({fmt_entries(entries)}) reaches a limit of domain {config['domain']}",
            "no rule path of the config limits these keys at this depth",
        )


def check_coverage(report, config, produced, label):
    for path in limited_paths(config["descriptors"]):
        report.check(
            any(covers(e, path) for e in produced),
            f"{label}: the limit at ({fmt_entries(path).replace('<request>', '*')}) is produced"
            " by some route",
            "no rate limit action produces this descriptor",
        )


# --------------------------------------------------------------------- examples/envoy/envoy.yaml


def find_filters(hcm, type_name):
    return [
        f
        for f in hcm.http_filters
        if f.HasField("typed_config") and f.typed_config.type_url == TYPE_URL_PREFIX + type_name
    ]


def check_ratelimit_filter(report, label, rl, raw, domain):
    report.check(
        rl.domain == domain, f"{label}: domain {rl.domain!r} is the config's domain {domain!r}"
    )
    report.check(
        rl.HasField("timeout"),
        f"{label}: timeout set explicitly",
        "Envoy's default (20 ms) applies silently; spell it out next to tollgate's --redis-timeout",
    )
    t = duration_ns(rl.timeout) if rl.HasField("timeout") else ENVOY_DEFAULT_TIMEOUT_NS
    report.check(
        TOLLGATE_REDIS_TIMEOUT_NS < t <= ENVOY_DEFAULT_TIMEOUT_NS,
        f"{label}: timeout {t / 1e6:g} ms is above tollgate's Redis deadline (10 ms)"
        " and at most 20 ms",
    )
    report.check("failure_mode_deny" in raw, f"{label}: failure_mode_deny set explicitly")
    svc = rl.rate_limit_service
    report.check(
        svc.transport_api_version == config_source_pb2.V3,
        f"{label}: rate_limit_service.transport_api_version V3",
    )
    report.check(
        svc.grpc_service.HasField("envoy_grpc"), f"{label}: rate_limit_service uses envoy_grpc"
    )
    return svc.grpc_service.envoy_grpc.cluster_name


def check_envoy(report, root, config):
    path = os.path.join(root, "examples/envoy/envoy.yaml")
    rel = os.path.relpath(path, root)
    report.step(f"{rel} → envoy.config.bootstrap.v3.Bootstrap")
    raw = load_yaml(path)
    bootstrap = parse(report, raw, bootstrap_pb2.Bootstrap, rel)
    if bootstrap is None:
        return
    report_validation(report, bootstrap, "Bootstrap")

    report.step(f"{rel}: what Envoy checks later and tollgate needs")
    addr = bootstrap.admin.address.socket_address
    report.check((addr.address, addr.port_value) == ("127.0.0.1", 9901), "admin on 127.0.0.1:9901")
    clusters = {c.name: c for c in bootstrap.static_resources.clusters}
    raw_listeners = raw["static_resources"]["listeners"]
    hcms = []
    for li, listener in enumerate(bootstrap.static_resources.listeners):
        for ci, chain in enumerate(listener.filter_chains):
            for fi, f in enumerate(chain.filters):
                if f.typed_config.type_url == TYPE_URL_PREFIX + HCM:
                    raw_hcm = raw_listeners[li]["filter_chains"][ci]["filters"][fi]["typed_config"]
                    hcms.append((listener, unpack(f.typed_config), raw_hcm))
    if not report.check(len(hcms) == 1, "one HTTP connection manager", f"found {len(hcms)}"):
        return
    listener, hcm, raw_hcm = hcms[0]
    sa = listener.address.socket_address
    report.check((sa.address, sa.port_value) == ("0.0.0.0", 10000), "listener on 0.0.0.0:10000")

    names = [f.name for f in hcm.http_filters]
    rl_filters = find_filters(hcm, RATELIMIT_FILTER)
    if not report.check(
        len(rl_filters) == 1, "one envoy.filters.http.ratelimit filter", f"filters: {names}"
    ):
        return
    report.check(
        bool(find_filters(hcm, ROUTER))
        and hcm.http_filters[-1].typed_config.type_url == TYPE_URL_PREFIX + ROUTER,
        "the router is the last HTTP filter",
        f"filters: {names}",
    )
    rl_index = list(hcm.http_filters).index(rl_filters[0])
    raw_rl = raw_hcm["http_filters"][rl_index]["typed_config"]
    rl = unpack(rl_filters[0].typed_config)
    cluster_name = check_ratelimit_filter(report, "ratelimit filter", rl, raw_rl, config["domain"])
    report.check(
        rl.enable_x_ratelimit_headers == rl.DRAFT_VERSION_03,
        "enable_x_ratelimit_headers DRAFT_VERSION_03",
    )

    report.step(f"{rel}: cluster {cluster_name!r}")
    cluster = clusters.get(cluster_name)
    if report.check(
        cluster is not None,
        f"the ratelimit filter's cluster {cluster_name!r} exists",
        f"clusters: {sorted(clusters)}",
    ):
        opts = cluster.typed_extension_protocol_options.get(HTTP_PROTOCOL_OPTIONS)
        h2 = False
        if opts is not None:
            po = unpack(opts)
            h2 = po.HasField("explicit_http_config") and po.explicit_http_config.HasField(
                "http2_protocol_options"
            )
        report.check(
            h2,
            f"{cluster_name} speaks HTTP/2"
            " (HttpProtocolOptions.explicit_http_config.http2_protocol_options)",
            "gRPC needs HTTP/2 and an Envoy cluster defaults to HTTP/1.1",
        )
        report.check(cluster.HasField("connect_timeout"), f"{cluster_name} sets connect_timeout")
        hcs = [hc for hc in cluster.health_checks if hc.HasField("grpc_health_check")]
        for hc in hcs:
            report.check(
                hc.grpc_health_check.service_name in HEALTH_SERVICE_NAMES,
                f"{cluster_name} gRPC health check service"
                f" {hc.grpc_health_check.service_name!r} is one tollgate answers",
            )
        eps = [
            lb.endpoint.address.socket_address
            for e in cluster.load_assignment.endpoints
            for lb in e.lb_endpoints
        ]
        report.check(
            bool(eps) and all(a.port_value == 8081 for a in eps),
            f"{cluster_name} endpoints on tollgate's gRPC port 8081",
            f"{[(a.address, a.port_value) for a in eps]}",
        )

    report.step(f"{rel}: routes and rate limit actions against examples/ratelimit.yaml")
    produced = []
    for vh in hcm.route_config.virtual_hosts:
        check_rate_limits(
            report, f"virtual_hosts[{vh.name}]", vh.rate_limits, config, rl.stage, produced
        )
        vh_entries = [tuple(action_entry(a) for a in r.actions) for r in vh.rate_limits]
        for ri, route in enumerate(vh.routes):
            match = route.match.prefix or route.match.path or "match"
            where = f"virtual_hosts[{vh.name}].routes[{ri}] ({match})"
            if route.HasField("route") and route.route.WhichOneof("cluster_specifier") == "cluster":
                report.check(
                    route.route.cluster in clusters,
                    f"{where}: cluster {route.route.cluster!r} exists",
                )
            own = list(route.route.rate_limits) if route.HasField("route") else []
            check_rate_limits(report, where, own, config, rl.stage, produced)
            per_route = route.typed_per_filter_config.get("envoy.filters.http.ratelimit")
            option = "OVERRIDE"
            if per_route is not None:
                pr = unpack(per_route)
                report.check(
                    per_route.type_url == TYPE_URL_PREFIX + RATELIMIT_PER_ROUTE,
                    f"{where}: per-route ratelimit config is RateLimitPerRoute",
                )
                option = pr.VhRateLimitsOptions.Name(pr.vh_rate_limits)
                report.check(
                    not pr.domain or pr.domain == config["domain"],
                    f"{where}: per-route domain is {config['domain']!r}",
                )
            sent = [tuple(action_entry(a) for a in r.actions) for r in own]
            if option == "INCLUDE" or (option == "OVERRIDE" and not own):
                sent += vh_entries
            dupes = {s for s in sent if sent.count(s) > 1}
            report.check(
                not dupes,
                f"{where}: sends {len(sent)} descriptors ({option}), none twice",
                f"{[fmt_entries(d) for d in dupes]} would be charged twice",
            )
    check_coverage(report, config, produced, "examples/ratelimit.yaml")


# ---------------------------------------------------------------------------- deploy/istio


def check_istio(report, root):
    base = os.path.join(root, "deploy/istio")
    report.step("deploy/istio/ratelimit-config.yaml (ConfigMap ratelimit-config)")
    cm = load_yaml(os.path.join(base, "ratelimit-config.yaml"))
    ok = report.check(
        cm.get("kind") == "ConfigMap" and cm.get("metadata", {}).get("name") == "ratelimit-config",
        "ConfigMap named ratelimit-config (the name Istio's sample mounts)",
    )
    data = cm.get("data") or {}
    ok &= report.check(
        list(data) == ["config.yaml"], "one file, config.yaml", f"files: {list(data)}"
    )
    if not ok:
        return
    config = yaml.load(data["config.yaml"], Loader=StrictLoader)
    report.check(
        config.get("domain") == "ratelimit", "domain ratelimit", f"domain {config.get('domain')!r}"
    )

    report.step("deploy/istio/envoyfilter.yaml")
    ef = load_yaml(os.path.join(base, "envoyfilter.yaml"))
    report.check(
        ef.get("apiVersion") == "networking.istio.io/v1alpha3" and ef.get("kind") == "EnvoyFilter",
        "kind EnvoyFilter, networking.istio.io/v1alpha3",
    )
    report.check(
        ef["metadata"].get("namespace") == "istio-system"
        and ef["spec"].get("workloadSelector", {}).get("labels") == {"istio": "ingressgateway"},
        "applies to the ingress gateway (istio-system, istio: ingressgateway)",
    )
    patches = ef["spec"]["configPatches"]
    filter_patches = [p for p in patches if p["applyTo"] == "HTTP_FILTER"]
    vhost_patches = [p for p in patches if p["applyTo"] == "VIRTUAL_HOST"]
    report.check(
        len(filter_patches) == 1 and len(vhost_patches) == 1 and len(patches) == 2,
        "one HTTP_FILTER and one VIRTUAL_HOST patch",
        f"{[p['applyTo'] for p in patches]}",
    )
    produced = []
    for p in filter_patches:
        m = p["match"]
        report.check(m.get("context") == "GATEWAY", "HTTP_FILTER patch: context GATEWAY")
        fmatch = m.get("listener", {}).get("filterChain", {}).get("filter", {})
        report.check(
            fmatch.get("name") == "envoy.filters.network.http_connection_manager"
            and fmatch.get("subFilter", {}).get("name") == "envoy.filters.http.router"
            and p["patch"]["operation"] == "INSERT_BEFORE",
            "HTTP_FILTER patch: INSERT_BEFORE the router in the HTTP connection manager",
        )
        hf = parse(
            report,
            p["patch"]["value"],
            http_connection_manager_pb2.HttpFilter,
            "HTTP_FILTER patch value",
        )
        if hf is None:
            continue
        report_validation(report, hf, "HttpFilter")
        if not report.check(
            hf.typed_config.type_url == TYPE_URL_PREFIX + RATELIMIT_FILTER,
            "HTTP_FILTER patch: typed_config is the ratelimit filter",
        ):
            continue
        rl = unpack(hf.typed_config)
        cluster = check_ratelimit_filter(
            report,
            "Istio ratelimit filter",
            rl,
            p["patch"]["value"]["typed_config"],
            config["domain"],
        )
        report.check(
            cluster == ISTIO_RLS_CLUSTER,
            f"cluster {cluster!r} is Istio's for the sample's Service",
            f"want {ISTIO_RLS_CLUSTER} (Service ratelimit, namespace default, grpc-port 8081)",
        )
        for p2 in vhost_patches:
            report.check(
                p2["match"].get("context") == "GATEWAY" and p2["patch"]["operation"] == "MERGE",
                "VIRTUAL_HOST patch: MERGE in context GATEWAY",
            )
            vh = parse(
                report,
                p2["patch"]["value"],
                route_components_pb2.VirtualHost,
                "VIRTUAL_HOST patch value",
            )
            if vh is None:
                continue
            # A MERGE value is a fragment (no name, no domains): validate its rate limits only.
            problems = []
            for i, r in enumerate(vh.rate_limits):
                validate(r, f"VirtualHost.rate_limits[{i}]", problems)
            for pr in problems:
                report.bad(pr)
            if not problems:
                report.ok("VirtualHost.rate_limits: Envoy's validation rules hold")
            check_rate_limits(
                report, "VIRTUAL_HOST patch", vh.rate_limits, config, rl.stage, produced
            )
    check_coverage(report, config, produced, "ratelimit-config")

    report.step("deploy/istio/kustomization.yaml changes only the ratelimit image")
    k = load_yaml(os.path.join(base, "kustomization.yaml"))
    report.check(
        set(k) == {"apiVersion", "kind", "resources", "images"},
        "only resources and images (no patches, no name or namespace changes)",
        f"keys {sorted(k)}",
    )
    report.check(k.get("kind") == "Kustomization", "kind Kustomization")
    report.check(
        k.get("resources") == ["rate-limit-service.yaml"],
        "the one resource is Istio's rate-limit-service.yaml",
        f"resources {k.get('resources')}",
    )
    images = k.get("images") or []
    report.check(
        bool(images) and {i.get("name") for i in images} <= ISTIO_SAMPLE_IMAGES,
        "images: only the sample's envoyproxy/ratelimit is replaced",
        f"{images}",
    )
    targets = {(i.get("newName"), str(i.get("newTag"))) for i in images}
    report.check(
        len(targets) == 1 and all(set(i) == {"name", "newName", "newTag"} for i in images),
        f"every entry swaps to the same image {sorted(targets)}",
    )
    readme = open(os.path.join(base, "README.md"), encoding="utf-8").read()
    name, tag = sorted(targets)[0] if targets else (None, None)
    line = re.compile(rf"^ +image: {re.escape(f'{name}:{tag}')}$", re.M)
    report.check(
        bool(line.search(readme)), f"README's one changed line names the same image {name}:{tag}"
    )


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    sys.stdout.reconfigure(line_buffering=True)  # keeps the order of ok/FAIL lines and errors
    report = Report()
    import google.protobuf

    print(
        f"xds-protos with protobuf {google.protobuf.__version__} "
        "(a schema check with Envoy's generated protos, not `envoy --mode validate`)"
    )
    try:
        config = load_yaml(os.path.join(root, "examples/ratelimit.yaml"))
        check_envoy(report, root, config)
        check_istio(report, root)
    except (OSError, yaml.YAMLError) as e:
        report.bad(f"cannot read: {e}")
    print()
    if report.failures:
        print(f"check-envoy-config: {report.failures} check(s) FAILED", file=sys.stderr)
        return 1
    print("check-envoy-config: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
