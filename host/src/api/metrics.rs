//! `GET /metrics`: every connector's and task's counters in Prometheus' text format,
//! labelled with tenant, connector and task. Kafka Connect's metric names, translated to
//! Prometheus conventions (`source-record-poll-total` -> `sluice_source_record_poll_total`,
//! times in seconds as summaries); the table is in `docs/rest-api.md`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::connect::Herder;
use crate::storage::State;

/// One metric family: its samples (name suffix, labels, value).
struct Family {
    kind: &'static str,
    help: &'static str,
    samples: Vec<(&'static str, Labels, f64)>,
}

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Families(BTreeMap<&'static str, Family>);

impl Families {
    fn family(&mut self, name: &'static str, kind: &'static str, help: &'static str) -> &mut Family {
        self.0.entry(name).or_insert_with(|| Family { kind, help, samples: Vec::new() })
    }

    fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        self.family(name, "gauge", help).samples.push(("", labels, value));
    }

    fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        self.family(name, "counter", help).samples.push(("", labels, value));
    }

    /// A summary without quantiles: the total (`_sum`) and how many (`_count`).
    fn summary(&mut self, name: &'static str, help: &'static str, labels: Labels, sum: f64, count: f64) {
        let family = self.family(name, "summary", help);
        family.samples.push(("_sum", labels.clone(), sum));
        family.samples.push(("_count", labels, count));
    }

    fn render(&self) -> String {
        let mut text = String::new();
        for (name, family) in &self.0 {
            let _ = writeln!(text, "# HELP {name} {}", family.help);
            let _ = writeln!(text, "# TYPE {name} {}", family.kind);
            for (suffix, labels, value) in &family.samples {
                if labels.is_empty() {
                    let _ = writeln!(text, "{name}{suffix} {value}");
                } else {
                    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
                    let _ = writeln!(text, "{name}{suffix}{{{}}} {value}", labels.join(","));
                }
            }
        }
        text
    }
}

/// A label value as Prometheus' text format needs it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

const STATES: [State; 7] = [
    State::Unassigned,
    State::Running,
    State::Paused,
    State::Stopped,
    State::Failed,
    State::Restarting,
    State::Finished,
];

/// The text of `GET /metrics`: every tenant's series, or one tenant's only.
pub async fn render(herder: &Herder, tenant: Option<&str>) -> String {
    let mut families = Families::default();
    let mut statuses = herder.statuses();
    if let Some(tenant) = tenant {
        statuses.retain(|(ns, _)| ns.tenant == tenant);
    }
    let metrics: BTreeMap<_, _> = herder.all_metrics().await.into_iter().collect();
    let tasks: usize = statuses.iter().map(|(_, s)| s.tasks.len()).sum();
    families.gauge(
        "sluice_connector_count",
        "Connectors of this worker (Connect's connector-count).",
        vec![],
        statuses.len() as f64,
    );
    families.gauge("sluice_task_count", "Tasks of those connectors (Connect's task-count).", vec![], tasks as f64);
    for (ns, status) in &statuses {
        let connector = || vec![("tenant", ns.tenant.clone()), ("connector", ns.connector.clone())];
        for state in STATES {
            let mut labels = connector();
            labels.push(("state", state.to_string()));
            let value = f64::from(u8::from(status.connector.state == state));
            families.gauge(
                "sluice_connector_status",
                "1 for the connector's state (Connect's connector status).",
                labels,
                value,
            );
        }
        if let Some(snapshot) = metrics.get(ns).map(|m| m.snapshot()) {
            let memory = snapshot.connector_memory as f64;
            families.gauge(
                "sluice_connector_sandbox_memory_bytes",
                "Linear memory of the connector's sandbox instance.",
                connector(),
                memory,
            );
            let (sum, count) = (snapshot.tick_total.as_secs_f64(), snapshot.ticks as f64);
            families.summary(
                "sluice_connector_tick_time_seconds",
                "Time in the connector's tick calls.",
                connector(),
                sum,
                count,
            );
        }
        let counters: BTreeMap<u32, _> = metrics.get(ns).map(|m| m.tasks().into_iter().collect()).unwrap_or_default();
        for task in &status.tasks {
            let labels = || {
                let mut labels = connector();
                labels.push(("task", task.id.to_string()));
                labels
            };
            for state in STATES {
                let mut with_state = labels();
                with_state.push(("state", state.to_string()));
                let value = f64::from(u8::from(task.state == state));
                families.gauge(
                    "sluice_task_status",
                    "1 for the task's state (Connect's task status).",
                    with_state,
                    value,
                );
            }
            let memory = task.memory_bytes as f64;
            families.gauge(
                "sluice_task_sandbox_memory_bytes",
                "Largest linear memory of the task's sandbox instance.",
                labels(),
                memory,
            );
            if let Some(fuel) = task.fuel_used {
                families.counter(
                    "sluice_task_fuel_used_total",
                    "Fuel used by the task's instance (when the worker meters fuel).",
                    labels(),
                    fuel as f64,
                );
            }
            families.counter(
                "sluice_task_records_skipped_total",
                "Records refused and skipped under errors.tolerance=all (Connect's total-records-skipped).",
                labels(),
                task.records_refused as f64,
            );
            let Some(c) = counters.get(&task.id) else { continue };
            let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
            let seconds = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64 / 1e9;
            families.counter(
                "sluice_source_record_poll_total",
                "Records returned by poll (Connect's source-record-poll-total).",
                labels(),
                get(&c.polled),
            );
            families.counter(
                "sluice_source_record_write_total",
                "Records written to the destination (Connect's source-record-write-total).",
                labels(),
                get(&c.delivered),
            );
            families.summary(
                "sluice_poll_batch_time_seconds",
                "Time in poll calls (Connect's poll-batch-avg-time-ms).",
                labels(),
                seconds(&c.poll_nanos),
                get(&c.polls),
            );
            families.summary(
                "sluice_delivery_time_seconds",
                "Time writing a batch and its offsets to the destination.",
                labels(),
                seconds(&c.deliver_nanos),
                get(&c.deliveries),
            );
            families.counter(
                "sluice_offset_commit_completion_total",
                "Offset commits (Connect's offset-commit-completion-total).",
                labels(),
                get(&c.commits),
            );
            families.counter("sluice_task_failures_total", "Times the task failed.", labels(), get(&c.failures));
            let restarts = c.starts.load(Ordering::Relaxed).saturating_sub(1) as f64;
            families.counter(
                "sluice_task_restarts_total",
                "Times the task was started again after its first start.",
                labels(),
                restarts,
            );
        }
    }
    families.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_the_text_format() {
        let mut families = Families::default();
        families.counter("sluice_x_total", "X.", vec![("tenant", "a\"b".into())], 3.0);
        families.counter("sluice_x_total", "X.", vec![("tenant", "c\nd".into())], 4.5);
        families.summary("sluice_t_seconds", "T.", vec![], 0.5, 2.0);
        let text = families.render();
        assert_eq!(
            text,
            "# HELP sluice_t_seconds T.\n# TYPE sluice_t_seconds summary\nsluice_t_seconds_sum 0.5\nsluice_t_seconds_count 2\n\
             # HELP sluice_x_total X.\n# TYPE sluice_x_total counter\nsluice_x_total{tenant=\"a\\\"b\"} 3\nsluice_x_total{tenant=\"c\\nd\"} 4.5\n"
        );
    }
}
