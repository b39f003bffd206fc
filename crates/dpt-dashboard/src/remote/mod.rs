//! Training that outlives the terminal: the job serves its events and takes controls on a Unix
//! domain socket; viewers attach, detach and attach again.

pub mod client;
pub mod hub;
pub mod protocol;
pub mod registry;
pub mod runs;
pub mod server;
