#!/usr/bin/env bash
# Coverage-guided fuzzing of one of tollgate's parsers (issue 48): libFuzzer through cargo fuzz
# on the nightly toolchain, with AddressSanitizer (SANITIZER=none for none, e.g. on stable:
# `cargo fuzz run --sanitizer none`). The targets are fuzz/fuzz_targets/*.rs, their bodies
# fuzz/targets.rs; the corpus grows in fuzz/corpus/TARGET and is minimized and capped at the end
# (200 inputs of at most 4 KiB, spread over the sizes), and a
# crash lands in fuzz/artifacts/TARGET (copy it to fuzz/regressions/TARGET once fixed:
# `cargo test --test fuzz_corpus` replays both folders on stable, without a fuzzer).
#
#   scripts/fuzz.sh TARGET [SECONDS]     # default 300; `scripts/fuzz.sh list` names them
#
# Each input is bounded: 10 s (-timeout), 512 MB in one allocation (-malloc_limit_mb), 2 GB
# resident (-rss_limit_mb), 64 KiB long (-max_len). Needs: rustup's nightly toolchain and
# cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] (scripts/fuzz.sh list)}
SECONDS_RUN=${2:-300}
SANITIZER=${SANITIZER:-address}
if [ "$TARGET" = list ]; then
  ls fuzz/fuzz_targets | sed 's/\.rs$//'
  exit 0
fi
[ -f "fuzz/fuzz_targets/$TARGET.rs" ] || { echo "error: no fuzz target '$TARGET' (scripts/fuzz.sh list)" >&2; exit 2; }
command -v cargo-fuzz >/dev/null 2>&1 || { echo "error: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2; exit 2; }
rustup run nightly rustc --version >/dev/null 2>&1 || { echo "error: no nightly toolchain (rustup toolchain install nightly)" >&2; exit 2; }

mkdir -p "fuzz/corpus/$TARGET"
cargo +nightly fuzz run --sanitizer "$SANITIZER" "$TARGET" "fuzz/corpus/$TARGET" -- \
  -max_total_time="$SECONDS_RUN" -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 2>&1 | tee "fuzz/$TARGET.log" | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|artifact" || true
status=${PIPESTATUS[0]}
# Minimized: only inputs that add coverage stay (cargo fuzz cmin merges into a fresh folder).
cargo +nightly fuzz cmin --sanitizer "$SANITIZER" "$TARGET" "fuzz/corpus/$TARGET" -- -max_len=65536 >/dev/null 2>&1 || true
# Capped for the repository: inputs over 4 KiB go, then 200 are kept, spread evenly over the
# sizes (tests/fuzz_corpus.rs holds the corpora to the same caps).
find "fuzz/corpus/$TARGET" -type f -size +4k -delete
python3 - "fuzz/corpus/$TARGET" <<'PY'
import os, sys
d = sys.argv[1]
files = sorted(os.listdir(d), key=lambda f: (os.path.getsize(os.path.join(d, f)), f))
keep = {files[i * len(files) // 200] for i in range(200)} if len(files) > 200 else set(files)
for f in files:
    if f not in keep:
        os.remove(os.path.join(d, f))
PY
echo "$TARGET: $(ls "fuzz/corpus/$TARGET" | wc -l) inputs in the minimized corpus; log in fuzz/$TARGET.log"
exit "$status"
