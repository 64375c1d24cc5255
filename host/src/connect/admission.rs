//! Admission: whether a connector config may start. Host keys, the worker's defaults, the
//! tenant's rules (it exists, grants stay inside its roots, quotas hold), the plugin's
//! `config-def` (required keys, types) and the plugin's own `validate`.

use std::sync::Arc;
use std::time::Duration;

use super::services::Services;
use crate::config::HOST_KEYS;
use crate::config::keys::{
    CONNECTOR_CLASS, DESTINATION, ERRORS_DEAD_LETTER_TOPIC, EXACTLY_ONCE_SUPPORT, NAME, PRODUCER_OVERRIDE_PREFIX,
    SANDBOX_CALL_TIMEOUT_MS, SANDBOX_FS_READ, SANDBOX_FS_WRITE, SANDBOX_FUEL_PER_CALL, SANDBOX_LOG_LINES_PER_SECOND,
    SANDBOX_MEMORY_MAX_BYTES, TASKS_MAX, TENANT, TOPIC_CREATION_PARTITIONS, TOPIC_CREATION_REPLICATION,
};
use crate::config::transforms::{PREDICATES, TRANSFORMS};
use crate::config::{ConfigError, ConnectorConfig, ConnectorSettings, DestinationKind, StorageKind, Transforms};
use crate::runtime::plugin_log::escape_controls;
use crate::runtime::sandbox::cut_at_char_boundary;
use crate::runtime::{CallError, Plugin};
use crate::storage::Namespace;

/// A connector already running, as admission sees it: its namespace and `tasks.max`.
pub(super) type Running = (Namespace, u32);

/// A config that may start: its host settings, its plugin, and warnings about it (keys
/// neither the host nor the plugin knows, with the nearest known key).
pub struct Admitted {
    pub settings: ConnectorSettings,
    pub plugin: Arc<Plugin>,
    pub warnings: Vec<String>,
}

/// Checks `config` (with the worker's defaults filled in) the way `start` would.
pub(super) async fn admit(
    services: &Services,
    config: &ConnectorConfig,
    running: &[Running],
) -> Result<Admitted, ConfigError> {
    let config = &config.with_defaults(&services.worker.defaults);
    if let Some(problem) = grants_outside_roots(services, config).into_iter().next() {
        return Err(problem);
    }
    let mut settings = config.settings()?;
    check_fuel(services, config, &settings)?;
    if let Some(problem) = destination_problems(services, config, &settings).into_iter().next() {
        return Err(problem);
    }
    check_tenant(services, config, &mut settings, running)?;
    let plugin = find_plugin(services, config).await?;
    if let Some(problem) = plugin_key_problems(config, &plugin).into_iter().next() {
        return Err(problem);
    }
    if let Some(problem) = plugin_validate(services, config, &plugin, &settings).await?.into_iter().next() {
        return Err(problem);
    }
    let warnings = unknown_keys(config, &plugin, &settings.transforms);
    Ok(Admitted { settings, plugin, warnings })
}

/// The tenant's rules of [`admit`] again, against `running` as it is now: what a change
/// checks under the herder's lock after admitting `config` without it (the plugin's calls
/// may take their whole deadline, and nothing else should wait on them).
pub(super) fn recheck_tenant(
    services: &Services,
    config: &ConnectorConfig,
    admitted: &mut Admitted,
    running: &[Running],
) -> Result<(), ConfigError> {
    let config = &config.with_defaults(&services.worker.defaults);
    check_tenant(services, config, &mut admitted.settings, running)
}

