//! KIP-558's active topics: which topics each connector has written records to since they
//! were last reset, kept in the status store (`GET /connectors/{name}/topics`). A
//! delivered batch's topics are checked against the worker's own view, so the store is
//! written once per new topic, not once per batch.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::config::TopicTracking;
use crate::storage::{ActiveTopic, Namespace, RecordBatch, StatusStore, now_ms};

/// One connector's topics known to be stored: `None` until read from the store.
type Known = Arc<Mutex<Option<HashSet<Arc<str>>>>>;

pub struct ActiveTopics {
    settings: TopicTracking,
    store: Arc<dyn StatusStore>,
    /// By connector, the topics known to be stored (`None` until read from the store, the
    /// first time one of its batches is delivered). Each connector has a lock of its own,
    /// held while its store is written, so a slow store holds up only that connector.
    known: Mutex<HashMap<Namespace, Known>>,
}

impl ActiveTopics {
    pub fn new(settings: TopicTracking, store: Arc<dyn StatusStore>) -> ActiveTopics {
        ActiveTopics { settings, store, known: Mutex::default() }
    }

    pub fn settings(&self) -> TopicTracking {
        self.settings
    }

    fn entry(&self, ns: &Namespace) -> Known {
        let mut known = self.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        known.entry(ns.clone()).or_default().clone()
    }

    /// Notes that `task` of the connector delivered `records`. A store that cannot be
    /// written is logged, not fatal: the records are delivered, and the topic is tried
    /// again with the next batch.
    pub fn delivered(&self, ns: &Namespace, task: u32, records: &RecordBatch) {
        if !self.settings.enable {
            return;
        }
        let topics = records.topics_written();
        if topics.is_empty() {
            return;
        }
        let entry = self.entry(ns);
        let mut known = entry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if known.is_none() {
            match self.store.active_topics(ns) {
                Ok(stored) => *known = Some(stored.into_iter().map(|topic| Arc::from(topic.name)).collect()),
                Err(e) => return tracing::warn!(connector = %ns.connector, "cannot read its active topics: {e:#}"),
            }
        }
        let known = known.as_mut().expect("read just above");
        for topic in topics {
            if known.contains(topic) {
                continue;
            }
            let status = ActiveTopic { name: topic.to_string(), task, discovered_ms: now_ms() };
            match self.store.put_active_topic(ns, &status) {
                Ok(()) => {
                    known.insert(topic.clone());
                }
                Err(e) => {
                    tracing::warn!(connector = %ns.connector, topic = %topic, "cannot store an active topic: {e:#}")
                }
            }
        }
    }

    /// The connector's active topics, by name.
    pub fn list(&self, ns: &Namespace) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self.store.active_topics(ns)?.into_iter().map(|topic| topic.name).collect();
        names.sort();
        Ok(names)
    }

    /// Forgets the connector's active topics (KIP-558's reset). Under the connector's lock,
    /// so a batch delivered meanwhile is either forgotten too or recorded afresh.
    pub fn reset(&self, ns: &Namespace) -> anyhow::Result<()> {
        let entry = self.entry(ns);
        let mut known = entry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.store.reset_active_topics(ns)?;
        *known = Some(HashSet::new());
        Ok(())
    }

    /// Drops the view of a deleted connector, whose stored topics went with the rest of
    /// what was stored of it (`ConfigStore::delete_connector`); its tasks are stopped.
    pub fn forget(&self, ns: &Namespace) {
        self.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(ns);
    }
}
