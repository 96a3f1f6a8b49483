"""Checks what a real Envoy cannot: that the Envoy and Istio configs we ship and the tollgate
configs they call fit together.

Envoy itself loads and runs these files in the tests (tests/envoy/shipped.rs: `envoy --mode
validate`, then every route through a real Envoy in front of tollgate), so the schema, the
filter and cluster wiring and the answers are checked there. Envoy accepts a rate limit action
whose descriptor no limit matches (the request is simply never limited), and a limit no route
ever sends; it also accepts a `hits_addend` written where it never sends one. Here, from the
YAML alone:

1. every descriptor a route sends (virtual host, route and per-route filter lists, with
   `vh_rate_limits` applied) reaches a limit of the config of its domain (the filter's, or the
   route's `RateLimitPerRoute.domain`), and no route sends one twice in one call; every limit of
   `examples/ratelimit.yaml` is sent by some route, and every concurrency limit of
   `examples/llm-gateway.yaml` (its token budgets are the token pattern's, docs/configuration.md);
   a slot release (last entry `tollgate.release`) is sent when the stream is done, repeats a
   request-time descriptor that reaches a concurrency limit, and reads the slot id from the
   ratelimit filter's dynamic metadata with no `default_value` and no `skip_if_absent` (either
   would send a descriptor without an id, which takes a slot); a reservation (last entry
   `tollgate.reserve`) marks an estimate carrying a `hits_addend` or its fallback, always sent
   beside it, and a settle (last entry `tollgate.settle`) is sent when the stream is done with
   a `hits_addend` (the use), repeats a reserving descriptor, and reads the reservation id from
   the ratelimit filter's dynamic metadata with no `default_value` and no `skip_if_absent`;
2. no `hits_addend` sits in a route's or virtual host's own `rate_limits` (Envoy 1.40 drops it:
   a cost goes in `RateLimitPerRoute.rate_limits`);
3. the filter's domain is the config's, and its timeout is explicit, above tollgate's default
   Redis deadline (10 ms) and at most Envoy's default (20 ms);
4. Istio: the ConfigMap's shape and domain, the filter's cluster is Istio's name for the sample's
   Service, and the kustomization changes nothing but the image (and the README says which).

Usage: check_envoy_config.py REPO_ROOT   (exit status 0 = every check passed)
"""

import os
import re
import sys

try:
    import yaml
except ImportError as e:  # a missing package is a failure, never a skip
    sys.exit(f"error: {e}; run scripts/check-envoy-config.sh (it builds the CI venv)")

RATELIMIT_FILTER = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
RATELIMIT_PER_ROUTE_KEY = "envoy.filters.http.ratelimit"
HCM = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager"
)
# tollgate's default --redis-timeout and Envoy's default filter timeout, in milliseconds.
TOLLGATE_REDIS_TIMEOUT_MS = 10
ENVOY_DEFAULT_TIMEOUT_MS = 20
# Istio's sample: Service "ratelimit" in namespace default, port grpc-port 8081.
ISTIO_RLS_CLUSTER = "outbound|8081||ratelimit.default.svc.cluster.local"
ISTIO_SAMPLE_IMAGES = {"docker.io/envoyproxy/ratelimit", "envoyproxy/ratelimit"}
# The tollgate configs examples/envoy/envoy.yaml calls, by domain.
ENVOY_EXAMPLE_CONFIGS = ["examples/ratelimit.yaml", "examples/llm-gateway.yaml"]
# A slot release: the descriptor entry tollgate reads, and where Envoy keeps tollgate's answer.
RELEASE_KEY = "tollgate.release"
SLOT_METADATA = {"key": "envoy.filters.http.ratelimit", "path": [{"key": "tollgate.slot"}]}
# A reservation and its settle: the entries tollgate reads, and where Envoy keeps the id.
RESERVE_KEY = "tollgate.reserve"
SETTLE_KEY = "tollgate.settle"
RESERVATION_METADATA = {"key": "envoy.filters.http.ratelimit",
                        "path": [{"key": "tollgate.reservation"}]}