/// Every problem `admit` could find in `config`, not only the first (Kafka Connect's
/// validate endpoint): each host key that does not parse, the tenant's rules, the plugin's
/// `config-def` and everything the plugin's `validate` says (once no grant is refused: the
/// plugin would check its paths without it).
pub(super) async fn problems(services: &Services, config: &ConnectorConfig, running: &[Running]) -> Vec<ConfigError> {
    let config = &config.with_defaults(&services.worker.defaults);
    let mut problems = grants_outside_roots(services, config);
    let grants_refused = !problems.is_empty();
    // A bad host key is reported, then dropped so the next one is looked at.
    let mut probe = config.clone();
    for problem in &problems {
        if let Some(key) = &problem.key {
            probe.values.remove(key);
        }
    }
    let mut settings = loop {
        match probe.settings() {
            Ok(settings) => break settings,
            Err(problem) => {
                let key = problem.key.clone();
                let removed = key.as_ref().and_then(|key| probe.values.remove(key));
                let transform_key = key.as_deref().is_some_and(is_transform_key);
                if !problems.iter().any(|p: &ConfigError| p.key == key) {
                    problems.push(problem);
                }
                if transform_key {
                    // A transform's key missing or bad once removed: the rest of the config
                    // is still looked at, without the transforms.
                    if removed.is_none() {
                        probe.values.retain(|key, _| !is_transform_key(key));
                    }
                } else if removed.is_none() {
                    return problems;
                }
            }
        }
    };
    // Judged by what was read (`probe`): a value already refused is not compared again as
    // the default that stood in for it.
    problems.extend(check_fuel(services, &probe, &settings).err());
    problems.extend(destination_problems(services, &probe, &settings));
    let tenant_said = tenant_problems(services, &probe, &mut settings, running);
    // A grant refused here (its path changed since the check above): the plugin is not
    // run with it.
    let grants_refused = grants_refused
        || tenant_said.iter().any(|p| matches!(p.key.as_deref(), Some(SANDBOX_FS_READ | SANDBOX_FS_WRITE)));
    problems.extend(tenant_said);
    let plugin = match find_plugin(services, config).await {
        Ok(plugin) => plugin,
        Err(problem) => {
            problems.push(problem);
            return problems;
        }
    };
    problems.extend(plugin_key_problems(config, &plugin));
    if grants_refused {
        // The plugin would check its paths in a sandbox without the refused grants, and
        // say that a path it was never given cannot be read: noise beside the real reason.
        return problems;
    }
    match plugin_validate(services, config, &plugin, &settings).await {
        // A key already found at fault is said once (the plugin often repeats the check).
        Ok(found) => {
            let known: Vec<Option<String>> = problems.iter().map(|p| p.key.clone()).collect();
            problems.extend(found.into_iter().filter(|p| !known.contains(&p.key)));
        }
        Err(problem) => problems.push(problem),
    }
    problems
}

/// `transforms`, `predicates` and the keys of their aliases.
fn is_transform_key(key: &str) -> bool {
    [TRANSFORMS, PREDICATES].iter().any(|prefix| is_or_under(key, prefix))
}

