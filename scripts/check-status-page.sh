#!/usr/bin/env bash
# The status page in a real browser: a `tollgate serve` (memory store) is seeded with
# OVER_LIMIT decisions for three tenants, one named `<script>…</script>` and one with quotes
# and an ampersand; Debian's chromium (installed when missing, with fonts) loads the page
# headless (--no-sandbox: CI runs as root), its DOM is dumped and a screenshot taken, and the
# counter lookup form is submitted as a browser submits it. Checks: the page is ready and shows
# the seeded data; hostile values are text, never markup (no <script> element in the DOM); the
# lookup finds the counter; the shared pools show each class's use and the active tenants; the
# Budgets panel shows three teams' money spend, biggest first, each equal to what /counters
# says, with a chart and the budget in its own terms; the screenshot is not blank. Also: with --admin-token-file the page
# needs the token (401 and a Basic challenge, 200 with it); with --admin-ui=false it is gone.
# And a page on another origin that posts a reset form to the write listener (a cross-site
# request forgery) is refused there (403), the counter untouched.
#
# A global limit (one limit across regions, this instance region eu and its home) is listed in
# its own terms and its lease looked up as /counters has it; every instance runs on one
# redis-server of the script's own (each under its own key prefix).
#
# Needs: python3, redis-server, a tollgate binary (TOLLGATE_BIN, default target/release/tollgate), and root
# or sudo to install chromium when it is missing.
#
# Usage: scripts/check-status-page.sh [--screenshot PATH]   (PATH: keep the screenshot there)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${TOLLGATE_BIN:-$ROOT/target/release/tollgate}
KEEP=""
if [ "${1:-}" = "--screenshot" ]; then KEEP=$2; fi

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ -x "$BIN" ] || die "no tollgate binary at $BIN (cargo build --release, or set TOLLGATE_BIN)"

install_packages() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null \
    || { $sudo apt-get update >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; } \
    || die "cannot install $* (Debian: apt-get install $*)"
}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  step "installing Debian's chromium"
  install_packages chromium
  CHROMIUM=$(command -v chromium) || die "chromium did not install"
fi
if ! fc-list 2>/dev/null | grep -qi dejavu; then
  step "installing fonts"
  install_packages fonts-dejavu-core fontconfig
fi
"$CHROMIUM" --version
command -v redis-server >/dev/null 2>&1 || die "redis-server is not on the PATH (Debian: apt-get install redis-server)"

source scripts/lib.sh
WORK=$(mktemp -d)
PIDS=()
trap cleanup EXIT

cat >"$WORK/config.yaml" <<'YAML'
domain: shop
prices:
  currency: USD
  per_million_tokens:
    gpt-4o: {input: 2.50, output: 10.00}
descriptors:
  - key: team
    hierarchical: true
    rate_limit: {name: team-monthly-spend, calendar: month, spend: 50, overdraft: true}
  - key: tenant
    rate_limit: {name: per-tenant, unit: hour, requests_per_unit: 2}
  - key: model
    rate_limit: {name: gpus, algorithm: concurrency, requests_per_unit: 4, lease_ttl: 60s}
  - key: account
    rate_limit: {name: per-account, unit: hour, requests_per_unit: 5}
  - key: provider
    value: openai
    hierarchical: true
    rate_limit: {name: openai, unit: hour, requests_per_unit: 100, shared: true, shares: {by: priority, classes: {interactive: 0.5, batch: 0.3}, default: batch}}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
  - key: api
    rate_limit: {name: api-global, unit: hour, requests_per_unit: 300, shared: true, global: {home: eu, regions: [eu, us]}}
  - key: region
    value: eu
    hierarchical: true
    rate_limit: {name: eu, unit: hour, requests_per_unit: 100, shared: true, fair_share: {by: tenant}}
    descriptors: [{key: tenant}]
YAML
printf 's3cret-token\n' >"$WORK/token"

# One Redis for every instance (each under its own key prefix): the config has a global
# limit (one limit across regions), which needs the Redis store and --region. This is region
# eu, home of the limit; region us never comes.
REDIS_PORT=$(free_port)
start_redis "$REDIS_PORT"

