//! Concurrent requests: 50 parallel creates of one name give exactly one 201 (the rest
//! 409), a create racing a delete of its name is a 201 or a 409 (never a 404), 200
//! connectors created through the API by parallel clients are all listed with their
//! status, and a create whose plugin's `validate` sleeps to its deadline holds up no read
//! and no other change; connections past the most the API holds wait in the backlog. (How
//! fast that list answers is `sluice-bench rest`.)

use std::sync::{Arc, Barrier};

use serde_json::json;

use super::{Server, plugin_folder};
use crate::wait_until;

#[test]
fn parallel_creates_of_one_name_make_one_connector() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None));
    let barrier = Arc::new(Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let (server, barrier) = (server.clone(), barrier.clone());
            std::thread::spawn(move || {
                // Each a different config, so the winner is visible.
                let body = json!({"name": "same", "config": {"connector.class": "counter", "topic": format!("t{i}")}});
                barrier.wait();
                let reply = server.call("POST", "/connectors", None, Some(&body.to_string()));
                (i, reply)
            })
        })
        .collect();
    let replies: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let created: Vec<_> = replies.iter().filter(|(_, r)| r.status == 201).collect();
    assert_eq!(
        created.len(),
        1,
        "exactly one create wins: {:?}",
        replies.iter().map(|(_, r)| r.status).collect::<Vec<_>>()
    );
    for (_, reply) in replies.iter().filter(|(_, r)| r.status != 201) {
        assert!(reply.assert_error(409).contains("already exists"));
    }
    let winner = created[0].0;
    assert_eq!(server.get("/connectors").json(), json!(["same"]));
    assert_eq!(server.get("/connectors/same/config").json()["topic"], format!("t{winner}"));
    server.wait_for("the winner running", "/connectors/same/status", None, |s| s["connector"]["state"] == "RUNNING");
}

#[test]
fn a_create_racing_a_delete_of_its_name_is_created_or_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None));
    let body = json!({"name": "race", "config": {"connector.class": "counter", "topic": "race"}}).to_string();
    for round in 0..20 {
        let barrier = Arc::new(Barrier::new(2));
        let (creator, deleter) = (server.clone(), server.clone());
        let (body, b1, b2) = (body.clone(), barrier.clone(), barrier);
        let create = std::thread::spawn(move || {
            b1.wait();
            creator.call("POST", "/connectors", None, Some(&body))
        });
        let delete = std::thread::spawn(move || {
            b2.wait();
            deleter.call("DELETE", "/connectors/race", None, None).status
        });
        let (created, deleted) = (create.join().unwrap(), delete.join().unwrap());
        assert!(matches!(created.status, 201 | 409), "round {round}: {created:?}");
        if created.status == 201 {
            assert_eq!(created.json()["name"], "race", "round {round}: {created:?}");
        }
        assert!(matches!(deleted, 204 | 404), "round {round}: delete answered {deleted}");
    }
}

