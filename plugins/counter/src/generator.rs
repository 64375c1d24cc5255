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
        let mut offset = "x".to_string();
        write_offset(&mut offset, 1234567);
        assert_eq!(offset, r#"x{"seq":1234567}"#);
        write_value_text(&mut out, "2", "10", 3);
        assert_eq!(out, b"x2-8...2-10");
    }
}
