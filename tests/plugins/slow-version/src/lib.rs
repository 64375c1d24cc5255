//! Test fixture: `version()` sleeps for an hour (a WASI clock wait) when the host loads
//! the plugin; see `../slow-load/common.rs`.
//!
//! A component only: on any other target the crate is empty.
#![cfg(target_family = "wasm")]

const SLEEP_IN: &str = "version";

include!("../../slow-load/common.rs");