#[test]
fn two_hundred_connectors_created_in_parallel_are_all_listed_with_their_status() {
    const CONNECTORS: usize = 200;
    const CLIENTS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = server.clone();
            std::thread::spawn(move || {
                for n in (client..CONNECTORS).step_by(CLIENTS) {
                    let body = json!({"name": format!("c{n:03}"), "config": {
                        "connector.class": "counter", "topic": format!("t{n:03}"), "record.count": "3"}});
                    let reply = server.call("POST", "/connectors", None, Some(&body.to_string()));
                    assert_eq!(reply.status, 201, "c{n:03}: {reply:?}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let names = server.get("/connectors").json();
    let expected: Vec<String> = (0..CONNECTORS).map(|n| format!("c{n:03}")).collect();
    assert_eq!(names, json!(expected));
    let listed = wait_until("every connector RUNNING", || {
        let listed = server.get("/connectors?expand=status&expand=info").json();
        let all = listed.as_object().unwrap();
        (all.len() == CONNECTORS && all.values().all(|c| c["status"]["connector"]["state"] == "RUNNING"))
            .then_some(listed)
    });
    for name in &expected {
        assert_eq!(listed[name]["info"]["config"]["topic"], name.replace('c', "t"));
        assert_eq!(listed[name]["status"]["name"], name.as_str());
    }
}

#[test]
fn parallel_patches_of_different_keys_all_stay() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None));
    let body = json!({"name": "p", "config": {"connector.class": "counter", "topic": "p", "records.per.second": "10"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (server, barrier) = (server.clone(), barrier.clone());
            std::thread::spawn(move || {
                let patch = json!({ format!("note.{i}"): i.to_string() }).to_string();
                barrier.wait();
                server.call("PATCH", "/connectors/p/config", None, Some(&patch)).status
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 200);
    }
    let config = server.get("/connectors/p/config").json();
    for i in 0..8 {
        assert_eq!(config[format!("note.{i}")], i.to_string(), "a patch was lost: {config}");
    }
}

#[test]
fn a_create_waiting_on_a_plugins_validate_holds_up_no_read_and_no_other_change() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter", "hostile"]), None));
    let steady = json!({"name": "steady", "config": {"connector.class": "counter", "topic": "steady", "records.per.second": "10"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&steady.to_string())).status, 201);
    server.wait_for("steady running", "/connectors/steady/status", None, |s| s["connector"]["state"] == "RUNNING");
    // `validate` sleeps past its 10 s deadline: the create answers 400 after it.
    let slow = json!({"name": "slow", "config": {"connector.class": "hostile", "topic": "slow",
        "hostile.attack": "sleep-in-validate", "hostile.sleep.ms": "60000"}});
    let creator = server.clone();
    let asked = std::time::Instant::now();
    let create = std::thread::spawn(move || {
        let reply = creator.call("POST", "/connectors", None, Some(&slow.to_string()));
        (reply, asked.elapsed())
    });
    // While it waits, reads and another connector's changes answer as if it were not
    // there. A read that waited for the create would take its 10 s.
    let mut answered_meanwhile = 0;
    let mut slowest = std::time::Duration::ZERO;
    let mut paused = false;
    while !create.is_finished() {
        let started = std::time::Instant::now();
        assert_eq!(server.get("/connectors/steady/status").json()["name"], "steady");
        assert_eq!(server.get("/connectors").json(), json!(["steady"]));
        assert_eq!(server.get("/health").status, 200);
        if !paused {
            assert_eq!(server.call("PUT", "/connectors/steady/pause", None, None).status, 202);
            paused = true;
        }
        let took = started.elapsed();
        if !create.is_finished() {
            answered_meanwhile += 1;
            slowest = slowest.max(took);
        }
    }
    let (refused, waited) = create.join().unwrap();
    assert!(refused.assert_error(400).contains("validate"), "{refused:?}");
    // One deadline, not two: the refusal is not looked into again by calling the plugin
    // once more to list every problem (two waits take at least 20 s, however fast).
    assert!(waited < std::time::Duration::from_secs(20), "the create waited {waited:?}: validate was called twice");
    assert!(answered_meanwhile >= 3, "only {answered_meanwhile} rounds of reads while the create waited");
    assert!(slowest < std::time::Duration::from_secs(5), "a read waited {slowest:?} behind the create");
    server.wait_for("steady paused", "/connectors/steady/status", None, |s| s["connector"]["state"] == "PAUSED");
    assert_eq!(server.get("/connectors").json(), json!(["steady"]));
}

/// A patch is admitted as a create is, its plugin's `validate` called without the lock
/// that changes take: while one tenant's patch waits on a `validate` that runs to its
/// deadline, other connectors are paused and created at once, and the patch is then
/// refused saying why, the connector left as it was.
#[test]
fn a_patch_waiting_on_a_plugins_validate_holds_up_no_other_change() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        Arc::new(Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter", "hostile"]), None));
    let steady = json!({"name": "steady", "config": {"connector.class": "counter", "topic": "steady", "records.per.second": "10"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&steady.to_string())).status, 201);
    let slow = json!({"name": "slow", "config": {"connector.class": "hostile", "topic": "slow",
        "hostile.attack": "sleep-in-validate", "hostile.sleep.ms": "0"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&slow.to_string())).status, 201);
    server.wait_for("steady running", "/connectors/steady/status", None, |s| s["connector"]["state"] == "RUNNING");
    // Now its `validate` sleeps past its 10 s deadline.
    let patcher = server.clone();
    let patch = std::thread::spawn(move || {
        patcher.call("PATCH", "/connectors/slow/config", None, Some(r#"{"hostile.sleep.ms": "60000"}"#))
    });
    let mut changes_meanwhile = 0;
    let mut slowest = std::time::Duration::ZERO;
    let mut made = 0;
    while !patch.is_finished() {
        let started = std::time::Instant::now();
        let (pause, resume) = ("/connectors/steady/pause", "/connectors/steady/resume");
        assert_eq!(server.call("PUT", if made % 2 == 0 { pause } else { resume }, None, None).status, 202);
        if made < 5 {
            let other = json!({"name": format!("made-{made}"), "config": {"connector.class": "counter", "topic": "m",
                "records.per.second": "1"}});
            let created = server.call("POST", "/connectors", None, Some(&other.to_string()));
            assert_eq!(created.status, 201, "{created:?}");
        } else {
            assert_eq!(server.get("/connectors/steady/status").json()["name"], "steady");
        }
        made += 1;
        let took = started.elapsed();
        if !patch.is_finished() {
            changes_meanwhile += 1;
            slowest = slowest.max(took);
        }
    }
    let refused = patch.join().unwrap();
    assert!(refused.assert_error(400).contains("validate"), "{refused:?}");
    assert!(changes_meanwhile >= 3, "only {changes_meanwhile} rounds of changes while the patch waited");
    assert!(slowest < std::time::Duration::from_secs(5), "a change waited {slowest:?} behind the patch");
    assert_eq!(server.get("/connectors/slow/config").json()["hostile.sleep.ms"], "0", "the refused patch changed it");
}

/// A change whose client goes away before it is answered (a client's timeout shorter than
/// a connector's stop, Ctrl-C) runs to its end all the same: a delete takes the connector
/// out of the list and the metrics, an update starts the connector with its new config.
#[test]
fn a_change_whose_client_goes_away_is_finished_all_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter", "hostile"]), None);
    // Its `stop` sleeps 3 s: each change below takes that long.
    let config = |topic: &str| {
        json!({"connector.class": "hostile", "topic": topic, "hostile.attack": "sleep-in-stop",
            "hostile.sleep.ms": "3000"})
        .to_string()
    };
    let good =
        json!({"name": "good", "config": {"connector.class": "counter", "topic": "n", "records.per.second": "10"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&good.to_string())).status, 201);
    assert_eq!(server.call("PUT", "/connectors/slow/config", None, Some(&config("first"))).status, 201);
    server.wait_for("slow running", "/connectors/slow/status", None, |s| s["connector"]["state"] == "RUNNING");
    // A client that waits 1 s for the answer, then gives up and closes its connection.
    let send_and_leave = |method: &str, path: &str, body: &str| {
        let agent = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(1)).build();
        let request = agent.request(method, &format!("{}{path}", server.base)).set("Content-Type", "application/json");
        let answer = if body.is_empty() { request.call() } else { request.send_string(body) };
        assert!(matches!(answer, Err(ureq::Error::Transport(_))), "answered within 1 s: {answer:?}");
    };
    send_and_leave("PUT", "/connectors/slow/config", &config("second"));
    server.wait_for("slow running with its new config", "/connectors/slow/config", None, |c| c["topic"] == "second");
    server.wait_for("slow running again", "/connectors/slow/status", None, |s| s["connector"]["state"] == "RUNNING");
    assert!(server.get("/connectors").json().as_array().unwrap().contains(&json!("slow")));
    send_and_leave("DELETE", "/connectors/slow", "");
    wait_until("slow gone from the list and the metrics", || {
        let listed = server.get("/connectors").json();
        let metrics = server.get("/metrics").body;
        (listed == json!(["good"])
            && !metrics.contains("connector=\"slow\"")
            && metrics.contains("sluice_connector_count 1"))
        .then_some(())
    });
}

/// Thousands of connections that never finish a request (a slowloris) hold at most
/// `MAX_CONNECTIONS` descriptors of the worker: the rest wait in the listener's backlog, so
/// the connectors keep the descriptors they need to list and read files (20,000 such
/// connections once took them all). Once the clients go, the API answers again.
#[test]
fn connections_past_the_most_wait_in_the_backlog_holding_no_descriptor() {
    use std::io::Write;
    // Past the most, no more than the listen backlog holds (else connects wait on SYN
    // retries).
    const CLIENTS: usize = sluice::api::MAX_CONNECTIONS + 50;
    raise_open_file_limit();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None);
    let pid = server.pid();
    let open_files = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| fds.count());
    let before = open_files();
    let address = server.base.trim_start_matches("http://").to_string();
    let clients: Vec<std::net::TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut client = std::net::TcpStream::connect(&address).unwrap();
            client.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
            client
        })
        .collect();
    wait_until("the server to say it holds its most connections", || {
        server.log().contains("connections open, its most").then_some(())
    });
    let held = open_files();
    assert!(
        held <= before + sluice::api::MAX_CONNECTIONS + 8,
        "{held} descriptors open with {CLIENTS} clients ({before} before)"
    );
    drop(clients);
    wait_until("the API to answer again", || (server.get("/health").status == 200).then_some(()));
}

/// This process's soft limit on open files raised to its hard one, for its clients.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
