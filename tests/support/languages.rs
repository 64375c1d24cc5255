//! What the Python (`sensor-fleet`) and JavaScript (`ndjson-replay`) connectors must
//! produce, worked out independently of them: a Rust port of the fleet's value generator
//! and the bundled NDJSON files read from the source tree.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

const EPOCH_MS: u64 = 1_767_225_600_000;

fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Reading `seq` of sensor `number` with `seed` and the default 1 s interval.
pub fn sensor_reading(seed: u64, number: u64, seq: u64) -> Value {
    let h = mix(mix(mix(seed) ^ number) ^ seq);
    json!({
        "sensor": format!("sensor-{number:04}"),
        "seq": seq,
        "ts": EPOCH_MS + seq * 1000,
        "temperature_cc": 1500 + h % 1500,
        "humidity_pm": 300 + (h >> 16) % 500,
        "battery_pm": 1000 - (seq / 100).min(1000),
    })
}

/// Groups JSON values by one of their fields, keeping topic order inside each group.
pub fn group_by(values: &[String], field: &str) -> BTreeMap<String, Vec<Value>> {
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for text in values {
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        groups.entry(value[field].as_str().unwrap().to_string()).or_default().push(value);
    }
    groups
}

/// Asserts that every sensor of the fleet sent readings `0..readings` exactly once, in
/// order, with exactly the generated values (ignoring `record.min.bytes` padding).
pub fn assert_fleet_complete(values: &[String], fleet: u64, readings: u64, seed: u64) {
    let by_sensor = group_by(values, "sensor");
    assert_eq!(by_sensor.len() as u64, fleet, "sensors seen: {:?}", by_sensor.keys().collect::<Vec<_>>());
    for (number, (sensor, got)) in by_sensor.iter().enumerate() {
        let seqs: Vec<u64> = got.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (0..readings).collect::<Vec<_>>(), "{sensor}: readings lost, repeated or out of order");
        for (seq, value) in got.iter().enumerate() {
            // `record.min.bytes` adds a `pad` field of dots; the reading is the rest.
            let mut value = value.clone();
            if let Some(pad) = value.as_object_mut().unwrap().remove("pad") {
                assert!(pad.as_str().unwrap().bytes().all(|b| b == b'.'), "{sensor} reading {seq}: bad pad");
            }
            assert_eq!(value, sensor_reading(seed, number as u64, seq as u64), "{sensor} reading {seq}");
        }
    }
}

/// The lines of a file bundled with the JavaScript connector.
pub fn bundled_lines(file: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/ndjson-replay/data").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(str::to_string).collect()
}

/// Asserts that the replayed values are each bundled file's lines, `loops` times over, in
/// order within each file and nothing else. `values` are (key, value) pairs; the key is
/// `<file>:<line>`.
pub fn assert_replay_complete(records: &[(String, String)], files: &[&str], loops: usize) {
    let mut by_file: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (key, value) in records {
        let (file, _) = key.split_once(':').unwrap_or_else(|| panic!("unexpected key {key}"));
        by_file.entry(file).or_default().push(value);
    }
    assert_eq!(by_file.keys().copied().collect::<Vec<_>>(), files.to_vec(), "files replayed");
    for file in files {
        let lines = bundled_lines(file);
        let expected: Vec<&str> = (0..loops).flat_map(|_| lines.iter().map(String::as_str)).collect();
        let got = &by_file[file];
        assert_eq!(got.len(), expected.len(), "{file}: {} lines, expected {}", got.len(), expected.len());
        assert!(got.iter().eq(expected.iter()), "{file}: lines lost, repeated, changed or out of order");
    }
}