# serve NAME EXTRA_ARGS...: starts tollgate, sets NAME_HTTP and NAME_GRPC.
serve() {
  local name=$1; shift
  local grpc http
  grpc=$(free_port); http=$(free_port)
  "$BIN" serve --config "$WORK/config.yaml" --grpc-addr "127.0.0.1:$grpc" \
    --http-addr "127.0.0.1:$http" --redis-url "redis://127.0.0.1:$REDIS_PORT" \
    --redis-key-prefix "$name:" --region eu "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$http/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:$http/healthz" >/dev/null || die "tollgate ($name) did not start: $(cat "$WORK/$name.log")"
  printf -v "${name}_HTTP" '%s' "http://127.0.0.1:$http"
  printf -v "${name}_GRPC" '%s' "http://127.0.0.1:$grpc"
}

HOSTILE='<script>document.title="pwned"</script>'
QUOTED="o'reilly & \"sons\""

step "tollgate, seeded with OVER_LIMIT decisions"
serve open
seed() { # seed VALUE N
  for _ in $(seq "$2"); do
    "$BIN" query --addr "$open_GRPC" --domain shop --descriptor "tenant=$1" >/dev/null || [ $? = 3 ]
  done
}
seed acme 9
seed "$HOSTILE" 5
seed "$QUOTED" 4
# The shared pools: 3 interactive and 2 batch requests on openai's; 3 tenants on eu's.
pool() { # pool DESCRIPTOR N
  for _ in $(seq "$2"); do
    "$BIN" query --addr "$open_GRPC" --domain shop --descriptor "$1" >/dev/null
  done
}
pool "provider=openai,tenant=a,priority=interactive" 3
pool "provider=openai,tenant=b,priority=batch" 2
for t in x y z; do pool "region=eu,tenant=$t" 1; done
# Money budgets: three teams spend, one of them named like markup; the page's Budgets panel
# must show each team's spend as /counters has it.
spend() { # spend TEAM INPUT_TOKENS OUTPUT_TOKENS
  "$BIN" query --addr "$open_GRPC" --domain shop \
    --descriptor "team=$1,model=gpt-4o,kind=input;hits=$2" \
    --descriptor "team=$1,model=gpt-4o,kind=output;hits=$3" >/dev/null
}
spend research 120000 30000     # USD 0.30 + 0.30
spend research 40000 10000      # USD 0.10 + 0.10
spend support 8000 2000         # USD 0.02 + 0.02
spend "$HOSTILE" 4000 1000      # USD 0.01 + 0.01
# The global limit: 7 admitted from this region's lease (the first may come before the lease).
admitted=0
for _ in $(seq 50); do
  if "$BIN" query --addr "$open_GRPC" --domain shop --descriptor "api=checkout" >/dev/null; then
    admitted=$((admitted + 1)); [ "$admitted" = 7 ] && break
  else
    [ $? = 3 ] || die "the global limit's query failed"; sleep 0.2
  fi
done
[ "$admitted" = 7 ] || die "the global limit admitted $admitted of 7"

browse() { # browse URL OUT.html [screenshot.png]
  local args=(--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2100
    --user-data-dir="$WORK/profile")
  timeout 60 "$CHROMIUM" "${args[@]}" --dump-dom "$1" >"$2" 2>"$WORK/chromium.log" \
    || die "chromium could not load $1: $(tail -5 "$WORK/chromium.log")"
  if [ -n "${3:-}" ]; then
    (cd "$WORK" && timeout 60 "$CHROMIUM" "${args[@]}" --screenshot="$3" "$1" 2>>"$WORK/chromium.log") \
      || die "chromium could not take a screenshot of $1"
  fi
}

step "the page, its DOM and a screenshot"
browse "$open_HTTP/" "$WORK/page.html" "$WORK/page.png"
step "the counter lookup, submitted as the form submits it"
LOOKUP=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlencode([("domain","shop"),("key","tenant"),("value",sys.argv[1]),("key",""),("value","")]))' "$QUOTED")
browse "$open_HTTP/?$LOOKUP" "$WORK/lookup.html"
browse "$open_HTTP/?domain=shop&key=api&value=checkout" "$WORK/lookup-global.html"

