// Shared by the `slow-version` and `slow-config-def` fixtures: a plugin that sleeps (a
// WASI clock wait, where epoch interruption cannot reach) for an hour in the load-time call
// named by `SLEEP_IN`, the other one being quick. Each crate sets `SLEEP_IN` and includes
// this file.

wit_bindgen::generate!({ path: "../../../wit", world: "source-connector" });

use exports::sluice::connector::connector::{
    Config, ConfigKey, ConfigProblem, ConnectorError, Guest as ConnectorGuest,
};
use exports::sluice::connector::task::{Guest as TaskGuest, SourceRecord};

fn sleep_if(call: &str) {
    if call == SLEEP_IN {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

struct Slow;

impl ConnectorGuest for Slow {
    fn version() -> String {
        sleep_if("version");
        "0.0.0-slow".into()
    }
    fn config_def() -> Vec<ConfigKey> {
        sleep_if("config-def");
        Vec::new()
    }
    fn validate(_: Config) -> Vec<ConfigProblem> {
        Vec::new()
    }
    fn start(_: Config) -> Result<(), ConnectorError> {
        Ok(())
    }
    fn task_configs(_: u32) -> Result<Vec<Config>, ConnectorError> {
        Ok(Vec::new())
    }
    fn tick() -> Result<(), ConnectorError> {
        Ok(())
    }
    fn stop() {}
}

impl TaskGuest for Slow {
    fn start(_: Config) -> Result<(), ConnectorError> {
        Ok(())
    }
    fn poll() -> Result<Vec<SourceRecord>, ConnectorError> {
        Ok(Vec::new())
    }
    fn commit() -> Result<(), ConnectorError> {
        Ok(())
    }
    fn stop() {}
}

export!(Slow);
