//! Rust bindings for the `sluice:connector` world, generated from `wit/` at build time.
//!
//! Imports are synchronous (they only read the offset store or queue a request); exports
//! are called asynchronously so that epoch interruption can yield a busy plugin.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "source-connector",
    exports: { default: async },
});

pub use self::sluice::connector::types::{
    ConfigKey, ConfigProblem, ConfigType, ConnectorError, Importance, SourceRecord,
};
