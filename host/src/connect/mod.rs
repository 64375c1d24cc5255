//! The connect layer: Kafka Connect's runtime. The herder's lifecycle API ([`Herder`]),
//! admission of configs ([`admission`]), each connector's loop and its reconfigurations
//! ([`connector`], deciding with the pure [`reconfigure::plan`]), each task's poll,
//! deliver and commit loop ([`task_runner`]) and the lane its batches are delivered on
//! ([`lane`]), the checks on what a plugin returns
//! ([`records`]) and the transforms they apply ([`transforms`]), the status board ([`status`]), the topics each connector wrote to
//! ([`topics`]), the tenants' rate budgets ([`limits`]) and each connector's in-memory
//! counters ([`metrics`]).
//!
//! Uses the config, storage, runtime and destinations layers.

mod admission;
mod connector;
mod herder;
mod lane;
pub mod limits;
pub mod metrics;
pub mod reconfigure;
pub mod records;
mod services;
pub mod status;
mod task_runner;
pub mod topics;
mod transforms;

pub use admission::Admitted;
pub use herder::{Herder, HerderError};
pub use services::{IdlePolls, Services};
pub use status::StatusBoard;
