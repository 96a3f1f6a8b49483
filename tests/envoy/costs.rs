//! A request's cost as Envoy sends it (`hits_addend` in the ratelimit filter's per-route
//! config): a number, 0 (check only), a request header and dynamic metadata; and a charge that
//! does not fit charges nothing (outside usage domains).

use super::enforce::{get, header, within_one_hour};
use super::fixture::{fixture, unique, Side};

/// One step: the route, extra headers, then the status and X-RateLimit-Remaining wanted, and why.
type Step = (
    &'static str,
    &'static [(&'static str, &'static str)],
    u16,
    &'static str,
    &'static str,
);

/// Per cost key: 10 an hour. `route` with `headers`: (status, X-RateLimit-Remaining).
async fn ask(side: &Side, route: &str, key: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut all = vec![("x-cost-key", key)];
    all.extend_from_slice(headers);
    let (status, h) = get(&side.url(route), &all).await;
    (
        status,
        header(&h, "x-ratelimit-remaining")
            .unwrap_or("none")
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_envoy_sends_a_cost_is_charged() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let key = unique("cost");
        let name = side.name();
        let steps: [Step; 9] = [
            ("/cost/check", &[], 200, "10", "a check charges nothing"),
            ("/cost/number", &[], 200, "7", "hits_addend number 3"),
            (
                "/cost/header",
                &[("x-cost", "2")],
                200,
                "5",
                "a cost from a request header",
            ),
            (
                "/cost/metadata",
                &[("x-meta-cost", "4")],
                200,
                "1",
                "a cost from dynamic metadata",
            ),
            (
                "/cost/check",
                &[],
                200,
                "1",
                "a check still charges nothing",
            ),
            ("/cost/number", &[], 429, "0", "3 does not fit in 1"),
            (
                "/cost/check",
                &[],
                200,
                "1",
                "the refused 3 charged nothing",
            ),
            ("/cost/header", &[("x-cost", "1")], 200, "0", "1 fits"),
            (
                "/cost/check",
                &[],
                429,
                "0",
                "a check is over once nothing is left",
            ),
        ];
        for (route, headers, status, left, why) in steps {
            assert_eq!(
                ask(side, route, &key, headers).await,
                (status, left.to_string()),
                "[{name}] {route} {headers:?}: {why}"
            );
        }
    }
}
