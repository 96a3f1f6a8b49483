//! Which key number each request goes to.
//!
//! A [`KeyChoice`] is two numbers (how many keys, how hot key 0 is) and a pick is a few
//! multiplications on a [`SplitMix64`] stream, so choosing among four billion keys costs what
//! choosing among ten does. Each closed-loop worker and the open-loop scheduler own a stream.

use std::fmt;

/// SplitMix64: small and fast, plenty for spreading load (not for anything secret).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Maps a uniform `r` onto `0..n` without modulo bias (Lemire's multiply-shift).
fn below(r: u64, n: u32) -> u32 {
    // The product's top 64 bits are below `n`, so they fit in a u32.
    ((u128::from(r) * u128::from(n)) >> 64) as u32
}

/// Which key each request goes to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyChoice {
    keys: u32,
    /// `Some(s)`: a share `s` of requests go to key 0, the rest uniformly to keys `1..keys`.
    /// `None`: uniform over all keys.
    hot_share: Option<f64>,
}

impl KeyChoice {
    pub fn new(keys: u32, hot_share: Option<f64>) -> KeyChoice {
        KeyChoice {
            keys: keys.max(1),
            hot_share,
        }
    }

    pub fn keys(&self) -> u32 {
        self.keys
    }

    pub fn hot_share(&self) -> Option<f64> {
        self.hot_share
    }

    /// A key number in `0..keys`.
    pub fn pick(&self, rng: &mut SplitMix64) -> u32 {
        if self.keys == 1 {
            return 0;
        }
        match self.hot_share {
            None => below(rng.next_u64(), self.keys),
            Some(share) if rng.next_f64() < share => 0,
            Some(_) => 1 + below(rng.next_u64(), self.keys - 1),
        }
    }
}

/// `1 key`, `100 keys, uniform`, `100 keys, 90.0% on key 0`.
impl fmt::Display for KeyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.keys, self.hot_share) {
            (1, _) => write!(f, "1 key"),
            (n, None) => write!(f, "{n} keys, uniform"),
            (n, Some(s)) => write!(f, "{n} keys, {:.1}% on key 0", s * 100.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shares(choice: KeyChoice, n: usize) -> Vec<f64> {
        let mut rng = SplitMix64::new(7);
        let mut counts = vec![0u64; choice.keys as usize];
        for _ in 0..n {
            counts[choice.pick(&mut rng) as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn uniform_choice_spreads_evenly() {
        for s in shares(KeyChoice::new(10, None), 200_000) {
            assert!((s - 0.1).abs() < 0.005, "{s}");
        }
    }

    #[test]
    fn hot_share_goes_to_key_zero_and_the_rest_spreads() {
        let s = shares(KeyChoice::new(5, Some(0.9)), 200_000);
        assert!((s[0] - 0.9).abs() < 0.005, "{s:?}");
        for &other in &s[1..] {
            assert!((other - 0.025).abs() < 0.003, "{s:?}");
        }
        assert_eq!(shares(KeyChoice::new(5, Some(1.0)), 1000)[0], 1.0);
        assert_eq!(shares(KeyChoice::new(5, Some(0.0)), 1000)[0], 0.0);
        assert_eq!(shares(KeyChoice::new(1, Some(0.0)), 1000), vec![1.0]);
    }

    #[test]
    fn below_covers_the_range_edges() {
        assert_eq!(below(0, 10), 0);
        assert_eq!(below(u64::MAX, 10), 9);
        assert_eq!(below(u64::MAX / 2, 2), 0);
        assert_eq!(below(u64::MAX / 2 + 1, 2), 1);
        assert_eq!(below(u64::MAX, u32::MAX), u32::MAX - 1);
    }

    #[test]
    fn choices_describe_themselves() {
        assert_eq!(KeyChoice::new(0, None).to_string(), "1 key");
        assert_eq!(KeyChoice::new(1, Some(0.5)).to_string(), "1 key");
        assert_eq!(KeyChoice::new(10, None).to_string(), "10 keys, uniform");
        assert_eq!(
            KeyChoice::new(100, Some(0.9)).to_string(),
            "100 keys, 90.0% on key 0"
        );
    }

    proptest! {
        #[test]
        fn picks_stay_in_range(keys in 1u32.., share in proptest::option::of(0.0f64..=1.0),
                               seed: u64) {
            let choice = KeyChoice::new(keys, share);
            let mut rng = SplitMix64::new(seed);
            for _ in 0..100 {
                prop_assert!(choice.pick(&mut rng) < keys);
            }
        }

        #[test]
        fn unit_floats_are_in_range(seed: u64) {
            let mut rng = SplitMix64::new(seed);
            for _ in 0..100 {
                let f = rng.next_f64();
                prop_assert!((0.0..1.0).contains(&f));
            }
        }
    }
}
