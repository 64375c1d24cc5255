//! SIGKILL of `sluice serve` while two tenants' connectors (file-pulse and counter) run,
//! one paused and one stopped through the API: after every restart each connector is back
//! in its target state (the paused and stopped ones deliver nothing), and once resumed the
//! local topics hold every record exactly once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Server, all_in, assert_counter_exactly_once, counter_records, plugin_folder};
use crate::files::drop_mixed;
use crate::{crash_rng, wait_until};

const ACME: &str = "acme-token";
const GLOBEX: &str = "globex-token";
const KILLS: usize = 6;
const COUNT: u64 = 2500;

fn counter(name: &str, tasks: u32) -> String {
    json!({"name": name, "config": {"connector.class": "counter", "topic": name, "tasks.max": tasks.to_string(),
        "record.count": COUNT.to_string(), "records.per.second": "150", "batch.size": "10"}})
    .to_string()
}

fn pulse(inbox: &Path) -> String {
    json!({"name": "files", "config": {"connector.class": "file-pulse", "tasks.max": "2", "topic": "lines",
        "fs.listing.directory.path": inbox, "fs.listing.interval.ms": "100", "fs.cleanup.policy": "delete",
        "sandbox.fs.write": inbox, "poll.max.records": "200"}})
    .to_string()
}

/// Records in a tenant's topics.
fn stored(data: &Path, tenant: &str) -> BTreeMap<String, u64> {
    crate::stores(data)
        .ok()
        .and_then(|db| db.local().topics(tenant).ok())
        .map(|t| t.into_iter().collect())
        .unwrap_or_default()
}

fn total(data: &Path) -> u64 {
    stored(data, "acme").values().sum::<u64>() + stored(data, "globex").values().sum::<u64>()
}

/// The lines of the `lines` topic of `tenant`, by file.
fn delivered_lines(data: &Path, tenant: &str) -> BTreeMap<String, Vec<String>> {
    let db = crate::stores(data).unwrap();
    let mut delivered: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in db.local().read(tenant, "lines", 0, usize::MAX >> 1).unwrap() {
        let key = String::from_utf8(record.record.key.unwrap().to_vec()).unwrap();
        delivered.entry(key).or_default().push(String::from_utf8(record.record.value.unwrap().to_vec()).unwrap());
    }
    delivered
}

fn counter_done(offsets: &Value, tasks: usize) -> bool {
    offsets["offsets"]
        .as_array()
        .is_some_and(|list| list.len() == tasks && list.iter().all(|o| o["offset"]["seq"].as_u64() == Some(COUNT - 1)))
}

