//! Fuzzes the plugin loader: arbitrary bytes (and, from the seed corpus, mutated valid
//! components) go through everything `sluice` does with a `.wasm` it finds in the plugin
//! folder: checks, compilation, linking against the world, and instantiation to read
//! `version` and `config-def` under the sandbox's limits. Any outcome is fine except a
//! panic or a crash.
//!
//! ```sh
//! mkdir -p fuzz/corpus/plugin_loader && cp target/plugins/*.wasm target/test-plugins/*.wasm fuzz/corpus/plugin_loader/
//! cd fuzz && SLUICE_SKIP_PLUGIN_BUILD=1 cargo +nightly fuzz run --sanitizer none plugin_loader -- -max_total_time=600
//! ```
#![no_main]

use std::path::Path;
use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use sluice::runtime::Runtime;

static HOST: LazyLock<(Arc<Runtime>, tokio::runtime::Runtime)> = LazyLock::new(|| {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    (Runtime::new().expect("engine"), tokio)
});

fuzz_target!(|bytes: &[u8]| {
    let (runtime, tokio) = &*HOST;
    let _ = tokio.block_on(sluice::runtime::registry::inspect(runtime, "fuzzed", Path::new("fuzzed.wasm"), bytes, None));
});