/// Whether `key` is `prefix` or one of its dotted sub-keys (`prefix.…`).
fn is_or_under(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn check_fuel(services: &Services, config: &ConnectorConfig, settings: &ConnectorSettings) -> Result<(), ConfigError> {
    if settings.sandbox.fuel_per_call.is_some() && !services.runtime.fuel_metering {
        let reason = "fuel metering is off in this worker: set [sandbox] fuel_metering = true in sluice.toml";
        return Err(config.error(SANDBOX_FUEL_PER_CALL, reason));
    }
    Ok(())
}

/// What `destination=kafka` needs of the worker, and the producer settings a connector may
/// override (KIP-458): any for the `default` tenant, only [`TENANT_PRODUCER_OVERRIDES`]
/// for a declared tenant (the worker's security settings, and what makes a producer
/// idempotent or transactional, are the operator's).
fn destination_problems(
    services: &Services,
    config: &ConnectorConfig,
    settings: &ConnectorSettings,
) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    let kafka = services.worker.kafka.as_ref();
    let overrides = config.producer_overrides();
    if settings.destination == DestinationKind::Local && services.worker.storage.kind == StorageKind::Kafka {
        problems.push(config.error(
            DESTINATION,
            "'local' keeps its offsets with its records in the data directory, but this worker keeps offsets in Kafka ([storage] kind = \"kafka\"): use destination=kafka (the default on Kafka storage) or stdout",
        ));
    }
    if settings.destination != DestinationKind::Kafka {
        if settings.kafka.exactly_once {
            problems.push(config.error(EXACTLY_ONCE_SUPPORT, "'required' needs destination=kafka"));
        }
        if let Some((key, _)) = overrides.iter().next() {
            problems.push(config.error(&format!("{PRODUCER_OVERRIDE_PREFIX}{key}"), "needs destination=kafka"));
        }
        return problems;
    }
    // KIP-158's groups and topic settings would be ignored: a topic the user asked to be
    // compacted would be made with the broker's deleting policy. Refused, not ignored.
    for key in config.values.keys().filter(|key| {
        key.starts_with("topic.creation.")
            && ![TOPIC_CREATION_PARTITIONS, TOPIC_CREATION_REPLICATION].contains(&key.as_str())
    }) {
        problems.push(config.error(
            key,
            format!("not supported: new topics take {TOPIC_CREATION_PARTITIONS} and {TOPIC_CREATION_REPLICATION} only (no groups, no other topic settings); create the topic with its settings beforehand, or set the broker's defaults"),
        ));
    }
    let Some(kafka) = kafka else {
        problems.push(config.error(
            DESTINATION,
            "'kafka' needs a Kafka cluster: add a [kafka] section with bootstrap.servers to sluice.toml",
        ));
        return problems;
    };
    if settings.kafka.exactly_once {
        if services.worker.storage.kind != StorageKind::Kafka {
            problems.push(config.error(
                EXACTLY_ONCE_SUPPORT,
                "'required' writes offsets in the same transaction as records, so offsets must be in Kafka: set [storage] kind = \"kafka\" in sluice.toml",
            ));
        } else if !kafka.exactly_once_source {
            problems.push(config.error(
                EXACTLY_ONCE_SUPPORT,
                "'required' but this worker has exactly-once source support disabled: set \"exactly.once.source.support\" = \"enabled\" in [kafka]",
            ));
        }
    }
    if crate::destinations::in_transactions(settings, &services.worker) {
        problems.extend(transactional_timeout_problems(config, &overrides));
    }
    if let Some(topic) = &settings.errors.dead_letter_topic {
        let topic = match config.tenant() {
            crate::config::DEFAULT_TENANT => topic.clone(),
            tenant => format!("{tenant}.{topic}"),
        };
        if let Some(key) = kafka.state_topic_key(&topic) {
            problems.push(config.error(
                ERRORS_DEAD_LETTER_TOPIC,
                format!("{topic} is the worker's {key}, where Sluice keeps its state: choose another topic"),
            ));
        }
    }
    if config.tenant() != crate::config::DEFAULT_TENANT {
        for key in overrides.keys().filter(|key| !TENANT_PRODUCER_OVERRIDES.contains(&key.as_str())) {
            problems.push(config.error(
                &format!("{PRODUCER_OVERRIDE_PREFIX}{key}"),
                format!("a tenant may override only {}", TENANT_PRODUCER_OVERRIDES.join(", ")),
            ));
        }
    }
    for (key, _) in overrides.iter().filter(|(key, _)| MANAGED_PRODUCER_KEYS.contains(&key.as_str())) {
        problems.push(config.error(&format!("{PRODUCER_OVERRIDE_PREFIX}{key}"), "set by Sluice itself"));
    }
    problems
}

/// librdkafka refuses to make a transactional producer whose `message.timeout.ms` (or
/// `socket.timeout.ms`, past 100 ms of slack) outlasts its `transaction.timeout.ms`: said
/// here, naming the key, rather than by every task failing to start.
fn transactional_timeout_problems(
    config: &ConnectorConfig,
    overrides: &std::collections::BTreeMap<String, String>,
) -> Vec<ConfigError> {
    let millis = |key: &str| overrides.get(key).and_then(|value| value.trim().parse::<u64>().ok());
    let transaction_ms = crate::destinations::kafka::transaction_timeout(overrides).as_millis() as u64;
    let mut problems = Vec::new();
    for (key, slack) in [("message.timeout.ms", 0), ("socket.timeout.ms", 100)] {
        if let Some(ms) = millis(key).filter(|ms| *ms > transaction_ms + slack) {
            problems.push(config.error(
                &format!("{PRODUCER_OVERRIDE_PREFIX}{key}"),
                format!(
                    "{ms} ms outlasts the transactions this connector's records are written in on this worker \
                     (exactly-once; transaction.timeout.ms {transaction_ms} ms), which Kafka's producer refuses: \
                     set it to at most {}",
                    transaction_ms + slack
                ),
            ));
        }
    }
    problems
}

/// Producer settings a declared tenant's connector may override: throughput and latency,
/// nothing about where or as whom it connects, nor its delivery guarantees.
pub const TENANT_PRODUCER_OVERRIDES: &[&str] = &[
    "linger.ms",
    "batch.size",
    "batch.num.messages",
    "compression.type",
    "compression.level",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "message.timeout.ms",
    "request.timeout.ms",
];

