//! Rust bindings for the `sluice:connector` world, generated from `wit/` at build time.
//!
//! Exports are called asynchronously so that epoch interruption can yield a busy plugin
//! and a wall-clock deadline can abandon a call blocked anywhere. The offset reader's
//! imports are async (their store lookups run off the async runtime's threads) and may
//! trap (a request past the instance's limits is refused); the other imports only queue
//! a request or a log line.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "source-connector",
    imports: {
        "sluice:connector/offset-storage-reader.offset": async | trappable,
        "sluice:connector/offset-storage-reader.offsets": async | trappable,
    },
    exports: { default: async },
});

pub use self::sluice::connector::types::{
    ConfigKey, ConfigProblem, ConfigType, ConnectorError, Importance, SourceRecord,
};
