//! The web console in a real headless Chromium against a real `sluice serve`: a tenant signs
//! in and takes a counter connector from the create form to deletion (`a_tenant_...`), the
//! operator sees every tenant; file-pulse's per-file progress, a FAILED connector's trace
//! and a connector named like an XSS payload (`progress_failures_and_hostile_names`); 200
//! connectors (`two_hundred_connectors`). Each test writes screenshots of the pages it
//! visits to `target/console-screenshots/` (`$SLUICE_CONSOLE_SCREENSHOTS` to put them
//! elsewhere: `docs/console` refreshes the README's).

mod webdriver;

use std::path::PathBuf;

use serde_json::{Value, json};

use self::webdriver::Browser;
use crate::rest::{Server, all_in, plugin_folder};
use crate::wait_until;

const ACME: &str = "acme-console-token";
const GLOBEX: &str = "globex-console-token";
const OPERATOR: &str = "operator-console-token";

fn screenshot_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("SLUICE_CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(sluice::BUILT_PLUGINS).parent().unwrap().join("console-screenshots"));
    dir.join(format!("{name}.png"))
}

/// No script error and no Content-Security-Policy violation in the browser's console.
fn assert_no_script_errors(browser: &Browser) {
    let errors: Vec<String> = browser
        .severe_logs()
        .into_iter()
        .filter(|m| m.contains("Uncaught") || m.contains("Content Security Policy") || m.contains("TypeError"))
        .collect();
    assert!(errors.is_empty(), "script errors in the console: {errors:#?}");
}

/// The text of one cell (`.state`, `.tasks`, `.rate`, ...) of a connector's overview row.
fn row_cell(browser: &Browser, connector: &str, cell: &str) -> Option<String> {
    let found = browser.script(
        "for (const row of document.querySelectorAll('#connectors tbody tr')) { \
           if (row.dataset.connector === arguments[0]) { \
             const c = row.querySelector(arguments[1]); return c ? c.textContent : null; } } \
         return null;",
        json!([connector, cell]),
    );
    found.as_str().map(String::from)
}

fn counter_config(name: &str) -> String {
    json!({"name": name, "config": {"connector.class": "counter", "topic": name, "records.per.second": "20"}})
        .to_string()
}