/// Producer settings nobody overrides: they are what the delivery guarantee rests on.
const MANAGED_PRODUCER_KEYS: &[&str] =
    &["transactional.id", "enable.idempotence", "bootstrap.servers", "acks", "partitioner", "group.id"];

/// The plugin `connector.class` names, as the plugin folder holds it now.
async fn find_plugin(services: &Services, config: &ConnectorConfig) -> Result<Arc<Plugin>, ConfigError> {
    let name = config.plugin()?;
    let registry = &services.registry;
    registry.get_or_load(&services.runtime, name).await.ok_or_else(|| {
        let why = match registry.rejected().into_iter().find(|r| r.file.file_stem().is_some_and(|s| s == name)) {
            Some(rejected) => format!("{} was rejected: {}", rejected.file.display(), rejected.reason),
            None => format!("no {name}.wasm in {}", registry.dir.display()),
        };
        // The files that are plugins (or may be, not loaded yet): a rejected one is none.
        let rejected: Vec<String> =
            registry.rejected().iter().filter_map(|r| r.file.file_stem()?.to_str().map(String::from)).collect();
        let plugins: Vec<String> = registry.files_in_folder().into_iter().filter(|f| !rejected.contains(f)).collect();
        let names: Vec<&str> = plugins.iter().map(String::as_str).collect();
        let hint = nearest(name, &names).map(|p| format!("; did you mean `{p}`?")).unwrap_or_default();
        config.error(
            CONNECTOR_CLASS,
            format!(
                "unknown plugin '{name}': {why} (plugins in the folder: {}){hint}",
                if plugins.is_empty() { "none".to_string() } else { plugins.join(", ") }
            ),
        )
    })
}

/// The plugin's `config-def`: required keys present, values of the declared types.
fn plugin_key_problems(config: &ConnectorConfig, plugin: &Plugin) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    for key in &plugin.config_def {
        match config.get(&key.name) {
            None if key.required => problems
                .push(config.error(&key.name, format!("required by plugin {} ({})", plugin.name, key.documentation))),
            Some(value) => problems.extend(check_type(value, &key.type_name).err().map(|r| config.error(&key.name, r))),
            None => {}
        }
    }
    problems
}

/// What the plugin's own `validate` says about `config` (`Err` when it cannot be asked).
async fn plugin_validate(
    services: &Services,
    config: &ConnectorConfig,
    plugin: &Plugin,
    settings: &ConnectorSettings,
) -> Result<Vec<ConfigError>, ConfigError> {
    let name = &plugin.name;
    let context = services.context(&Namespace::new(config.tenant(), &config.name), None, None);
    let mut instance =
        services.runtime.instantiate(plugin.pre(), context, &settings.sandbox).await.map_err(|e| match e {
            // The key at fault is the cap's, or the grant's, not the plugin's name.
            CallError::MemoryCap(why) => {
                config.error(SANDBOX_MEMORY_MAX_BYTES, format!("plugin {name} cannot even start within it: {why}"))
            }
            CallError::Setup(why) if why.starts_with(SANDBOX_FS_READ) || why.starts_with(SANDBOX_FS_WRITE) => {
                let (key, why) = why.split_once(": ").unwrap_or((SANDBOX_FS_READ, &why));
                config.error(key, why)
            }
            e => config.error(CONNECTOR_CLASS, format!("plugin {name} could not be instantiated: {e}")),
        })?;
    let problems = instance
        .validate(&config.to_pairs())
        .await
        .map_err(|e| config.error(CONNECTOR_CLASS, format!("plugin {name} failed in validate: {e}")))?;
    // A config has tens of keys: past this many problems the plugin is not saying anything
    // a person reads, and each one costs every validate request (and its answer) more.
    let more = problems.len().saturating_sub(MAX_PLUGIN_PROBLEMS);
    let mut errors: Vec<ConfigError> = problems
        .into_iter()
        .take(MAX_PLUGIN_PROBLEMS)
        .map(|problem| {
            let (mut key, mut message) =
                (escape_controls(&problem.key).into_owned(), escape_controls(&problem.message).into_owned());
            cut_at_char_boundary(&mut key, 256);
            cut_at_char_boundary(&mut message, 4 << 10);
            config.error(&key, message)
        })
        .collect();
    if more > 0 {
        errors.push(config.error(CONNECTOR_CLASS, format!("plugin {name} named {more} more problems, not shown")));
    }
    Ok(errors)
}