python3 - "$WORK" "$HOSTILE" "$QUOTED" "$open_HTTP" <<'PY'
import html, json, re, struct, sys, urllib.parse, urllib.request, zlib
work, hostile, quoted, http = sys.argv[1:]
page = open(f"{work}/page.html", encoding="utf-8").read()
lookup = open(f"{work}/lookup.html", encoding="utf-8").read()
lookup_global = open(f"{work}/lookup-global.html", encoding="utf-8").read()
def check(ok, what):
    if not ok:
        sys.exit(f"status page check failed: {what}")
    print(f"ok: {what}")
check('id="readiness">READY<' in page, "the page says READY")
check("Kind: <b>redis</b>" in page, "the store kind is shown")
check(re.search(r"p50 <b>[0-9.]+ ms</b>, p99 <b>[0-9.]+ ms</b>", page) is not None, "store latency p50/p99 is shown")
check("per-tenant" in page and "gpus" in page, "the domain's limits are listed")
pools = page[page.find('id="pools"'):page.find('id="limits"')]
def pool_row(name):
    row = re.search(r"<tr><td><code>[^<]*</code></td><td>" + re.escape(name) + r"</td>(.*?)</tr>", pools)
    return re.findall(r"<td>(.*?)</td>", row.group(1))[:2] if row else None
check(pool_row("openai") == ["100", "5"], f"the shared pool's use is shown: {pool_row('openai')}")
check(pool_row("openai/interactive") == ["50", "3"] and pool_row("openai/batch") == ["30", "2"],
      "each class's use is shown beside its guarantee")
check(pool_row("eu/active_tenants") == ["10000", "3"], f"the active tenants are shown: {pool_row('eu/active_tenants')}")
check(pools.count("<svg") == 2 and "3 / 50" in pools, "each pool is drawn: its use, each class's against its guarantee")
top = page[page.find('id="top"'):page.find('id="limits"')]
check("tenant=acme" in top, "the top limited descriptors show the seeded tenant")
check("<code>tenant=&lt;script&gt;document.title=" in top, "a <script> value is shown as text")
check("<svg" in top, "the OVER_LIMIT per minute chart is drawn")
# No element came from a value: the page has no script at all, and the title is ours.
check(re.search(r"<script", page, re.I) is None and "pwned" not in page.split("</title>")[0],
      "no <script> element and the title untouched")
check("o'reilly" in lookup or "o&#39;reilly" in lookup, "the lookup echoes the quoted value")
row = re.search(r"<tr><td>per-tenant</td>.*?</tr>", lookup)
check(row is not None, "the lookup finds the counter")
limits = page[page.find('id="limits"'):]
check("300 per hour across eu, us (home eu)" in limits, "the global limit is listed in its own terms")
grow = re.search(r"<tr><td>api-global[ <].*?</tr>", lookup_global)
check(grow is not None, "the lookup finds the global limit")
g = re.findall(r"<td>(.*?)</td>", grow.group(0))
c = json.load(urllib.request.urlopen(f"{http}/counters?domain=shop&key=api&value=checkout", timeout=5))["counters"][0]
check(g[4] == str(c["used"]) == "7", f"the global limit's use on the page ({g[4]}) is /counters' ({c['used']}), 7")
budgets = page[page.find('id="budgets"'):page.find('id="pools"')]
check("<svg" in budgets and "50 USD per calendar month (UTC)" in budgets,
      "the Budgets panel shows the budget in its own terms, with a chart")
rows = re.findall(r'<tr data-key="[^"]*"><td><code>(.*?)</code></td><td class="used" data-used="(\d+)">(.*?)</td>', budgets)
shown = {html.unescape(who): (int(used), text) for who, used, text in rows}
check(list(shown)[:1] == ["team=research"] and len(shown) == 3, f"the three teams, the biggest first: {list(shown)}")
for who, (used, text) in shown.items():
    q = urllib.parse.urlencode([("domain", "shop"), ("key", "team"), ("value", who.split("=", 1)[1])])
    counters = json.load(urllib.request.urlopen(f"{http}/counters?{q}", timeout=5))["counters"]
    c = next(c for c in counters if c["name"] == "team-monthly-spend")
    check(used == c["used"], f"{who}: the page's {used} µUSD ({text}) is /counters' {c['used']}")
