# helm test: one check-only ShouldRateLimit call (hits 0: it charges nothing) against the
# release's Service. Passes when tollgate answers OK or OVER_LIMIT (a used-up limit) with a
# currentLimit from the chart's config; fails on an error or an answer without currentLimit.
# Env: TEST_ADDR, TEST_DOMAIN, TEST_DESCRIPTOR (k=v[,k2=v2]), TEST_EXPECT_RPU (space-separated
# requests_per_unit values the currentLimit may carry; empty: any).
set -u
echo "tollgate query --addr $TEST_ADDR --domain $TEST_DOMAIN --descriptor '$TEST_DESCRIPTOR;hits=0' --json"
out=$(tollgate query --addr "$TEST_ADDR" --domain "$TEST_DOMAIN" --descriptor "$TEST_DESCRIPTOR;hits=0" --json)
rc=$?
printf '%s\n' "$out"
case $rc in
    0) echo "answer: OK" ;;
    3) echo "answer: OVER_LIMIT (the limit is used up; this check charged nothing)" ;;
    *) echo "FAIL: tollgate query exited $rc"; exit 1 ;;
esac
flat=$(printf '%s' "$out" | tr -d ' \t\r\n')
case $flat in
    *'"currentLimit":{'*) ;;
    *) echo "FAIL: the answer carries no currentLimit: '$TEST_DESCRIPTOR' matched no limit of domain '$TEST_DOMAIN'"; exit 1 ;;
esac
if [ -z "${TEST_EXPECT_RPU:-}" ]; then
    echo "PASS: currentLimit present"
    exit 0
fi
for n in $TEST_EXPECT_RPU; do
    case $flat in
        *"\"requestsPerUnit\":$n,"* | *"\"requestsPerUnit\":$n}"* | *"\"requestsPerUnit\":\"$n\""*)
            echo "PASS: currentLimit with requestsPerUnit $n, as configured"
            exit 0 ;;
    esac
done
echo "FAIL: currentLimit.requestsPerUnit is none of the configured $TEST_EXPECT_RPU"
exit 1