#[test]
fn sigkill_brings_every_connector_back_in_its_target_state_exactly_once() {
    let mut rng = crash_rng();
    let dir = tempfile::tempdir().unwrap();
    let inbox = |tenant: &str| {
        let path = dir.path().join(tenant).join("inbox");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::canonicalize(path).unwrap()
    };
    let (acme_inbox, globex_inbox) = (inbox("acme"), inbox("globex"));
    let toml = format!(
        "[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n\n\
         [[tenant]]\nname = \"globex\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n",
        sluice::config::hash_token(ACME),
        acme_inbox.display(),
        sluice::config::hash_token(GLOBEX),
        globex_inbox.display(),
    );
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml).unwrap();
    let data = dir.path().join("data");
    let plugins = plugin_folder(dir.path(), &["counter", "file-pulse"]);
    let mut acme_files = drop_mixed(&acme_inbox, "acme", 12, 2, 20_000);
    let globex_files = drop_mixed(&globex_inbox, "globex", 12, 2, 20_000);

    let mut server = Server::start(&data, &plugins, Some(&config));
    for (token, body) in [
        (ACME, pulse(&acme_inbox)),
        (ACME, counter("count", 2)),
        (GLOBEX, pulse(&globex_inbox)),
        (GLOBEX, counter("count", 1)),
        (GLOBEX, counter("ticks", 2)),
    ] {
        let created = server.call("POST", "/connectors", Some(token), Some(&body));
        assert_eq!(created.status, 201, "{created:?}");
    }
    // Once both counters have delivered some records: acme's is stopped, globex's paused.
    wait_until("both counters delivering", || {
        (stored(&data, "acme").get("count").is_some_and(|n| *n > 100)
            && stored(&data, "globex").get("count").is_some_and(|n| *n > 100))
        .then_some(())
    });
    assert_eq!(server.call("PUT", "/connectors/count/stop", Some(ACME), None).status, 204);
    assert_eq!(server.call("PUT", "/connectors/count/pause", Some(GLOBEX), None).status, 202);
    server.wait_for("globex's count paused", "/connectors/count/status", Some(GLOBEX), |s| all_in(s, "PAUSED", 1));
    let acme_count_at_stop = stored(&data, "acme")["count"];
    let globex_count_at_pause = stored(&data, "globex")["count"];

    for kill in 0..KILLS {
        if kill == KILLS / 2 {
            acme_files.extend(drop_mixed(&acme_inbox, "acme-late", 6, 1, 20_000));
        }
        if kill > 0 {
            server = Server::start(&data, &plugins, Some(&config));
        }
        // Back in their target states.
        let acme = server
            .wait_for("acme's count STOPPED", "/connectors/count/status", Some(ACME), |s| all_in(s, "STOPPED", 0));
        assert_eq!(acme["tasks"], json!([]));
        server.wait_for("globex's count PAUSED", "/connectors/count/status", Some(GLOBEX), |s| all_in(s, "PAUSED", 1));
        // (file-pulse drops tasks it has no files for, so only the connector's state is sure.)
        server
            .wait_for("globex's ticks RUNNING", "/connectors/ticks/status", Some(GLOBEX), |s| all_in(s, "RUNNING", 2));
        server.wait_for("acme's files RUNNING", "/connectors/files/status", Some(ACME), |s| {
            s["connector"]["state"] == "RUNNING"
        });
        // Most kills land while lines flow; every third at any moment.
        if kill % 3 != 2 {
            let before = total(&data);
            let all: usize = acme_files.values().chain(globex_files.values()).map(Vec::len).sum();
            let target = acme_count_at_stop + globex_count_at_pause + all as u64;
            wait_until("records to flow", || (total(&data) > before || total(&data) >= target).then_some(()));
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..400)));
        server.kill();
        assert_eq!(stored(&data, "acme")["count"], acme_count_at_stop, "the STOPPED connector delivered records");
        assert_eq!(stored(&data, "globex")["count"], globex_count_at_pause, "the PAUSED connector delivered records");
    }

    let ticks_during_kills = stored(&data, "globex")["ticks"];
    let mut server = Server::start(&data, &plugins, Some(&config));
    assert_eq!(server.call("PUT", "/connectors/count/resume", Some(ACME), None).status, 202);
    assert_eq!(server.call("PUT", "/connectors/count/resume", Some(GLOBEX), None).status, 202);
    server.wait_for("acme's count done", "/connectors/count/offsets", Some(ACME), |o| counter_done(o, 2));
    server.wait_for("globex's count done", "/connectors/count/offsets", Some(GLOBEX), |o| counter_done(o, 1));
    server.wait_for("globex's ticks done", "/connectors/ticks/offsets", Some(GLOBEX), |o| counter_done(o, 2));
    wait_until("every file delivered and deleted", || {
        let empty = |inbox: &Path| std::fs::read_dir(inbox).unwrap().next().is_none();
        let lines = acme_files.values().chain(globex_files.values()).map(Vec::len).sum::<usize>() as u64;
        let delivered = stored(&data, "acme").get("lines").copied().unwrap_or(0)
            + stored(&data, "globex").get("lines").copied().unwrap_or(0);
        (empty(&acme_inbox) && empty(&globex_inbox) && delivered >= lines).then_some(())
    });
    assert!(server.terminate().success());

    assert_counter_exactly_once(&counter_records(&data, "acme", "count"), 2, COUNT, "acme's count");
    assert_counter_exactly_once(&counter_records(&data, "globex", "count"), 1, COUNT, "globex's count");
    assert_counter_exactly_once(&counter_records(&data, "globex", "ticks"), 2, COUNT, "globex's ticks");
    assert!(
        ticks_during_kills < 2 * COUNT,
        "the kills landed while ticks streamed ({ticks_during_kills} records by then)"
    );
    for (tenant, expected) in [("acme", &acme_files), ("globex", &globex_files)] {
        let delivered = delivered_lines(&data, tenant);
        assert_eq!(delivered.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{tenant}'s files");
        for (name, lines) in expected {
            assert_eq!(&delivered[name], lines, "{tenant}'s {name}: lines lost, duplicated or out of order");
        }
    }
    let lines: usize = acme_files.values().chain(globex_files.values()).map(Vec::len).sum();
    println!("{KILLS} kills: {lines} lines and {} counter records, none lost or duplicated", 5 * COUNT);
}
