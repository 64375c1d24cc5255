//! A token bucket: the one rate limiter the host uses, for a plugin's log lines and for a
//! tenant's records per second.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket that refills at `per_second` and holds at most `burst` tokens.
    pub fn new(per_second: f64, burst: f64) -> TokenBucket {
        TokenBucket { per_second, burst, tokens: burst, refilled: Instant::now() }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.refilled).as_secs_f64() * self.per_second).min(self.burst);
        self.refilled = now;
    }

    /// Takes one token if there is one.
    pub fn try_take_one(&mut self) -> bool {
        self.refill();
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// Takes `n` tokens, going into debt if need be, and returns how long the caller must
    /// wait for the debt to be paid back (zero when there was enough).
    pub fn take(&mut self, n: f64) -> Duration {
        self.refill();
        self.tokens -= n;
        if self.tokens < 0.0 { Duration::from_secs_f64(-self.tokens / self.per_second) } else { Duration::ZERO }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_gives_its_burst_then_owes() {
        let mut bucket = TokenBucket::new(10.0, 20.0);
        let taken = (0..100).filter(|_| bucket.try_take_one()).count();
        assert!((20..=21).contains(&taken), "{taken}");
        let mut bucket = TokenBucket::new(100.0, 100.0);
        assert_eq!(bucket.take(50.0), Duration::ZERO);
        let wait = bucket.take(100.0);
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500), "{wait:?}");
    }
}
