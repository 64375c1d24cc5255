//! The component: the counter as a [`sluice_connector`] connector over [`crate::generator`].

use serde::{Deserialize, Serialize};
use sluice_connector::{Batch, Config, ConfigKey, ConfigType, Connector, Error, Task, log, offsets};

use crate::generator::{self, Pace};

/// `{"counter": <task>}`
#[derive(Serialize)]
struct Partition {
    counter: u32,
}

/// `{"seq": <last record>}`
#[derive(Deserialize)]
struct Offset {
    seq: u64,
}

struct Settings {
    topic: String,
    count: u64,
    size: usize,
    batch: usize,
    rate: u64,
    finish: bool,
}

impl Settings {
    fn parse(config: &Config) -> Result<Settings, Error> {
        Ok(Settings {
            topic: config.topic("topic")?.to_string(),
            count: config.parse("record.count", 0)?,
            size: config.parse("record.size", 64)?,
            batch: config.parse::<usize>("batch.size", 100)?.max(1),
            rate: config.parse("records.per.second", 0)?,
            finish: config.parse("finish", false)?,
        })
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

struct Counter {
    config: Config,
    tasks: u32,
    ticks: u64,
}

/// The connector reports its tasks' committed offsets every this many ticks: reading them
/// costs a store lookup, which thousands of idle connectors should not pay every tick.
const REPORT_EVERY_TICKS: u64 = 10;

impl Connector for Counter {
    fn version() -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn config_def() -> Vec<ConfigKey> {
        vec![
            ConfigKey::required("topic", "Destination topic."),
            ConfigKey::optional("record.count", ConfigType::Long, "0", "Records per task; 0 is endless."),
            ConfigKey::optional("record.size", ConfigType::Int, "64", "Bytes per record value."),
            ConfigKey::optional("batch.size", ConfigType::Int, "100", "Records returned per poll."),
            ConfigKey::optional(
                "records.per.second",
                ConfigType::Long,
                "0",
                "Rate per task; 0 is unlimited. Time paused is not made up in a burst.",
            ),
            ConfigKey::optional(
                "finish",
                ConfigType::Boolean,
                "false",
                "true: a task with a record.count reports itself done once it has produced them (its connector is then FINISHED).",
            ),
        ]
    }

    fn validate(config: &Config) -> Vec<sluice_connector::ConfigProblem> {
        match Settings::parse(config) {
            Err(Error::InvalidConfig(message)) => {
                let (key, message) = message.split_once(": ").unwrap_or(("", &message));
                vec![sluice_connector::ConfigProblem { key: key.into(), message: message.into() }]
            }
            _ => Vec::new(),
        }
    }

    fn start(config: Config) -> Result<Self, Error> {
        Settings::parse(&config)?;
        Ok(Counter { config, tasks: 0, ticks: 0 })
    }

    /// Each task gets the connector's config plus its number.
    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
        self.tasks = max_tasks;
        Ok((0..max_tasks).map(|task| self.config.clone().with("counter.task", task)).collect())
    }

    /// Reports how far each task has got, read through KIP-131's offset reader (at the
    /// first tick, then every [`REPORT_EVERY_TICKS`]).
    fn tick(&mut self) -> Result<(), Error> {
        self.ticks += 1;
        if !(self.ticks - 1).is_multiple_of(REPORT_EVERY_TICKS) {
            return Ok(());
        }
        let partitions: Vec<Partition> = (0..self.tasks).map(|counter| Partition { counter }).collect();
        let committed: Vec<Option<Offset>> = offsets::get_many(&partitions);
        let progress: Vec<String> = committed
            .iter()
            .enumerate()
            .map(|(task, o)| format!("task {task} at {}", o.as_ref().map_or("none".into(), |o| o.seq.to_string())))
            .collect();
        log::debug(&format!("committed offsets: {}", progress.join(", ")));
        Ok(())
    }
}

struct CounterTask {
    settings: Settings,
    task: u32,
    next: u64,
    pace: Pace,
}

impl Task for CounterTask {
    fn start(config: Config) -> Result<Self, Error> {
        let settings = Settings::parse(&config)?;
        let task = config.parse("counter.task", 0)?;
        let next = offsets::get::<_, Offset>(&Partition { counter: task }).map_or(0, |o| o.seq + 1);
        log::info(&format!("task {task} resumes at record {next}"));
        let pace = Pace::new(settings.rate, settings.batch as u64, now_ms());
        Ok(CounterTask { settings, task, next, pace })
    }

    /// Writes each record straight into the batch (no allocation per record).
    fn poll_into(&mut self, batch: &mut Batch) -> Result<(), Error> {
        let s = &self.settings;
        let count = self.pace.allow(s.batch as u64, now_ms());
        let end = match s.count {
            0 => self.next.saturating_add(count),
            total => total.min(self.next.saturating_add(count)),
        };
        if end <= self.next {
            // Nothing to make: an idle task's poll costs next to nothing.
            return Ok(());
        }
        let to = batch.destination(&generator::partition(self.task), Some(&s.topic));
        let mut task_digits = itoa::Buffer::new();
        let task = task_digits.format(self.task);
        let mut seq_digits = itoa::Buffer::new();
        for seq in self.next..end {
            let seq = seq_digits.format(seq);
            batch
                .record_to_with(to, |out| generator::write_offset_text(out, seq))
                .value_with(|out| generator::write_value_text(out, task, seq, s.size));
        }
        self.pace.made(end - self.next);
        self.next = end;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.settings.finish && self.settings.count > 0 && self.next >= self.settings.count
    }
}

sluice_connector::export_connector!(Counter, CounterTask);
