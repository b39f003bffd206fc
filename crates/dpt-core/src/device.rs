//! The devices replicas run on, as the command line, files and the wire write them.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One replica's device; written `cpu` or `cuda:N` on the command line, in files and on the
/// wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "String", try_from = "String")]
pub enum DeviceId {
    Cpu,
    Cuda(usize),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cpu => write!(f, "cpu"),
            DeviceId::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for DeviceId {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        match s.strip_prefix("cuda:") {
            Some(n) => n.parse().map(DeviceId::Cuda).map_err(|_| DeviceError::Unknown(s.to_owned())),
            None if s == "cpu" => Ok(DeviceId::Cpu),
            None => Err(DeviceError::Unknown(s.to_owned())),
        }
    }
}

crate::string_form!(DeviceId);

/// A `--devices` value that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("--devices is empty; use 'auto', 'cpu', 'cpu:N' or a list such as 'cuda:0,cuda:1'")]
    Empty,
    #[error("unknown device '{0}' in --devices; use 'auto', 'cpu', 'cpu:N' or 'cuda:N' (comma-separated)")]
    Unknown(String),
    #[error("{device} does not exist: this machine has {count} CUDA device(s){hint}")]
    Absent { device: String, count: usize, hint: &'static str },
    #[error("the NVIDIA driver shows {gpus} GPU(s) (driver {driver}) but libtorch finds none: this build's libtorch (torch {torch}) is built for CUDA 13.0, which needs a driver of the R580 family or newer (NVIDIA's CUDA 13.0 release notes list the exact minimum); update the driver, or train on the CPU with --devices cpu:N")]
    DriverTooOld { gpus: usize, driver: String, torch: &'static str },
    #[error("the NVIDIA driver shows {gpus} GPU(s) but CUDA_VISIBLE_DEVICES={visible} leaves libtorch none: check the ids (or UUIDs) it names, or that the driver is of CUDA 13.0's R580 family or newer; --devices cpu:N trains on the CPU")]
    NoneVisible { gpus: usize, visible: String },
}