/// Most problems of a plugin's `validate` kept.
const MAX_PLUGIN_PROBLEMS: usize = 1000;

/// Keys neither the host nor the plugin's `config-def` names: accepted (a plugin may read
/// keys it does not declare), but said, with the nearest known key.
fn unknown_keys(config: &ConnectorConfig, plugin: &Plugin, transforms: &Transforms) -> Vec<String> {
    let known: Vec<&str> =
        HOST_KEYS.iter().map(|k| k.name).chain(plugin.config_def.iter().map(|k| k.name.as_str())).collect();
    config
        .values
        .keys()
        .filter(|key| {
            !known.contains(&key.as_str()) && !key.starts_with(PRODUCER_OVERRIDE_PREFIX) && !transforms.knows(key)
        })
        .map(|key| match connect_key_that_does_not_apply(key) {
            Some(why) => {
                format!("{}: {}: Kafka Connect's key, ignored here: {why}", config.source, escape_controls(key))
            }
            None => {
                let hint = nearest(key, &known).map(|k| format!("; did you mean `{k}`?")).unwrap_or_default();
                format!(
                    "{}: {}: not a key of the host or of plugin {}{hint}",
                    config.source,
                    escape_controls(key),
                    plugin.name
                )
            }
        })
        .collect()
}

/// Why a key of Kafka Connect's connector configs means nothing to Sluice, for a config
/// brought over from Connect.
fn connect_key_that_does_not_apply(key: &str) -> Option<&'static str> {
    let converter = ["key.converter", "value.converter", "header.converter"].iter().any(|c| is_or_under(key, c));
    match key {
        _ if converter => Some(
            "a plugin hands the host bytes, and destinations get them as they are (as with Connect's ByteArrayConverter)",
        ),
        "errors.retry.timeout" | "errors.retry.delay.max.ms" => Some(
            "nothing between poll and delivery fails transiently; a plugin's retriable error is retried at its next poll",
        ),
        "offsets.storage.topic" => Some("a connector's offsets are kept where the worker's [storage] keeps them"),
        _ => None,
    }
}

/// The known key closest to `key` by edit distance, if it is close enough to be a typo.
fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut previous = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let substitution = previous + usize::from(ca != *cb);
                previous = row[j + 1];
                row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
            }
        }
        row[b.len()]
    };
    // Close relative to the shorter word: two edits make `rate` into `name`, which is no
    // typo of it, but one makes `tasks.mx` into `tasks.max`.
    let close = |d: usize, k: &str| d <= 1.max(key.chars().count().min(k.chars().count()) / 3);
    known.iter().map(|k| (distance(key, k), *k)).filter(|(d, k)| close(*d, k)).min().map(|(_, k)| k)
}

/// A restricted tenant's directory grants (`sandbox.fs.read`, `sandbox.fs.write`) that name
/// a place outside its roots, looked at before anything on the host is: whether such a
/// path exists, or is a file or a directory, gets one answer, so a tenant cannot probe the
/// host's files outside its roots (another tenant's, say) through the error it is given.
/// A path is judged by where it leads (or its nearest existing ancestor, when it does not
/// resolve; a link leading nowhere is outside): one that leads inside the roots gets the
/// detailed reasons of the key's own check, whatever it looks like as typed.
pub(super) fn grants_outside_roots(services: &Services, config: &ConnectorConfig) -> Vec<ConfigError> {
    let Some(tenant) = services.worker.tenant(config.tenant()) else { return Vec::new() };
    // A tenant that may grant the root may grant anything (the unlimited `default`).
    if tenant.may_grant(std::path::Path::new("/")) {
        return Vec::new();
    }
    // Where the path leads, as the kernel resolves it: the path itself when it resolves,
    // else its nearest ancestor that does. A path inside the roots by name alone could
    // lead out through a link in them (`/data/a/link-to-root/etc/shadow`), and what the
    // later checks say of it (missing, a file, the place it resolves to) is then about
    // the host's files: only where it leads is looked at.
    let inside = |typed: &str| {
        let Ok(mut path) = std::path::absolute(typed) else { return false };
        // The name below `path` that did not resolve.
        let mut below: Option<std::ffi::OsString> = None;
        loop {
            if let Ok(resolved) = std::fs::canonicalize(&path) {
                // A link that leads nowhere (a missing or unreadable target): whether its
                // target is there is not the tenant's to learn, wherever it points.
                let dangling = below.as_ref().is_some_and(|name| {
                    std::fs::symlink_metadata(resolved.join(name)).is_ok_and(|m| m.file_type().is_symlink())
                });
                return !dangling && tenant.may_grant(&resolved);
            }
            below = path.file_name().map(ToOwned::to_owned);
            if !path.pop() {
                return false;
            }
        }
    };
    [SANDBOX_FS_READ, SANDBOX_FS_WRITE]
        .into_iter()
        .filter_map(|key| {
            let list = config.get(key)?;
            let outside = list.split(',').map(str::trim).filter(|dir| !dir.is_empty()).find(|dir| !inside(dir))?;
            let reason = format!("'{outside}' is outside tenant {}'s roots ({})", tenant.name, tenant.roots_text());
            Some(config.error(key, reason))
        })
        .collect()
}

