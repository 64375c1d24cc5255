//! The counter's records, in plain Rust: what the component emits and the benchmark
//! generates natively.

/// The value of record `seq` of `task`: `"<task>-<seq>"` then `.` up to `size` bytes.
pub fn value(task: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut value = Vec::new();
    write_value(&mut value, task, seq, size);
    value
}

/// Appends [`value`] to `out`.
pub fn write_value(out: &mut Vec<u8>, task: u32, seq: u64, size: usize) {
    // `itoa` rather than `write!`: core::fmt's machinery (a dyn Write adapter, padding
    // checks) was two thirds of the component's own time per record, compiled to wasm.
    write_value_text(out, itoa::Buffer::new().format(task), itoa::Buffer::new().format(seq), size);
}

/// [`write_value`] from the task's and the sequence number's decimal text, so a batch
/// formats its task once and each record its number once for its value and its offset
/// (formatting was a sixth of the component's time per 1 KiB record).
pub fn write_value_text(out: &mut Vec<u8>, task: &str, seq: &str, size: usize) {
    let start = out.len();
    out.extend_from_slice(task.as_bytes());
    out.push(b'-');
    out.extend_from_slice(seq.as_bytes());
    if out.len() - start < size {
        out.resize(start + size, b'.');
    }
}

/// One generated record, before it is turned into the host's record type.
pub struct Generated {
    pub seq: u64,
    pub partition: String,
    pub offset: String,
    pub value: Vec<u8>,
}

/// The next batch of at most `batch` records starting at `next`, stopping before
/// `count` (0 means endless).
pub fn batch(task: u32, next: u64, batch: usize, count: u64, size: usize) -> Vec<Generated> {
    let end = match count {
        0 => next.saturating_add(batch as u64),
        count => count.min(next.saturating_add(batch as u64)),
    };
    if end <= next {
        // Nothing to make: an idle task's poll costs next to nothing.
        return Vec::new();
    }
    let partition = partition(task);
    (next..end)
        .map(|seq| {
            let mut offset = String::new();
            write_offset(&mut offset, seq);
            Generated { seq, partition: partition.clone(), offset, value: value(task, seq, size) }
        })
        .collect()
}

/// `{"counter":<task>}`: the partition of a task's records.
pub fn partition(task: u32) -> String {
    format!("{{\"counter\":{task}}}")
}

/// Appends `{"seq":<seq>}`, the offset of record `seq`, to `out`.
pub fn write_offset(out: &mut String, seq: u64) {
    out.push_str("{\"seq\":");
    out.push_str(itoa::Buffer::new().format(seq));
    out.push('}');
}

/// [`write_offset`] from the sequence number's decimal text, into a batch's bytes.
pub fn write_offset_text(out: &mut Vec<u8>, seq: &str) {
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(seq.as_bytes());
    out.push(b'}');
}

/// `records.per.second`, kept by a task: how many records it may make now.
pub struct Pace {
    rate: u64,
    burst: u64,
    started_at_ms: u64,
    made: u64,
}

impl Pace {
    /// `rate` records a second from `now_ms` on (0: unlimited), never more than `burst` at
    /// once to catch up.
    pub fn new(rate: u64, burst: u64, now_ms: u64) -> Self {
        Pace { rate, burst: burst.max(1), started_at_ms: now_ms, made: 0 }
    }

    /// How many of `wanted` records may be made at `now_ms`. Time the task was not asked
    /// in (paused, or behind a slow destination) is not paid back in a burst: it falls
    /// behind by `burst` records at most.
    pub fn allow(&mut self, wanted: u64, now_ms: u64) -> u64 {
        if self.rate == 0 {
            return wanted;
        }
        let due = (now_ms.saturating_sub(self.started_at_ms) + 1) * self.rate / 1000;
        self.made = self.made.max(due.saturating_sub(self.burst));
        wanted.min(due.saturating_sub(self.made))
    }

    /// `count` records were made.
    pub fn made(&mut self, count: u64) {
        self.made += count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_keeps_its_rate_and_pays_no_pause_back() {
        let mut pace = Pace::new(100, 10, 1_000);
        // Half a second at 100/s: 50 due, taken a batch of 10 at a time.
        let mut made = 0;
        for now in (1_000..1_500).step_by(20) {
            let allowed = pace.allow(10, now);
            pace.made(allowed);
            made += allowed;
        }
        assert!((45..=50).contains(&made), "{made}");
        assert_eq!(pace.allow(10, 1_480), 0, "nothing more due yet");
        // Twenty seconds not asked: one batch at once, then the rate again.
        let after_pause = pace.allow(1_000, 21_500);
        assert_eq!(after_pause, 10);
        pace.made(after_pause);
        assert_eq!(pace.allow(1_000, 21_500), 0);
        assert_eq!(pace.allow(1_000, 21_600), 10, "a tenth of a second later");
        let mut unlimited = Pace::new(0, 10, 0);
        assert_eq!(unlimited.allow(500, 0), 500);
    }

    #[test]
    fn batches_stop_at_count_and_pad_values() {
        let records = batch(2, 8, 5, 10, 6);
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9]);
        assert_eq!(records[0].value, b"2-8...");
        assert_eq!(records[1].offset, r#"{"seq":9}"#);
        let mut out = b"x".to_vec();
        write_value(&mut out, 2, 8, 6);
        assert_eq!(out, b"x2-8...");
        let mut offset = "x".to_string();
        write_offset(&mut offset, 1234567);
        assert_eq!(offset, r#"x{"seq":1234567}"#);
        write_value_text(&mut out, "2", "10", 3);
        assert_eq!(out, b"x2-8...2-10");
    }
}
