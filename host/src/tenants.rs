//! The worker config (`sluice.toml`, optional): tenants (who owns connectors, what they
//! may grant, their quotas), worker-wide defaults for connector keys, and whether fuel
//! metering is on. A connector names its tenant with the `tenant` key. Without a config
//! every connector is in `default`, which has no limits.
//!
//! ```toml
//! [defaults]                                        # for connectors that do not set them
//! "sandbox.call.timeout.ms" = "2000"
//!
//! [sandbox]
//! fuel_metering = true                              # CPU accounting; costs ~10% throughput
//!
//! [[tenant]]
//! name = "acme"
//! token_sha256 = "<hex sha256 of the API token>"   # `sluice hash-token TOKEN`
//! roots = ["/data/acme"]                            # directories its connectors may be granted
//! [tenant.quotas]
//! connectors = 5
//! tasks = 10                                        # across all its connectors
//! memory_max_bytes = 134217728                      # per instance
//! records_per_second = 10000                        # across all its tasks
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::store::DEFAULT_TENANT;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    pub connectors: Option<u32>,
    pub tasks: Option<u32>,
    pub memory_max_bytes: Option<u64>,
    pub records_per_second: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    /// Hex SHA-256 of the tenant's API token: the token itself is never stored.
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Directories (and everything under them) its connectors may be granted.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    #[serde(default)]
    pub quotas: Quotas,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerSandbox {
    #[serde(default)]
    fuel_metering: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerConfig {
    #[serde(default)]
    tenant: Vec<Tenant>,
    #[serde(default)]
    defaults: BTreeMap<String, toml::Value>,
    #[serde(default)]
    sandbox: WorkerSandbox,
}

/// The worker config: every tenant (and the records/s budget each one's tasks share),
/// connector-key defaults, and fuel metering.
#[derive(Default)]
pub struct Tenants {
    declared: BTreeMap<String, Tenant>,
    buckets: Mutex<BTreeMap<String, (f64, Instant)>>,
    /// Values for connector keys a connector config does not set.
    pub defaults: BTreeMap<String, String>,
    /// Whether the engine meters fuel (needed for `sandbox.fuel.per.call`).
    pub fuel_metering: bool,
}

pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Tenants {
    /// Reads a worker config; errors name the file and what is wrong.
    pub fn load(path: &Path) -> anyhow::Result<Tenants> {
        let text =
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Tenants> {
        let config: WorkerConfig = toml::from_str(text)?;
        let mut declared = BTreeMap::new();
        for mut tenant in config.tenant {
            anyhow::ensure!(!tenant.name.is_empty(), "a tenant has an empty name");
            if let Some(hash) = &tenant.token_sha256 {
                anyhow::ensure!(
                    hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
                    "tenant {}: token_sha256 must be 64 hex digits (see `sluice hash-token`)",
                    tenant.name
                );
            }
            // Roots compare as canonical paths, like the grants they contain.
            tenant.roots =
                tenant.roots.iter().map(|r| std::fs::canonicalize(r).unwrap_or_else(|_| r.clone())).collect();
            let name = tenant.name.clone();
            anyhow::ensure!(declared.insert(name.clone(), tenant).is_none(), "tenant {name} is declared twice");
        }
        let defaults = config
            .defaults
            .into_iter()
            .map(|(key, value)| {
                let text = match value {
                    toml::Value::String(text) => text,
                    other => other.to_string(),
                };
                (key, text)
            })
            .collect();
        Ok(Tenants {
            declared,
            buckets: Mutex::new(BTreeMap::new()),
            defaults,
            fuel_metering: config.sandbox.fuel_metering,
        })
    }

    /// The tenant named `name`; `default` exists (unlimited) unless declared otherwise.
    pub fn get(&self, name: &str) -> Option<Tenant> {
        match self.declared.get(name) {
            Some(tenant) => Some(tenant.clone()),
            None if name == DEFAULT_TENANT => Some(Tenant {
                name: DEFAULT_TENANT.into(),
                token_sha256: None,
                roots: Vec::new(),
                quotas: Quotas::default(),
            }),
            None => None,
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.declared.keys().cloned().collect()
    }

    /// The tenant whose token this is.
    pub fn authenticate(&self, token: &str) -> Option<&Tenant> {
        let hash = hash_token(token);
        self.declared.values().find(|t| t.token_sha256.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&hash)))
    }

    /// Waits until `tenant` may deliver `records` more under its records/s quota.
    pub async fn throttle(&self, tenant: &str, records: u64) {
        let Some(rate) = self.declared.get(tenant).and_then(|t| t.quotas.records_per_second) else { return };
        let rate = rate.max(1) as f64;
        let wait = {
            let mut buckets = self.buckets.lock().unwrap();
            let (tokens, refilled) = buckets.entry(tenant.to_string()).or_insert((rate, Instant::now()));
            let now = Instant::now();
            *tokens = (*tokens + now.duration_since(*refilled).as_secs_f64() * rate).min(rate);
            *refilled = now;
            *tokens -= records as f64;
            if *tokens < 0.0 { Duration::from_secs_f64(-*tokens / rate) } else { Duration::ZERO }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

impl Tenant {
    /// Whether `dir` (canonical) is inside one of the roots. The unlimited `default`
    /// tenant without roots may grant anything.
    pub fn may_grant(&self, dir: &Path) -> bool {
        (self.name == DEFAULT_TENANT && self.roots.is_empty()) || self.roots.iter().any(|root| dir.starts_with(root))
    }

    pub fn roots_text(&self) -> String {
        if self.roots.is_empty() {
            "none".into()
        } else {
            self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_authenticate_and_grant() {
        let token_hash = hash_token("s3cret");
        let tenants = Tenants::parse(&format!(
            "[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{token_hash}\"\nroots = [\"/data/acme\"]\n[tenant.quotas]\nconnectors = 2\n"
        ))
        .unwrap();
        let acme = tenants.get("acme").unwrap();
        assert_eq!(acme.quotas.connectors, Some(2));
        assert_eq!(tenants.authenticate("s3cret").map(|t| t.name.as_str()), Some("acme"));
        assert!(tenants.authenticate("wrong").is_none());
        assert!(acme.may_grant(Path::new("/data/acme/in")));
        assert!(!acme.may_grant(Path::new("/data/acmex")));
        assert!(!acme.may_grant(Path::new("/etc")));
        assert!(tenants.get("default").unwrap().may_grant(Path::new("/anything")));
        assert!(tenants.get("nobody").is_none());
        assert!(Tenants::parse("[[tenant]]\nname = \"x\"\ntoken_sha256 = \"plain\"\n").is_err());
        assert!(Tenants::parse("[[tenant]]\nname = \"x\"\nsurprise = 1\n").is_err());
        let worker =
            Tenants::parse("[defaults]\n\"sandbox.call.timeout.ms\" = 2000\n[sandbox]\nfuel_metering = true\n")
                .unwrap();
        assert_eq!(worker.defaults["sandbox.call.timeout.ms"], "2000");
        assert!(worker.fuel_metering);
    }
}