/// The tenant's rules: it exists, grants stay inside its roots, and its quotas hold.
fn check_tenant(
    services: &Services,
    config: &ConnectorConfig,
    settings: &mut ConnectorSettings,
    running: &[Running],
) -> Result<(), ConfigError> {
    match tenant_problems(services, config, settings, running).into_iter().next() {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Every way `config` breaks its tenant's rules. The sandbox settings a quota caps are
/// brought within it whether or not they were refused: a key left unset takes the quota
/// when the default is above it, and the plugin's `validate` that runs after a refusal
/// runs within the quota, not as long or as large as the config asked.
fn tenant_problems(
    services: &Services,
    config: &ConnectorConfig,
    settings: &mut ConnectorSettings,
    running: &[Running],
) -> Vec<ConfigError> {
    let worker = &services.worker;
    let Some(tenant) = worker.tenant(config.tenant()) else {
        let declared = worker.tenant_choices();
        return vec![config.error(TENANT, format!("unknown tenant '{}' (the tenants: {declared})", config.tenant()))];
    };
    let mut problems = Vec::new();
    for (key, dirs) in [(SANDBOX_FS_READ, &settings.sandbox.fs_read), (SANDBOX_FS_WRITE, &settings.sandbox.fs_write)] {
        if let Some(dir) = dirs.iter().find(|dir| !tenant.may_grant(dir)) {
            let reason =
                format!("'{}' is outside tenant {}'s roots ({})", dir.display(), tenant.name, tenant.roots_text());
            problems.push(config.error(key, reason));
        }
    }
    let quotas = &tenant.quotas;
    let setting = |name: &str| format!("{name} in [tenant.quotas] of sluice.toml");
    // Set by the connector's config, not by the worker's `[defaults]` (an operator's
    // default above a tenant's quota is brought within it, not blamed on the tenant).
    let given =
        |key: &str| config.get(key).filter(|value| worker.defaults.get(key).map(String::as_str) != Some(*value));
    if let Some(max) = quotas.memory_max_bytes
        && settings.sandbox.memory_max_bytes > max
    {
        if given(SANDBOX_MEMORY_MAX_BYTES).is_some() {
            let reason = format!(
                "{} is above tenant {}'s quota of {max} bytes per instance ({})",
                settings.sandbox.memory_max_bytes,
                tenant.name,
                setting("memory_max_bytes")
            );
            problems.push(config.error(SANDBOX_MEMORY_MAX_BYTES, reason));
        }
        settings.sandbox.memory_max_bytes = max;
    }
    if let Some(max) = quotas.call_timeout_max_ms.map(Duration::from_millis) {
        let timeouts = &mut settings.sandbox.timeouts;
        if let Some(given) = given(SANDBOX_CALL_TIMEOUT_MS)
            && timeouts.lifecycle.max(timeouts.hot) > max
        {
            let reason = format!(
                "{} is above tenant {}'s quota of {} ms per call ({})",
                given.trim(),
                tenant.name,
                max.as_millis(),
                setting("call_timeout_max_ms")
            );
            problems.push(config.error(SANDBOX_CALL_TIMEOUT_MS, reason));
        }
        timeouts.lifecycle = timeouts.lifecycle.min(max);
        timeouts.hot = timeouts.hot.min(max);
    }
    if let Some(max) = quotas.log_lines_per_second_max
        && settings.sandbox.log_lines_per_second > max
    {
        if let Some(given) = given(SANDBOX_LOG_LINES_PER_SECOND) {
            let reason = format!(
                "{} is above tenant {}'s quota of {max} log lines per second per instance ({})",
                given.trim(),
                tenant.name,
                setting("log_lines_per_second_max")
            );
            problems.push(config.error(SANDBOX_LOG_LINES_PER_SECOND, reason));
        }
        settings.sandbox.log_lines_per_second = max;
    }
    let mine: Vec<u32> = running
        .iter()
        .filter(|(ns, _)| ns.tenant == tenant.name && ns.connector != config.name)
        .map(|(_, tasks_max)| *tasks_max)
        .collect();
    if let Some(max) = quotas.connectors
        && mine.len() as u64 >= u64::from(max)
    {
        let reason = format!(
            "tenant {} already runs {} connectors, its quota ({})",
            tenant.name,
            mine.len(),
            setting("connectors")
        );
        problems.push(config.error(NAME, reason));
    }
    if let Some(max) = quotas.tasks {
        // In u64: a tasks.max near u32::MAX wrapped the sum below the quota.
        let in_use: u64 = mine.iter().map(|&tasks| u64::from(tasks)).sum();
        if in_use + u64::from(settings.tasks_max) > u64::from(max) {
            let reason = format!(
                "{} more tasks would exceed tenant {}'s quota of {max} tasks ({in_use} in use; {})",
                settings.tasks_max,
                tenant.name,
                setting("tasks")
            );
            problems.push(config.error(TASKS_MAX, reason));
        }
    }
    problems
}

/// A value against a plugin key's declared type (Kafka Connect's type names).
fn check_type(value: &str, type_name: &str) -> Result<(), String> {
    let ok = match type_name {
        "INT" => value.trim().parse::<i32>().is_ok(),
        "LONG" => value.trim().parse::<i64>().is_ok(),
        "DOUBLE" => value.trim().parse::<f64>().is_ok(),
        "BOOLEAN" => matches!(value.trim().to_ascii_lowercase().as_str(), "true" | "false"),
        _ => true,
    };
    if ok { Ok(()) } else { Err(format!("'{value}' is not a valid {}", type_name.to_ascii_lowercase())) }
}

#[cfg(test)]
mod tests {
    use super::{connect_key_that_does_not_apply, is_transform_key, nearest};

    #[test]
    fn connects_keys_that_do_not_apply_say_why() {
        for key in ["value.converter", "key.converter.schemas.enable", "header.converter", "errors.retry.timeout"] {
            assert!(connect_key_that_does_not_apply(key).is_some(), "{key}");
        }
        for key in ["value.converters", "converter", "topic", "errors.tolerance"] {
            assert!(connect_key_that_does_not_apply(key).is_none(), "{key}");
        }
    }

    #[test]
    fn transform_keys_are_the_lists_and_what_is_under_them() {
        for key in ["transforms", "predicates", "transforms.a.type", "predicates.p.pattern"] {
            assert!(is_transform_key(key), "{key}");
        }
        for key in ["transformsx", "transforms_a", "topic"] {
            assert!(!is_transform_key(key), "{key}");
        }
    }

    #[test]
    fn the_nearest_key_is_a_likely_typo() {
        let known = ["tasks.max", "topic", "fs.listing.directory.path"];
        assert_eq!(nearest("tasks.mx", &known), Some("tasks.max"));
        assert_eq!(nearest("fs.listing.dir.path", &known), Some("fs.listing.directory.path"));
        assert_eq!(nearest("bogus.key", &known), None);
        let known = ["name", "topic", "tasks.max", "records.per.second"];
        assert_eq!(nearest("topc", &known), Some("topic"));
        assert_eq!(nearest("tasks_max", &known), Some("tasks.max"));
        // Two edits from `name`, but half of a short word is no typo.
        assert_eq!(nearest("rate", &known), None);
        assert_eq!(nearest("nme", &known), Some("name"));
    }
}
