//! Sluice: a host for sandboxed source connectors compiled to WebAssembly components.
//!
//! One module per part (see `DESIGN.md` in the shared docs and `docs/` in the repo):
//!
//! | module | owns |
//! |---|---|
//! | [`bindings`] | the Rust types generated from `wit/` |
//! | [`config`] | connector config files and the host's own keys |
//! | [`records`] | what a plugin may return: partition, offset and topic checks |
//! | [`registry`] | the plugin folder, component checks and the compiled-component cache |
//! | [`sandbox`] | the engine, one store per instance, limits, deadlines, the imports |
//! | [`plugin_log`] | a plugin's log lines and stdout/stderr: tagged, rate-limited |
//! | [`store`] | the storage traits (offsets, configs, statuses, local records) |
//! | [`embedded`] | the SQLite implementation of every store, in the data directory |
//! | [`destination`] | where records go: `local` (exactly-once) or `stdout` |
//! | [`status`] | Kafka Connect's states and the status board |
//! | [`tenants`] | tenants from `sluice.toml`: roots, quotas, hashed tokens |
//! | [`herder`] | connector and task lifecycle; reconfiguration is decided here |
//! | [`task_runner`] | one task's poll, deliver and commit loop |
//! | [`bench`] | `sluice bench`: component vs native throughput |
//! | [`demo`] | `sluice demo`: the quick start's sample inbox and file-pulse config |
//! | [`scaffold`] | `sluice new connector`: starter projects in Rust, Python and JavaScript |
//! | [`cli`] | the `sluice` command line |

pub mod bench;
pub mod bindings;
pub mod cli;
pub mod config;
pub mod demo;
pub mod destination;
pub mod embedded;
pub mod herder;
pub mod plugin_log;
pub mod records;
pub mod registry;
pub mod sandbox;
pub mod scaffold;
pub mod status;
pub mod store;
pub mod task_runner;
pub mod tenants;

/// Where `cargo build` put the repository's example plugins (the default `plugin.path`).
pub const BUILT_PLUGINS: &str = env!("SLUICE_BUILT_PLUGINS");
/// Why a shipped plugin in another language was not built (its toolchain is missing, with
/// the install command), `" | "`-separated; empty when every plugin was built.
pub const PLUGIN_BUILD_PROBLEMS: &str = env!("SLUICE_PLUGIN_BUILD_PROBLEMS");
/// Where `cargo build` put the test fixture plugins.
pub const TEST_PLUGINS: &str = env!("SLUICE_TEST_PLUGINS");