#[test]
fn a_tenant_signs_in_and_runs_a_counter_from_create_to_delete() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[operator]\ntoken_sha256 = \"{}\"\n\n[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\n\n\
         [[tenant]]\nname = \"globex\"\ntoken_sha256 = \"{}\"\n",
        sluice::config::hash_token(OPERATOR),
        sluice::config::hash_token(ACME),
        sluice::config::hash_token(GLOBEX),
    );
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml).unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), Some(&config));
    assert_eq!(server.call("POST", "/connectors", Some(GLOBEX), Some(&counter_config("globex-secret"))).status, 201);

    let browser = Browser::start();
    browser.goto(&format!("{}/", server.base));
    browser.element("#token");
    browser.screenshot(&screenshot_path("sign-in"));

    // A wrong token is refused with the API's reason; the tenant's token signs in.
    browser.type_into("#token", "not-a-token");
    browser.click("#sign-in");
    browser.wait_text("#signin-message", "the refusal", |t| t.contains("refused") && t.contains("not valid"));
    browser.type_into("#token", ACME);
    browser.click("#sign-in");
    browser.wait_text("main", "acme's empty overview", |t| t.contains("No connectors yet"));
    assert!(!browser.text("main").contains("globex-secret"), "a tenant sees another tenant's connector");

    // Create a counter from the plugin's form; a bad value is shown beside its key first.
    browser.click("#nav-plugins");
    browser.click("#plugins tr[data-plugin='counter'] details summary");
    browser.wait_text("#plugins tr[data-plugin='counter'] table.keys", "the plugin's keys", |t| {
        t.contains("records.per.second")
    });
    browser.click("#plugins tr[data-plugin='counter'] a.create");
    browser.type_into(".field[data-key='name'] input", "clicks");
    browser.type_into(".field[data-key='topic'] input", "clicks");
    browser.type_into(".field[data-key='records.per.second'] input", "fast");
    browser.type_into(".field[data-key='tasks.max'] input", "2");
    browser.click("#validate");
    let problem =
        browser.wait_text(".field[data-key='records.per.second'] .field-error", "the key's error", |t| !t.is_empty());
    assert!(problem.contains("fast"), "the error beside records.per.second names the value: {problem}");
    assert!(browser.text(".field[data-key='topic'] .field-error").is_empty());
    browser.screenshot(&screenshot_path("create"));
    assert_eq!(server.call("GET", "/connectors", Some(ACME), None).json(), json!([]), "validation created nothing");
    browser.type_into(".field[data-key='records.per.second'] input", "200");
    browser.click("#create");

    // The connector page: RUNNING with two tasks, then records/s above zero in the overview.
    browser.element("h1 span[data-state='RUNNING']");
    wait_until("two RUNNING tasks on the page", || {
        let states = browser.script(
            "return [...document.querySelectorAll('#tasks tbody tr .state')].map(e => e.textContent)",
            json!([]),
        );
        (states == json!(["RUNNING", "RUNNING"])).then_some(())
    });
    browser.wait_text("#topics", "the topic it writes to (KIP-558)", |t| t == "clicks");
    browser.wait_text("#task-count", "two tasks", |t| t == "2");
    browser.click("#nav-connectors");
    let rate = wait_until("records/s above zero", || {
        let rate: f64 = row_cell(&browser, "clicks", ".rate")?.replace(',', "").parse().ok()?;
        (rate > 0.0).then_some(rate)
    });
    println!("console: clicks at {rate} records/s");
    wait_until("a few minutes' chart to have points", || {
        let points = browser.script(
            "const c = document.querySelector(\"#connectors tr[data-connector='clicks'] canvas\"); \
             return c ? Number(c.dataset.points) : 0",
            json!([]),
        );
        (points.as_u64()? >= 4).then_some(())
    });
    assert_eq!(row_cell(&browser, "clicks", ".tasks").as_deref(), Some("2/2"));
    browser.screenshot(&screenshot_path("overview"));

    // Pause, stop, edit an offset, reset the offsets, delete.
    browser.click("#connectors tr[data-connector='clicks'] a");
    browser.click("button[data-action='pause']");
    browser.element("h1 span[data-state='PAUSED']");
    server.wait_for("PAUSED in the API", "/connectors/clicks/status", Some(ACME), |s| all_in(s, "PAUSED", 2));
    browser.click("button[data-action='stop']");
    browser.element("h1 span[data-state='STOPPED']");
    browser.wait_text("#task-count", "no tasks once stopped", |t| t == "0");
    wait_until("both tasks' offsets listed", || {
        let rows = browser.script("return document.querySelectorAll('#offsets tr.offset').length", json!([]));
        (rows == json!(2)).then_some(())
    });
    browser.type_into("#offset-search", "\"counter\":1");
    browser.wait_text("#offsets tbody", "the search to keep task 1's partition", |t| {
        t.contains("{\"counter\":1}") && !t.contains("{\"counter\":0}")
    });
    browser.click("#offsets tr.offset button.edit-offset");
    browser.type_into("#offsets textarea.offset-editor", "{\"seq\": 7}");
    browser.click("#offsets button.primary");
    let offset_of_task_1 = || {
        let offsets = server.call("GET", "/connectors/clicks/offsets", Some(ACME), None).json();
        offsets["offsets"].as_array().unwrap().iter().find(|o| o["partition"] == json!({"counter": 1})).cloned()
    };
    wait_until("the edited offset in the API", || {
        (offset_of_task_1().map(|o| o["offset"].clone()) == Some(json!({"seq": 7}))).then_some(())
    });
    browser.type_into("#offset-search", "");
    browser.screenshot(&screenshot_path("connector"));
    browser.click("#reset-offsets");
    browser.wait_text("#offsets tbody", "no offsets left", |t| t.contains("No committed offsets"));
    let offsets = server.call("GET", "/connectors/clicks/offsets", Some(ACME), None).json();
    assert_eq!(offsets["offsets"], json!([]), "reset in the page resets in the API");
    // The page's own refresh of the connector is still under way when the delete is
    // confirmed (held here until then; a loaded machine does the same by chance): its
    // answer, a 404 for the deleted connector, must not replace the list shown after.
    browser.script(
        "const send = window.fetch; window.statusAsked = 0; window.statusAnswered = 0;
         window.fetch = (path, init) => {
           if (!String(path).endsWith('/clicks/status')) return send(path, init);
           window.statusAsked++;
           return new Promise((resolve) => { window.releaseStatus = resolve; })
             .then(() => send(path, init))
             .finally(() => { window.statusAnswered++; });
         };",
        json!([]),
    );
    wait_until("a refresh of the connector asking for its status", || {
        (browser.script("return window.statusAsked", json!([])) == json!(1)).then_some(())
    });
    browser.click("button[data-action='delete']");
    browser.click("button[data-action='delete'][data-confirm='yes']");
    browser.wait_text("main", "the deletion's note", |t| t.contains("Deleted clicks."));
    browser.script("window.releaseStatus()", json!([]));
    wait_until("the held refresh answered", || {
        (browser.script("return window.statusAnswered", json!([])) == json!(1)).then_some(())
    });
    let shown = browser.text("main");
    assert!(shown.contains("Deleted clicks.") && !shown.contains("Not found"), "after the delete: {shown}");
    assert_eq!(server.call("GET", "/connectors", Some(ACME), None).json(), json!([]));

    // The operator sees every tenant's connectors, qualified.
    browser.click("#sign-out");
    browser.type_into("#token", OPERATOR);
    browser.click("#sign-in");
    browser.element("#connectors tr[data-connector='globex/globex-secret']");

    // A token refused while signed in (revoked, the worker restarted with another): the
    // form says so, although each refresh's requests all got the 401.
    browser.script("app.token = 'revoked'", json!([]));
    browser.wait_text("#signin-message", "the refusal", |t| t.contains("refused") && t.contains("not valid"));
    assert!(!browser.alert_open());
    assert_no_script_errors(&browser);
}

