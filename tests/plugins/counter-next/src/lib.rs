//! Test fixture: the `counter` example's own source, built as another component whose
//! `version` is this crate's (`0.2.0-next`). A test copies it over a plugin file built from
//! `counter` to replace a plugin while connectors run the old one.
#![cfg(target_family = "wasm")]

#[path = "../../../../plugins/counter/src/generator.rs"]
pub mod generator;

#[path = "../../../../plugins/counter/src/component.rs"]
mod component;
