//! {{name}}: a Sluice source connector in Rust. Each task sends `record.count` numbered
//! messages to `topic` and resumes after its committed offset when restarted.

use serde::{Deserialize, Serialize};
use sluice_connector::{Config, ConfigKey, ConfigType, Connector, Error, Record, Task, log, offsets};

/// Source partition: which task's sequence, `{"task": 0}`.
#[derive(Serialize)]
struct Partition {
    task: u32,
}

/// Source offset: the last message sent, `{"n": 41}`.
#[derive(Serialize, Deserialize)]
struct Offset {
    n: u64,
}

struct Greeter {
    config: Config,
}

impl Connector for Greeter {
    fn version() -> String {
        env!("CARGO_PKG_VERSION").into()
    }

    fn config_def() -> Vec<ConfigKey> {
        vec![
            ConfigKey::optional("topic", ConfigType::String, "{{name}}", "Destination topic."),
            ConfigKey::optional("message", ConfigType::String, "hello", "The text of every record."),
            ConfigKey::optional("record.count", ConfigType::Long, "10", "Records per task; 0 is endless."),
        ]
    }

    fn start(config: Config) -> Result<Self, Error> {
        config.parse::<u64>("record.count", 10)?;
        Ok(Greeter { config })
    }

    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
        Ok((0..max_tasks).map(|task| self.config.clone().with("task", task)).collect())
    }
}

struct GreeterTask {
    topic: String,
    message: String,
    count: u64,
    task: u32,
    next: u64,
}

impl Task for GreeterTask {
    fn start(config: Config) -> Result<Self, Error> {
        let task = config.parse("task", 0)?;
        // Resume after the committed offset, if there is one.
        let next = offsets::get::<_, Offset>(&Partition { task }).map_or(0, |o| o.n + 1);
        log::info(&format!("task {task} starts at message {next}"));
        Ok(GreeterTask {
            topic: config.get("topic").unwrap_or("{{name}}").to_string(),
            message: config.get("message").unwrap_or("hello").to_string(),
            count: config.parse("record.count", 10)?,
            task,
            next,
        })
    }

    fn poll(&mut self) -> Result<Vec<Record>, Error> {
        let mut records = Vec::new();
        while records.len() < 100 && (self.count == 0 || self.next < self.count) {
            let value = format!(r#"{{"task":{},"n":{},"message":"{}"}}"#, self.task, self.next, self.message);
            records.push(
                Record::new(&self.topic, &Partition { task: self.task }, &Offset { n: self.next }).with_value(value),
            );
            self.next += 1;
        }
        Ok(records)
    }
}

sluice_connector::export_connector!(Greeter, GreeterTask);
