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
    let start = out.len();
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(task).as_bytes());
    out.push(b'-');
    out.extend_from_slice(digits.format(seq).as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stop_at_count_and_pad_values() {
        let records = batch(2, 8, 5, 10, 6);
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9]);
        assert_eq!(records[0].value, b"2-8...");
        assert_eq!(records[1].offset, r#"{"seq":9}"#);
        let mut out = b"x".to_vec();
        write_value(&mut out, 2, 8, 6);
        assert_eq!(out, b"x2-8...");
    }
}