check(shown["team=research"] == (800000, "0.8 USD"), f"research spent USD 0.80: {shown['team=research']}")
check("<code>team=&lt;script&gt;document.title=" in budgets, "a <script> team name is shown as text")
cells = re.findall(r"<td>(.*?)</td>", row.group(0))
check(cells[3:6] == ["2", "2", "0"], f"the counter is full (limit 2, used 2, left 0): {cells}")

def png_colors(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    bpp = {2: 3, 6: 4}[ctype]
    stride = w * bpp + 1
    colors = set()
    prev = bytearray(stride - 1)
    for y in range(h):
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 8 == 0:
            for x in range(0, w, 4):
                colors.add(bytes(line[x * bpp:x * bpp + 3]))
        prev = line
    return w, h, len(colors)
w, h, n = png_colors(f"{work}/page.png")
check(w >= 1000 and h >= 1000 and n >= 8, f"the screenshot is {w}x{h} with {n} colours, not blank")
PY
if [ -n "$KEEP" ]; then cp "$WORK/page.png" "$KEEP"; echo "screenshot kept at $KEEP"; fi

step "with --admin-token-file the page needs the token; --admin-ui=false removes it"
serve locked --admin-token-file "$WORK/token"
code=$(curl -s -o /dev/null -w '%{http_code}' "$locked_HTTP/")
[ "$code" = 401 ] || die "the page answered $code without the token"
curl -sI "$locked_HTTP/" | grep -qi '^www-authenticate: Basic' || die "no Basic challenge for a browser"
code=$(curl -s -o /dev/null -w '%{http_code}' -u "admin:s3cret-token" "$locked_HTTP/")
[ "$code" = 200 ] || die "the page answered $code with the token"
echo "ok: 401 without the token, 200 with it"
serve off --admin-ui=false
code=$(curl -s -o /dev/null -w '%{http_code}' "$off_HTTP/")
[ "$code" = 404 ] || die "--admin-ui=false still serves the page ($code)"
echo "ok: --admin-ui=false serves no page"

step "a cross-site form post to the write listener, from a page on another origin, is refused"
WRITE_PORT=$(free_port)
serve writer --admin-token-file "$WORK/token" --admin-write-addr "127.0.0.1:$WRITE_PORT"
for _ in 1 2; do
  "$BIN" query --addr "$writer_GRPC" --domain shop --descriptor "account=victim" >/dev/null
done
EVIL_PORT=$(free_port)
mkdir -p "$WORK/evil"
cat >"$WORK/evil/index.html" <<HTML
<!doctype html><title>cute cats</title>
<form method="post" action="http://127.0.0.1:$WRITE_PORT/counters/reset">
<input name="domain" value="shop"><input name="descriptor" value="account=victim">
</form>
<script>document.forms[0].submit()</script>
HTML
(cd "$WORK/evil" && exec python3 -m http.server "$EVIL_PORT" --bind 127.0.0.1 >"$WORK/evil.log" 2>&1) &
PIDS+=($!)
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$EVIL_PORT/" >/dev/null 2>&1 && break; sleep 0.1; done
timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/profile" \
  --virtual-time-budget=5000 --dump-dom "http://127.0.0.1:$EVIL_PORT/" >"$WORK/csrf.html" 2>>"$WORK/chromium.log" \
  || die "chromium could not load the cross-site page: $(tail -5 "$WORK/chromium.log")"
grep -q "refused from a browser" "$WORK/csrf.html" \
  || die "the cross-site form post was not refused as a browser's: $(head -c 600 "$WORK/csrf.html")"
grep -q "counter reset refused: sent by a browser" "$WORK/writer.log" \
  || die "tollgate did not log the refusal: $(tail -5 "$WORK/writer.log")"
used=$(curl -s -H "Authorization: Bearer s3cret-token" "$writer_HTTP/counters?domain=shop&descriptor=account%3Dvictim" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"][0]["used"])')
[ "$used" = 2 ] || die "the counter was touched by the cross-site post: used $used, want 2"
echo "ok: the browser's cross-site form post got 403 and the counter kept its 2 used"
echo
echo "status page: all checks passed"