#[test]
fn progress_failures_and_hostile_names_render_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let lines: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(inbox.join("orders <b>&amp; 1.csv"), &lines).unwrap();
    let inbox = std::fs::canonicalize(&inbox).unwrap();
    let plugins = plugin_folder(dir.path(), &["counter", "file-pulse", "hostile"]);
    std::fs::write(plugins.join("half-copied.wasm"), b"\0asm\x0d\0\x01\0garbage").unwrap();
    let server = Server::start(&dir.path().join("data"), &plugins, None);
    let create = |body: Value| {
        let reply = server.call("POST", "/connectors", None, Some(&body.to_string()));
        assert_eq!(reply.status, 201, "{reply:?}");
    };
    let inbox_text = inbox.display().to_string();
    create(json!({"name": "files", "config": {"connector.class": "file-pulse", "topic": "files",
        "fs.listing.directory.path": inbox_text, "sandbox.fs.read": inbox_text}}));
    create(json!({"name": "broken", "config": {"connector.class": "hostile", "hostile.attack": "trap", "topic": "x"}}));
    create(json!({"name": "stuck", "config": {"connector.class": "hostile", "hostile.attack": "loop-in-start",
        "sandbox.call.timeout.ms": "300", "topic": "x"}}));
    const XSS: &str = "<img src=x onerror=alert(1)>";
    create(json!({"name": XSS, "config": {"connector.class": "counter", "topic": "xss", "records.per.second": "5"}}));

    // The page is served with a policy that forbids inline scripts; JSON clients still get JSON.
    let page = server.call_with("GET", "/", &[("Accept", "text/html,*/*;q=0.8".into())], None);
    assert!(page.content_type.starts_with("text/html"), "{page:?}");
    let policy = page.header("content-security-policy").unwrap_or_default().to_string();
    assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"), "{policy}");
    assert!(server.get("/").json()["version"].is_string(), "GET / without Accept: text/html stays JSON");

    let browser = Browser::start();
    browser.goto(&format!("{}/", server.base));

    // The hostile name is its own characters, and nothing ran.
    let name = wait_until("the XSS-named row", || {
        let names = browser
            .script("return [...document.querySelectorAll('#connectors td.name')].map(e => e.textContent)", json!([]));
        names.as_array()?.iter().find(|n| n.as_str() == Some(XSS)).cloned()
    });
    assert_eq!(name, json!(XSS));
    assert_eq!(browser.script("return document.querySelectorAll('img').length", json!([])), json!(0));
    assert!(!browser.alert_open(), "the connector's name ran as a script");

    wait_until("the counter's records/s", || {
        let rate: f64 = row_cell(&browser, XSS, ".rate")?.parse().ok()?;
        (rate > 0.0).then_some(())
    });

    // The FAILED task's trace is one click away.
    wait_until("broken's task FAILED", || {
        (row_cell(&browser, "broken", ".state")? == "RUNNING 1 task FAILED").then_some(())
    });
    browser.click("#connectors tr[data-connector='broken'] details summary");
    let trace = browser.wait_text("#connectors tr[data-connector='broken'] pre.trace", "the trace", |t| !t.is_empty());
    assert!(trace.contains("Task 0") && trace.contains("unreachable"), "the trap's trace: {trace}");
    wait_until("stuck FAILED", || (row_cell(&browser, "stuck", ".state")? == "FAILED").then_some(()));
    // The summary counts both, and "only those failing" shows just them.
    browser.wait_text("#connectors-summary", "the failing counted", |t| {
        t.ends_with("; 2 failing (a connector or task FAILED)")
    });
    browser.click("#failing-only");
    wait_until("only broken and stuck shown", || {
        let shown = browser.script(
            "return [...document.querySelectorAll('#connectors tbody tr')].filter(r => !r.hidden).map(r => r.dataset.connector)",
            json!([]),
        );
        (shown == json!(["broken", "stuck"])).then_some(())
    });
    browser.click("#failing-only");
    browser.click("#connectors tr[data-connector='stuck'] details summary");
    let trace = browser.wait_text("#connectors tr[data-connector='stuck'] pre.trace", "the trace", |t| !t.is_empty());
    assert!(
        trace.starts_with("Connector: ") && trace.contains("did not return within 300 ms"),
        "the deadline's trace: {trace}"
    );
    browser.screenshot(&screenshot_path("overview-failed"));

    // The plugins, and the file that is not one, with the reason.
    browser.click("#nav-plugins");
    browser.element("#plugins tr[data-plugin='file-pulse']");
    let rejected = browser.wait_text("#rejected tbody", "the rejected file", |t| t.contains("half-copied.wasm"));
    assert!(rejected.lines().count() >= 2, "the reason is shown beside the file: {rejected}");
    browser.screenshot(&screenshot_path("plugins"));

    // A plugin file replaced by one of the same version with another key's documentation:
    // the page shows the new keys, though the list of plugins did not change.
    let counter = std::fs::read(plugins.join("counter.wasm")).unwrap();
    let (old_doc, new_doc): (&[u8], &[u8]) = (b"Destination topic.", b"DESTINATION TOPIC!");
    let at = counter.windows(old_doc.len()).position(|w| w == old_doc).expect("the counter's topic documentation");
    let mut replaced = counter.clone();
    replaced[at..at + new_doc.len()].copy_from_slice(new_doc);
    std::fs::write(dir.path().join("counter.wasm.part"), &replaced).unwrap();
    std::fs::rename(dir.path().join("counter.wasm.part"), plugins.join("counter.wasm")).unwrap();
    wait_until("the replaced plugin's keys on the page", || {
        let keys = browser.script(
            "const t = document.querySelector(\"#plugins tr[data-plugin='counter'] table.keys\"); \
             return t ? t.textContent : ''",
            json!([]),
        );
        keys.as_str().is_some_and(|t| t.contains("DESTINATION TOPIC!")).then_some(())
    });
    browser.click("#nav-connectors");

    // file-pulse's committed offset shows how far each file has come.
    browser.click("#connectors tr[data-connector='files'] a");
    let progress = wait_until("the file at 100%", || {
        let found = browser.script(
            "const p = document.querySelector('#offsets .progress'); \
             return p ? [p.dataset.percent, p.querySelector('.path').textContent] : null",
            json!([]),
        );
        (found.get(0) == Some(&json!("100"))).then_some(found)
    });
    assert_eq!(progress[1], "orders <b>&amp; 1.csv", "the file's name, as text");
    browser.type_into("#offset-search", "no such file");
    browser.wait_text("#offsets tbody", "no match", |t| t.contains("No partition matches"));
    browser.type_into("#offset-search", "orders");
    browser.element("#offsets .progress");
    browser.screenshot(&screenshot_path("file-progress"));

    // An offset saved unchanged is the offset stored, to the last digit: file-pulse's file
    // times are nanoseconds, past what a JavaScript number holds (a rounded one made the
    // file look changed, and it was read again).
    let stored = || server.get("/connectors/files/offsets").json()["offsets"][0].clone();
    let before = stored();
    let mtime = before["offset"]["mtime"].as_u64().expect("file-pulse's offset has its file's mtime");
    assert!(mtime > 1 << 53, "a time in nanoseconds: {mtime}");
    assert_eq!(server.call("PUT", "/connectors/files/stop", None, None).status, 204);
    browser.element("h1 span[data-state='STOPPED']");
    browser.wait_text("#offsets tbody", "the exact mtime", |t| t.contains(&mtime.to_string()));
    browser.click("#offsets tr.offset button.edit-offset:not([disabled])");
    browser.click("#offsets button.primary");
    browser.wait_text("#action-message", "the save", |t| t.contains("Offset saved"));
    assert_eq!(stored(), before, "saved unchanged, stored unchanged");
    // A partition holding such a number is saved to, not one next to it.
    let wide = json!({"offsets": [{"partition": {"counter": 9007199254740993u64}, "offset": {"seq": 1}}]});
    assert_eq!(server.call("PATCH", "/connectors/files/offsets", None, Some(&wide.to_string())).status, 200);
    browser.type_into("#offset-search", "9007199254740993");
    browser.click("#offsets tr.offset button.edit-offset:not([disabled])");
    browser.type_into("#offsets textarea.offset-editor", "{\"seq\": 12345678901234567890}");
    browser.click("#offsets button.primary");
    let saved = wait_until("the second save in the API", || {
        let offsets = server.get("/connectors/files/offsets").json()["offsets"].as_array()?.clone();
        offsets.into_iter().find(|o| o["offset"] == json!({"seq": 12345678901234567890u64}))
    });
    assert_eq!(saved["partition"], json!({"counter": 9007199254740993u64}));
    assert_eq!(server.get("/connectors/files/offsets").json()["offsets"].as_array().unwrap().len(), 2);

    // An opened task trace stays open while the page refreshes.
    browser.goto(&format!("{}/#/connector/broken", server.base));
    browser.click("#tasks details summary");
    let refreshes = || browser.script("return Number(document.body.dataset.refreshes || 0)", json!([])).as_u64();
    let opened_at = refreshes().unwrap();
    wait_until("two refreshes after", || (refreshes()? >= opened_at + 2).then_some(()));
    assert_eq!(browser.script("return document.querySelector('#tasks details').open", json!([])), json!(true));

    // A link typed by hand to a connector named `100%` (not valid percent-encoding), before
    // the connector exists: "Not found", then the connector once it is made.
    browser.goto(&format!("{}/#/connector/100%", server.base));
    browser.wait_text("main", "not found", |t| t.contains("Not found"));
    create(
        json!({"name": "100%", "config": {"connector.class": "counter", "topic": "pct", "records.per.second": "5"}}),
    );
    browser.wait_text("h1", "the connector made after", |t| t.starts_with("100%"));
    browser.element("h1 span[data-state='RUNNING']");
    assert!(!browser.alert_open());
    assert_no_script_errors(&browser);
}

