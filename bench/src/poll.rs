//! `sluice-bench poll`: records per second through a task's `poll` for the `counter`
//! example plugin as a sandboxed component, beside the same work done natively in one
//! run, and the ratio. The counter writes each record straight into its batch
//! (`poll_into`), so its native twin writes the same bytes into one buffer the same way
//! ("native": the partition and topic once a batch, each number formatted once); "native records" builds a record value of its own per record instead, as
//! a plugin returning `Vec<Record>` does. "native + copy" is the native work plus one copy
//! of each batch's bytes and spans into new buffers, as the host lifts a batch out of a
//! sandbox's memory: the most any sandboxed plugin whose batches are copied out can reach.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice::config::{SandboxSettings, WorkerConfig};
use sluice::runtime::bindings::{PollBatch, SourceRecord};
use sluice::runtime::{InstanceContext, Registry, Runtime};
use sluice::storage::{DataDir, Namespace, Stores};

pub struct BenchRow {
    pub path: &'static str,
    pub records: u64,
    pub elapsed: Duration,
    pub bytes: u64,
}

impl BenchRow {
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `rounds` alternating rounds of each path and keeps each path's best round (the
/// least disturbed by the rest of the machine).
pub async fn poll(
    plugin_dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    rounds: u32,
) -> anyhow::Result<Vec<BenchRow>> {
    let runtime = Runtime::new()?;
    let scratch = DataDir::new(std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id())));
    let stores = Stores::open(&WorkerConfig::default(), &scratch)?;
    let registry = Registry::load(&runtime, plugin_dir, &scratch.compile_cache()).await?;
    let plugin = registry.get("counter").with_context(|| format!("no counter.wasm in {}", plugin_dir.display()))?;
    let config: Vec<(String, String)> =
        [("topic", "bench".to_string()), ("record.size", size.to_string()), ("batch.size", batch.to_string())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();

    let mut best: [Option<BenchRow>; 4] = [None, None, None, None];
    for _ in 0..rounds.max(1) {
        let native = native_round(records, size, batch, false);
        let native_copied = native_round(records, size, batch, true);
        let native_records = native_records_round(records, size, batch);
        let context = InstanceContext {
            namespace: Namespace::new("bench", "bench"),
            task: None,
            offsets: stores.offsets().clone(),
            reconfigure: None,
        };
        let mut instance = runtime.instantiate(plugin.pre(), context, &SandboxSettings::default()).await?;
        instance.task_start(&config).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let started = Instant::now();
        let (mut count, mut bytes) = (0u64, 0u64);
        while count < records {
            let polled = instance.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            count += polled.records.len() as u64;
            bytes += batch_bytes(&polled);
        }
        let component = BenchRow { path: "component", records: count, elapsed: started.elapsed(), bytes };
        for (slot, row) in best.iter_mut().zip([native, native_records, native_copied, component]) {
            if slot.as_ref().is_none_or(|b| row.records_per_second() > b.records_per_second()) {
                *slot = Some(row);
            }
        }
    }
    let _ = std::fs::remove_dir_all(scratch.root());
    Ok(best.into_iter().flatten().collect())
}

/// The bytes of a batch as [`record_bytes`] counts them, each record with its partition and
/// topic (which the batch carries once).
fn batch_bytes(batch: &PollBatch) -> u64 {
    let text = |list: &[String], index: Option<u32>| index.and_then(|i| list.get(i as usize)).map_or(0, String::len);
    batch
        .records
        .iter()
        .map(|r| {
            (r.value.map_or(0, |span| span.len as usize)
                + text(&batch.partitions, Some(r.partition))
                + r.offset.len as usize
                + text(&batch.topics, r.topic)) as u64
        })
        .sum()
}

fn record_bytes(record: &SourceRecord) -> u64 {
    (record.value.as_ref().map_or(0, Vec::len)
        + record.partition.len()
        + record.offset.len()
        + record.topic.as_ref().map_or(0, String::len)) as u64
}

