//! Integration tests: real plugins (built from source by `host/build.rs`) in a real host,
//! one test binary with a module per feature, as wasmtime does.

mod common;
mod errors;
#[path = "../support/languages.rs"]
mod expected;
mod failures;
mod file_pulse;
mod file_pulse_edges;
#[path = "../support/files.rs"]
mod files;
mod hostile;
mod imports;
mod kafka;
mod languages;
mod reconfigure;
#[path = "../support/record_path.rs"]
mod record_path;
mod record_path_random;
mod registry;
mod tenants;
mod transforms;
mod worker;
mod world_versions;
