//! {{name}}: a Sluice source connector in Rust. It reads `streams` (here, made-up
//! sequences of numbered messages; in your connector, files, tables, symbols...), shares
//! them among its tasks, and sends `record.count` messages per stream to `topic`.
//!
//! Each record's source partition names the stream it comes from, never the task that
//! read it: when `tasks.max` changes, streams move between tasks and each new owner
//! resumes after that stream's committed offset, so nothing is sent twice or skipped. A
//! task whose streams have all sent `record.count` messages says it is done
//! (`sluice run --until-done` exits once every task is).

use serde::{Deserialize, Serialize};
use sluice_connector::{Config, ConfigKey, ConfigType, Connector, Error, Record, Task, log, offsets};

/// Source partition: the stream a record comes from, `{"stream": "north"}`.
#[derive(Serialize)]
struct Partition<'a> {
    stream: &'a str,
}

/// Source offset: the last message sent from that stream, `{"n": 41}`.
#[derive(Serialize, Deserialize)]
struct Offset {
    n: u64,
}

/// The stream names, each once: a name given twice would go to two tasks, and both would
/// send its records.
fn streams(config: &Config) -> Vec<String> {
    let list = config.get("streams").unwrap_or("north,south,east,west");
    let mut names: Vec<String> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !names.iter().any(|known| known == name) {
            names.push(name.to_string());
        }
    }
    names
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
            ConfigKey::optional("streams", ConfigType::List, "north,south,east,west", "The sources to read."),
            ConfigKey::optional("message", ConfigType::String, "hello", "The text of every record."),
            ConfigKey::optional("record.count", ConfigType::Long, "10", "Records per stream; 0 is endless."),
            ConfigKey::optional(
                "message.file",
                ConfigType::String,
                "",
                "A file whose text is the message instead (its directory must be in sandbox.fs.read).",
            ),
        ]
    }

    fn start(config: Config) -> Result<Self, Error> {
        config.parse::<u64>("record.count", 10)?;
        if streams(&config).is_empty() {
            return Err(Error::InvalidConfig("streams: name at least one".into()));
        }
        Ok(Greeter { config })
    }

    /// Stream i goes to task i mod n: at most one task per stream.
    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
        let streams = streams(&self.config);
        let tasks = streams.len().min(max_tasks.max(1) as usize);
        Ok((0..tasks)
            .map(|task| {
                let mine: Vec<&str> = streams.iter().skip(task).step_by(tasks).map(String::as_str).collect();
                self.config.clone().with("streams", mine.join(","))
            })
            .collect())
    }
}

struct Stream {
    name: String,
    next: u64,
}

struct GreeterTask {
    topic: String,
    message: String,
    count: u64,
    streams: Vec<Stream>,
}

impl Task for GreeterTask {
    fn start(config: Config) -> Result<Self, Error> {
        let names = streams(&config);
        // Every stream this task now owns resumes after its committed offset (one call).
        let partitions: Vec<Partition> = names.iter().map(|stream| Partition { stream }).collect();
        let committed: Vec<Option<Offset>> = offsets::get_many(&partitions);
        let streams: Vec<Stream> = names
            .iter()
            .zip(committed)
            .map(|(name, offset)| Stream { name: name.clone(), next: offset.map_or(0, |o| o.n + 1) })
            .collect();
        for stream in &streams {
            log::info(&format!("stream {} starts at message {}", stream.name, stream.next));
        }
        let message = match config.get("message.file").filter(|path| !path.is_empty()) {
            // The error names the file and, if it looks missing, the grant it needs.
            Some(path) => sluice_connector::fs::read_to_string(path)?.trim().to_string(),
            None => config.get("message").unwrap_or("hello").to_string(),
        };
        Ok(GreeterTask {
            topic: config.get("topic").unwrap_or("{{name}}").to_string(),
            message,
            count: config.parse("record.count", 10)?,
            streams,
        })
    }

    /// Up to 100 records, taken in turn from the streams that have more. No records (and
    /// not done) means nothing to send now: the host calls again after a short pause
    /// (growing to 1 s).
    fn poll(&mut self) -> Result<Vec<Record>, Error> {
        let mut records = Vec::new();
        let count = self.count;
        while records.len() < 100 {
            let before = records.len();
            for stream in self.streams.iter_mut().filter(|s| count == 0 || s.next < count) {
                let value = format!(r#"{{"stream":"{}","n":{},"message":"{}"}}"#, stream.name, stream.next, self.message);
                let partition = Partition { stream: &stream.name };
                records.push(Record::new(&self.topic, &partition, &Offset { n: stream.next }).with_value(value));
                stream.next += 1;
            }
            if records.len() == before {
                break;
            }
        }
        Ok(records)
    }

    /// Done once every stream sent `record.count` messages (never when it is 0).
    fn is_done(&self) -> bool {
        self.count > 0 && self.streams.iter().all(|s| s.next >= self.count)
    }
}

sluice_connector::export_connector!(Greeter, GreeterTask);