/// The counter's `poll_into`, natively: each record's offset and value written into one
/// buffer, named by spans, the partition and topic once per batch; with `copy_out`, the
/// buffer and spans are then copied into new ones, as a batch is lifted out of a sandbox.
fn native_round(records: u64, size: usize, batch: usize, copy_out: bool) -> BenchRow {
    use sluice::runtime::bindings::Span;
    let started = Instant::now();
    let (mut count, mut bytes, mut next) = (0u64, 0u64, 0u64);
    // Sized as the SDK sizes a batch: for what the one before it held.
    let mut last_bytes = 0;
    while count < records {
        let (partition, topic) = (counter::generator::partition(0), "bench".to_string());
        let mut data: Vec<u8> = Vec::with_capacity(last_bytes);
        let mut spans: Vec<(Span, Span)> = Vec::with_capacity(batch);
        let mut task_digits = itoa::Buffer::new();
        let task = task_digits.format(0u32);
        let mut seq_digits = itoa::Buffer::new();
        for seq in next..next + batch as u64 {
            let seq = seq_digits.format(seq);
            let start = data.len() as u32;
            counter::generator::write_offset_text(&mut data, seq);
            let at = data.len() as u32;
            counter::generator::write_value_text(&mut data, task, seq, size);
            let end = data.len() as u32;
            spans.push((Span { start, len: at - start }, Span { start: at, len: end - at }));
        }
        last_bytes = data.len();
        let (data, spans) = if copy_out { (data.to_vec(), spans.to_vec()) } else { (data, spans) };
        let polled = std::hint::black_box((partition, topic, data, spans));
        next += polled.3.len() as u64;
        count += polled.3.len() as u64;
        bytes += polled
            .3
            .iter()
            .map(|(o, v)| u64::from(o.len + v.len) + (polled.0.len() + polled.1.len()) as u64)
            .sum::<u64>();
    }
    let path = if copy_out { "native + copy" } else { "native" };
    BenchRow { path, records: count, elapsed: started.elapsed(), bytes }
}

/// The same records, each built as a record value of its own (a `String` or `Vec` per
/// field), as a plugin returning `Vec<Record>` builds them.
fn native_records_round(records: u64, size: usize, batch: usize) -> BenchRow {
    let started = Instant::now();
    let (mut count, mut bytes, mut next) = (0u64, 0u64, 0u64);
    while count < records {
        let polled: Vec<SourceRecord> = counter::generator::batch(0, next, batch, 0, size)
            .into_iter()
            .map(|g| SourceRecord {
                partition: g.partition,
                offset: g.offset,
                topic: Some("bench".to_string()),
                key: None,
                value: Some(g.value),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        let polled = std::hint::black_box(polled);
        next += polled.len() as u64;
        count += polled.len() as u64;
        bytes += polled.iter().map(record_bytes).sum::<u64>();
    }
    BenchRow { path: "native records", records: count, elapsed: started.elapsed(), bytes }
}

pub fn print_table(rows: &[BenchRow], size: usize, batch: usize) {
    println!("poll throughput, {size}-byte values, {batch} records per poll (best of the rounds)");
    println!("{:<15} {:>10} {:>9} {:>12} {:>9}", "path", "records", "seconds", "records/s", "MB/s");
    for row in rows {
        println!(
            "{:<15} {:>10} {:>9.3} {:>12.0} {:>9.1}",
            row.path,
            row.records,
            row.elapsed.as_secs_f64(),
            row.records_per_second(),
            row.bytes as f64 / row.elapsed.as_secs_f64() / 1e6
        );
    }
    if let [native, native_records, native_copied, component] = rows {
        println!("ratio component/native: {:.2}", component.records_per_second() / native.records_per_second());
        println!(
            "ratio component/native records: {:.2}",
            component.records_per_second() / native_records.records_per_second()
        );
        println!(
            "ratio (native + copy)/native: {:.2} (the most a plugin whose batches are copied out of its sandbox can reach)",
            native_copied.records_per_second() / native.records_per_second()
        );
    }
}
