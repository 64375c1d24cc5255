//! The benchmark binary runs end to end on small inputs and prints its tables (the
//! figures themselves are not asserted: speed is measured, never tested).

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench")).args(args).env("SLUICE_LOG", "warn").output().unwrap()
}

fn table(output: Output) -> String {
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn poll_prints_both_paths_and_the_ratio() {
    let table = table(bench(&["poll", "--records", "2000", "--rounds", "1"]));
    assert!(table.lines().any(|l| l.starts_with("native ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("native + copy ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("component ")), "{table}");
    assert!(table.contains("ratio component/native: "), "{table}");
    assert!(table.contains("ratio (native + copy)/native: "), "{table}");
}

#[test]
fn files_prints_native_local_and_stdout() {
    let table = table(bench(&["files", "--mib", "2"]));
    for path in ["native ", "native json ", "native sqlite ", "log alone ", "local ", "stdout "] {
        assert!(table.lines().any(|l| l.starts_with(path)), "{path}: {table}");
    }
    assert!(table.lines().any(|l| l.starts_with("local ") && l.ends_with(" of native sqlite")), "{table}");
}

#[test]
fn record_path_prints_every_row_with_its_native_ratio() {
    let table = table(bench(&["record-path", "--mib", "2", "--records", "2000"]));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| path"))
        .map(|l| l.split(" | ").collect())
        .collect();
    assert_eq!(rows.len(), 8, "{table}");
    for row in &rows[..4] {
        assert!(row[3].parse::<f64>().is_ok_and(|ratio| ratio > 0.0), "no ratio: {row:?}");
    }
    assert!(rows[4][0].contains("Python (counter-py)") && rows[5][0].contains("JavaScript (counter-js)"), "{table}");
    assert!(
        rows[6][0].contains("Python (sensor-fleet)") && rows[7][0].contains("JavaScript (ndjson-replay)"),
        "{table}"
    );
    for kib in [1, 16] {
        let bound = format!("poll, {kib} KiB records: the native work plus one copy of each batch out");
        assert!(
            table.lines().any(|l| l.starts_with(&bound) && l.ends_with("the most a component can reach")),
            "{table}"
        );
    }
}

#[test]
fn fairness_prints_both_runs_and_the_ratio() {
    let table = table(bench(&["fairness", "--busy", "1", "--seconds", "1"]));
    assert!(table.lines().any(|l| l.starts_with("alone ")), "{table}");
    assert!(table.contains("ratio beside/alone: "), "{table}");
}

#[test]
fn directory_prints_flat_and_nested_rows() {
    let table = table(bench(&["directory", "--files", "200"]));
    assert!(table.lines().any(|l| l.contains(" flat ")), "{table}");
    assert!(table.lines().any(|l| l.contains(" nested ")), "{table}");
}

#[test]
fn rest_prints_each_listing() {
    let table = table(bench(&["rest", "--connectors", "5", "--requests", "3"]));
    for request in ["?expand=status ", "?expand=status&expand=info ", "(names only) "] {
        assert!(table.lines().any(|l| l.starts_with(request)), "{request}: {table}");
    }
}

#[test]
fn kafka_prints_the_bare_producer_and_sluice_on_the_mock_cluster() {
    let table = table(bench(&["kafka", "--mock", "--mib", "2"]));
    for path in ["rdkafka ", "sluice "] {
        assert!(table.lines().any(|l| l.starts_with(path)), "{path}: {table}");
    }
}

#[test]
fn density_starts_every_task_and_prints_memory_and_cpu() {
    let table = table(bench(&[
        "density",
        "--connectors",
        "20",
        "--tasks",
        "2",
        "--settle",
        "1",
        "--idle-ms",
        "1000,2000",
        "--idle-polls",
        "20,0",
    ]));
    // 40 idle tasks on a budget of 20 empty polls a second pause 2 s; a 2 s pause is not
    // lengthened by it, so that run is skipped.
    for (idle_ms, budget, pause) in
        [("1000", "20", "2000 ms"), ("1000", "0 (none)", "1000 ms"), ("2000", "0 (none)", "2000 ms")]
    {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {idle_ms} | {budget} |")))
            .unwrap_or_else(|| panic!("no row for {idle_ms} ms, budget {budget}: {table}"));
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells[2], pause, "{table}");
        assert_eq!(cells[3..5], ["40", "0"], "every task running, none failed: {table}");
        assert!(cells[6].ends_with(" MiB") && cells[8].ends_with(" %"), "{table}");
    }
    assert!(!table.contains("| 2000 | 20 |"), "{table}");
    // The floor beside it: timers alone and empty calls alone, each a figure.
    for part in
        ["| tokio tasks that only sleep 1000 ms in a loop |", "| an empty poll of a cold idle counter instance |"]
    {
        let row = table.lines().find(|l| l.starts_with(part)).unwrap_or_else(|| panic!("no floor row {part}: {table}"));
        assert!(row.contains(" µs a ") && row.trim_end_matches('|').trim_end().ends_with('%'), "{row}");
    }
}

#[test]
fn startup_prints_a_cold_and_a_warm_first_record() {
    let table = table(bench(&["startup"]));
    for start in ["| cold compile cache | ", "| warm compile cache | "] {
        let row = table.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{start}: {table}"));
        let millis = row[start.len()..].split(' ').next().unwrap();
        assert!(millis.parse::<u64>().is_ok(), "{row}");
    }
}

#[test]
fn latency_prints_the_median_and_p99_of_dropped_files() {
    let table = table(bench(&["latency", "--files", "5", "--interval-ms", "200"]));
    let row = table.lines().find(|l| l.starts_with("| 200 |")).unwrap_or_else(|| panic!("a row: {table}"));
    let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
    for cell in &cells[1..4] {
        let millis = cell.strip_suffix(" ms").unwrap_or_else(|| panic!("{row}"));
        assert!(millis.parse::<u64>().is_ok(), "{row}");
    }
}