class Report:
    def __init__(self):
        self.failures = 0

    def step(self, title):
        print(f"\n== {title}")

    def check(self, cond, what, why=""):
        if cond:
            print(f"   ok   {what}")
        else:
            print(f"   FAIL {what}" + (f": {why}" if why else ""))
            self.failures += 1
        return cond


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def walk(value):
    """Every mapping inside `value`, depth first."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


# ------------------------------------------------- rate limit actions → tollgate descriptors


def action_entry(action):
    """One rate limit action → (descriptor key, fixed value or None for "whatever the request
    carries"), as Envoy builds the descriptor entry; None for an action this check cannot read."""
    [(kind, a)] = action.items()
    a = a or {}
    if kind in ("remote_address", "masked_remote_address", "source_cluster",
                "destination_cluster"):
        return (kind, None)
    if kind in ("request_headers", "query_parameters", "metadata"):
        return (a["descriptor_key"], None)
    defaults = {"generic_key": "generic_key", "header_value_match": "header_match",
                "query_parameter_value_match": "query_match"}
    if kind in defaults:
        return (a.get("descriptor_key") or defaults[kind], a.get("descriptor_value"))
    return None


def rule_has_limit(rule):
    return "rate_limit" in rule or "rate_limits" in rule


def rule_has_concurrency(rule):
    limits = rule.get("rate_limits") or [rule.get("rate_limit") or {}]
    return any(limit.get("algorithm") == "concurrency" for limit in limits)


def value_matches(pattern, value):
    """tollgate's (and envoyproxy/ratelimit's) wildcard: each `*` is any run of characters."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), value) is not None


def reaches_limit(rules, entries, has_limit=rule_has_limit):
    """Can a descriptor with these entries reach a limit of the tollgate config? At each level a
    fixed value takes the rule tollgate would pick (exact, then the first wildcard, then the
    key-only rule); a request-dependent value may take any rule of its key. A limit applies only
    at the descriptor's exact depth."""
    (key, value), rest = entries[0], entries[1:]
    same_key = [r for r in rules if r.get("key") == key]
    if value is not None:
        exact = [r for r in same_key if "value" in r and str(r["value"]) == value]
        wild = [r for r in same_key if "*" in str(r.get("value", ""))
                and value_matches(str(r["value"]), value)]
        bare = [r for r in same_key if "value" not in r]
        candidates = (exact or wild or bare)[:1]
    else:
        candidates = same_key
    for r in candidates:
        if not rest and has_limit(r):
            return True
        if rest and reaches_limit(r.get("descriptors") or [], rest, has_limit):
            return True
    return False


def limited_paths(rules, prefix=(), has_limit=rule_has_limit):
    """Every rule path of the config that carries a limit: ((key, value or None), ...)."""
    for r in rules:
        path = prefix + ((r["key"], str(r["value"]) if "value" in r else None),)
        if has_limit(r):
            yield path
        yield from limited_paths(r.get("descriptors") or [], path, has_limit)


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


def check_release(report, where, rl, entries, request_time, config):
    """A slot release (its last action sends tollgate.release): when, where its id comes from,
    and that it repeats a request-time descriptor reaching a concurrency limit."""
    report.check(
        rl.get("apply_on_stream_done") is True,
        f"{where}: the release is sent when the stream is done (apply_on_stream_done: true)",
    )
    [(kind, action)] = rl["actions"][-1].items()
    report.check(
        kind == "metadata"
        and action.get("source") == "DYNAMIC"
        and action.get("metadata_key") == SLOT_METADATA,
        f"{where}: the id is read from dynamic metadata {SLOT_METADATA}",
        "tollgate's answer puts the id there (tollgate.slot, under the ratelimit filter's name)",
    )
    report.check(
        not action.get("default_value") and not action.get("skip_if_absent"),
        f"{where}: no default_value and no skip_if_absent",
        "a request that got no id would send the descriptor without one: a charge, not a release",
    )
    report.check(
        tuple(entries) in request_time,
        f"{where}: ({fmt_entries(entries)}) is a descriptor the request sent",
        "a release frees the slots its id holds on the limits the rest of the descriptor reaches",
    )
    report.check(
        reaches_limit(config["descriptors"], entries, rule_has_concurrency),
        f"{where}: ({fmt_entries(entries)}) reaches a concurrency limit of domain"
        f" {config['domain']}",
    )


def check_settle(report, where, rl, entries, reserved):
    """A settle (its last action sends tollgate.settle): when, with what, and where its id
    comes from."""
    report.check(
        rl.get("apply_on_stream_done") is True,
        f"{where}: the settle is sent when the stream is done (apply_on_stream_done: true)",
    )
    report.check("hits_addend" in rl, f"{where}: the settle carries the use as its hits_addend")
    [(kind, action)] = rl["actions"][-1].items()
    report.check(
        kind == "metadata"
        and action.get("source") == "DYNAMIC"
        and action.get("metadata_key") == RESERVATION_METADATA,
        f"{where}: the id is read from dynamic metadata {RESERVATION_METADATA}",
        "tollgate's answer puts the id there (tollgate.reservation, under the filter's name)",
    )
    report.check(
        not action.get("default_value") and not action.get("skip_if_absent"),
        f"{where}: no default_value and no skip_if_absent",
        "a request that got no id would send the descriptor without one: a charge, not a settle",
    )
    report.check(
        tuple(entries) in reserved,
        f"{where}: ({fmt_entries(entries)}) is a descriptor the request reserved on",
    )


def descriptors(report, label, rate_limits, config, produced, costs_allowed):
    """Each rate limit entry (one descriptor) reaches a limit of the config: the descriptors
    sent on the request and when the stream is done."""
    out, done = [], []
    # Reserving descriptors (their entries without the mark), by mark value.
    marked = {"estimate": [], "fallback": []}
    for rl in rate_limits or []:
        entries = [action_entry(a) for a in rl["actions"]]
        if None not in entries and entries and entries[-1][0] == RESERVE_KEY:
            marked.setdefault(entries[-1][1], []).append(tuple(entries[:-1]))
    for i, rl in enumerate(rate_limits or []):
        where = f"{label}.rate_limits[{i}]"
        if not costs_allowed:
            report.check(
                "hits_addend" not in rl,
                f"{where}: no hits_addend",
                "Envoy 1.40 never sends a hits_addend written here (the call costs 1); "
                "put the entry in the route's RateLimitPerRoute.rate_limits",
            )
        entries = [action_entry(a) for a in rl["actions"]]
        if not report.check(None not in entries, f"{where}: every action has a known key"):
            continue
        if entries[-1][0] == RELEASE_KEY:
            check_release(report, where, rl, entries[:-1], out, config)
            done.append(tuple(entries))
            continue
        if entries[-1][0] == SETTLE_KEY:
            check_settle(report, where, rl, entries[:-1], marked["estimate"])
            done.append(tuple(entries))
            continue
        # What the call sends (a reservation's mark included: its estimate and fallback are
        # two descriptors), and what tollgate matches (the mark taken off).
        sent = tuple(entries)
        if entries[-1][0] == RESERVE_KEY:
            value = entries[-1][1]
            report.check(value in ("estimate", "fallback"),
                         f"{where}: the reservation mark is estimate or fallback",
                         f"found {value!r}")
            report.check(
                (value == "estimate") == ("hits_addend" in rl),
                f"{where}: an estimate carries a hits_addend, its fallback none",
            )
            other = "fallback" if value == "estimate" else "estimate"
            report.check(
                tuple(entries[:-1]) in marked.get(other, []),
                f"{where}: the {other} of ({fmt_entries(entries[:-1])}) is sent beside it",
                "Envoy drops an estimate whose hits_addend does not resolve: the fallback "
                "is what then reserves the default (or is refused)",
            )
            entries = entries[:-1]
        produced.append(entries)
        (done if rl.get("apply_on_stream_done") else out).append(sent)
        report.check(
            reaches_limit(config["descriptors"], entries),
            f"{where}: ({fmt_entries(entries)}) reaches a limit of domain {config['domain']}",
            "no rule path of the config limits these keys at this depth",
        )
    return out, done


def check_coverage(report, config, produced, label, has_limit=rule_has_limit):
    for path in limited_paths(config["descriptors"], has_limit=has_limit):
        report.check(
            any(covers(e, path) for e in produced),
            f"{label}: the limit at ({fmt_entries(path).replace('<request>', '*')}) is sent"
            " by some route",
            "no rate limit action produces this descriptor",
        )


def timeout_ms(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(text))
    return float(m.group(1)) * 1000 if m else None


def check_filter(report, label, rl, domain):
    report.check(rl.get("domain") == domain, f"{label}: domain {rl.get('domain')!r} is {domain!r}")
    t = timeout_ms(rl.get("timeout"))
    report.check(
        t is not None and TOLLGATE_REDIS_TIMEOUT_MS < t <= ENVOY_DEFAULT_TIMEOUT_MS,
        f"{label}: timeout {rl.get('timeout')} is explicit, above tollgate's Redis deadline"
        " (10 ms) and at most 20 ms",
        "spell it out next to tollgate's --redis-timeout",
    )
    report.check("failure_mode_deny" in rl, f"{label}: failure_mode_deny set explicitly")
    return rl["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]


# --------------------------------------------------------------------- examples/envoy/envoy.yaml


def check_envoy(report, root, configs):
    """`configs`: the tollgate configs by domain, the filter's (examples/ratelimit.yaml) first."""
    rel = "examples/envoy/envoy.yaml"
    report.step(f"{rel} against {' and '.join(ENVOY_EXAMPLE_CONFIGS)}")
    config = next(iter(configs.values()))
    raw = load_yaml(os.path.join(root, rel))
    hcms = [m for m in walk(raw) if m.get("@type") == HCM]
    if not report.check(len(hcms) == 1, "one HTTP connection manager", f"found {len(hcms)}"):
        return
    hcm = hcms[0]
    filters = [f["typed_config"] for f in hcm["http_filters"]
               if f.get("typed_config", {}).get("@type") == RATELIMIT_FILTER]
    if not report.check(len(filters) == 1, "one ratelimit filter"):
        return
    check_filter(report, "ratelimit filter", filters[0], config["domain"])

    produced = {domain: [] for domain in configs}
    for vh in hcm["route_config"]["virtual_hosts"]:
        label = f"virtual_hosts[{vh['name']}]"
        vh_sent, vh_done = descriptors(report, label, vh.get("rate_limits"), config,
                                       produced[config["domain"]], False)
        for ri, route in enumerate(vh["routes"]):
            match = route["match"].get("prefix") or route["match"].get("path") or "match"
            where = f"{label}.routes[{ri}] ({match})"
            per_route = route.get("typed_per_filter_config", {}).get(RATELIMIT_PER_ROUTE_KEY)
            domain = (per_route or {}).get("domain", config["domain"])
            if not report.check(domain in configs, f"{where}: domain {domain!r} is served",
                                f"the configs' domains are {sorted(configs)}"):
                continue
            own, own_done = descriptors(report, where, route.get("route", {}).get("rate_limits"),
                                        configs[domain], produced[domain], False)
            option = "OVERRIDE"
            if per_route is not None:
                option = per_route.get("vh_rate_limits", "OVERRIDE")
                if "rate_limits" in per_route:
                    # This list replaces the route's and the virtual host's lists.
                    own, own_done = descriptors(report, f"{where} RateLimitPerRoute",
                                                per_route["rate_limits"], configs[domain],
                                                produced[domain], True)
                    option = "REPLACED"
            if domain != config["domain"]:
                report.check(
                    option == "REPLACED",
                    f"{where}: in domain {domain!r}, sends only its own list",
                    "the virtual host's descriptors belong to another domain: give the route a "
                    "RateLimitPerRoute.rate_limits",
                )
            # One call on the request and one when the stream is done: none twice in either.
            for phase, sent, vh_part in (("request", own, vh_sent),
                                         ("stream done", own_done, vh_done)):
                sent = list(sent)
                if option == "INCLUDE" or (option == "OVERRIDE" and not own and not own_done):
                    sent += vh_part
                dupes = {s for s in sent if sent.count(s) > 1}
                report.check(
                    not dupes,
                    f"{where}: sends {len(sent)} descriptors on the {phase} call ({option}),"
                    " none twice",
                    f"{[fmt_entries(d) for d in dupes]} would be charged twice",
                )
    for (domain, cfg), rel_config in zip(configs.items(), ENVOY_EXAMPLE_CONFIGS, strict=True):
        if domain == config["domain"]:
            check_coverage(report, cfg, produced[domain], rel_config)
        else:
            check_coverage(report, cfg, produced[domain], f"{rel_config} (concurrency)",
                           rule_has_concurrency)


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
    ok &= report.check(list(data) == ["config.yaml"], "one file, config.yaml", f"{list(data)}")
    if not ok:
        return
    config = yaml.safe_load(data["config.yaml"])
    report.check(config.get("domain") == "ratelimit", "domain ratelimit")

    report.step("deploy/istio/envoyfilter.yaml against the ConfigMap")
    ef = load_yaml(os.path.join(base, "envoyfilter.yaml"))
    report.check(
        ef["metadata"].get("namespace") == "istio-system"
        and ef["spec"].get("workloadSelector", {}).get("labels") == {"istio": "ingressgateway"},
        "applies to the ingress gateway (istio-system, istio: ingressgateway)",
    )
    patches = ef["spec"]["configPatches"]
    produced = []
    for p in patches:
        value = p["patch"]["value"]
        if p["applyTo"] == "HTTP_FILTER":
            cluster = check_filter(report, "Istio ratelimit filter", value["typed_config"],
                                   config["domain"])
            report.check(
                cluster == ISTIO_RLS_CLUSTER,
                f"cluster {cluster!r} is Istio's for the sample's Service",
                f"want {ISTIO_RLS_CLUSTER} (Service ratelimit, namespace default, grpc-port 8081)",
            )
        elif p["applyTo"] == "VIRTUAL_HOST":
            descriptors(report, "VIRTUAL_HOST patch", value.get("rate_limits"), config, produced,
                        False)
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
    try:
        configs = {}
        for rel in ENVOY_EXAMPLE_CONFIGS:
            config = load_yaml(os.path.join(root, rel))
            configs[config["domain"]] = config
        check_envoy(report, root, configs)
        check_istio(report, root)
    except (OSError, KeyError, ValueError, yaml.YAMLError) as e:
        report.check(False, f"cannot read the configs: {e!r}")
    print()
    if report.failures:
        print(f"check-envoy-config: {report.failures} check(s) FAILED", file=sys.stderr)
        return 1
    print("check-envoy-config: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