#[test]
fn two_hundred_connectors_refresh_without_freezing_the_page() {
    const CONNECTORS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None);
    for i in 0..CONNECTORS {
        let body = json!({"name": format!("c{i:03}"), "config": {"connector.class": "counter",
            "topic": "many", "records.per.second": "2", "tasks.max": "1"}});
        assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    }
    let browser = Browser::start();
    browser.goto(&format!("{}/", server.base));
    wait_until("200 rows", || {
        let rows = browser.script("return document.querySelectorAll('#connectors tbody tr').length", json!([]));
        (rows == json!(CONNECTORS)).then_some(())
    });
    // The refresh time the page measures itself (requests, parsing, DOM and layout), over
    // ten refreshes once every connector runs.
    wait_until("every task RUNNING on the page", || {
        let running = browser.script(
            "return [...document.querySelectorAll('#connectors td.tasks')].every(e => e.textContent === '1/1')",
            json!([]),
        );
        (running == json!(true)).then_some(())
    });
    let count = || browser.script("return Number(document.body.dataset.refreshes)", json!([])).as_u64().unwrap();
    let mut times = Vec::new();
    let mut seen = count();
    while times.len() < 10 {
        let now = wait_until("the next refresh", || Some(count()).filter(|&n| n > seen));
        seen = now;
        let ms: f64 =
            browser.script("return document.body.dataset.refreshMs", json!([])).as_str().unwrap().parse().unwrap();
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "console refresh with {CONNECTORS} connectors: median {:.1} ms, max {:.1} ms (10 refreshes)",
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert_eq!(
        browser.text("#connectors-summary"),
        "200 connectors: 200 RUNNING; 0 failing (a connector or task FAILED)"
    );
    // The filter finds a few among the many, and "only those failing" none here.
    let visible = || browser.script("return document.querySelector('#connectors tbody').dataset.visible", json!([]));
    browser.type_into("#connector-filter", "c15");
    wait_until("c150 to c159 shown", || (visible() == json!("10")).then_some(()));
    assert_eq!(
        browser.script(
            "return [...document.querySelectorAll('#connectors tbody tr')].filter(r => !r.hidden).map(r => r.dataset.connector)",
            json!([])
        ),
        json!((150..160).map(|i| format!("c{i}")).collect::<Vec<_>>())
    );
    browser.type_into("#connector-filter", "");
    browser.click("#failing-only");
    wait_until("none failing shown", || (visible() == json!("0")).then_some(()));
    browser.click("#failing-only");
    wait_until("all shown again", || (visible() == json!("200")).then_some(()));
    // Still answering a click: the page was not frozen by the refreshes.
    browser.click("#connectors tr[data-connector='c150'] a");
    browser.element("h1 span[data-state='RUNNING']");
    assert_eq!(browser.text("#plugin"), "counter");
    assert_no_script_errors(&browser);
}
