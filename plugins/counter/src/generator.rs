//! The counter's records, in plain Rust: what the component emits and the benchmark
//! generates natively.

/// The value of record `seq` of `task`: `"<task>-<seq>"` then `.` up to `size` bytes.
pub fn value(task: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut value = format!("{task}-{seq}").into_bytes();
    if value.len() < size {
        value.resize(size, b'.');
    }
    value
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
    let partition = format!("{{\"counter\":{task}}}");
    (next..end)
        .map(|seq| Generated {
            seq,
            partition: partition.clone(),
            offset: format!("{{\"seq\":{seq}}}"),
            value: value(task, seq, size),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stop_at_count_and_pad_values() {
        let records = batch(2, 8, 5, 10, 6);
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9]);
        assert_eq!(records[0].value, b"2-8...");
        assert_eq!(records[1].offset, r#"{"seq":9}"#);
    }
}
