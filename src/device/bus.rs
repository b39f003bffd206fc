//! The allreduce bus bandwidth `dpt-tui doctor` measured across a set of GPUs, kept in the cache
//! (`$XDG_CACHE_HOME/dpt-tui/bus/`, one file per set of GPU UUIDs) so that a run on the same
//! GPUs can weigh its own allreduce against it (the communication verdict).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::bottleneck::MeasuredBus;

/// One measurement, with the GPUs it was made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kept {
    /// The GPUs' UUIDs, sorted.
    gpus: Vec<String>,
    bus: MeasuredBus,
}

/// The file a measurement across `uuids` (in any order) is kept in, under `cache`.
fn file(cache: &Path, uuids: &[String]) -> (PathBuf, Vec<String>) {
    let mut gpus = uuids.to_vec();
    gpus.sort();
    let name = format!("{:016x}.json", crate::data::fnv(gpus.join(",")));
    (cache.join("bus").join(name), gpus)
}

/// Keeps `bus` as measured across `uuids`, replacing an earlier measurement of the same GPUs.
pub fn save(cache: &Path, uuids: &[String], bus: MeasuredBus) -> std::io::Result<()> {
    let (path, gpus) = file(cache, uuids);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string(&Kept { gpus, bus }).map_err(std::io::Error::other)?;
    crate::atomic::write_with(&path, |tmp| std::fs::write(tmp, &text))
}

/// The measurement across exactly `uuids`, if doctor made one (an unreadable file is none).
pub fn load(cache: &Path, uuids: &[String]) -> Option<MeasuredBus> {
    let (path, gpus) = file(cache, uuids);
    let kept: Kept = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    (kept.gpus == gpus).then_some(kept.bus)
}

/// The measurement across the CUDA devices `devices` (two or more distinct GPUs), from
/// dpt-tui's cache.
pub fn measured_for(devices: &[dpt_core::device::DeviceId]) -> Option<MeasuredBus> {
    let mut cuda: Vec<usize> = devices
        .iter()
        .filter_map(|d| if let dpt_core::device::DeviceId::Cuda(i) = d { Some(*i) } else { None })
        .collect();
    cuda.sort_unstable();
    cuda.dedup();
    if cuda.len() < 2 {
        return None;
    }
    let uuids: Option<Vec<String>> =
        cuda.iter().map(|&i| dpt_sys::c10d::cuda_identity(i).ok().map(|id| id.nvml_uuid())).collect();
    load(&crate::data::cache_base()?, &uuids?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_is_found_for_the_same_gpus_in_any_order_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = ("GPU-a".to_owned(), "GPU-b".to_owned(), "GPU-c".to_owned());
        let bus = MeasuredBus { gbs: 181.5, unix: 1.0e9 };
        save(dir.path(), &[b.clone(), a.clone()], bus).unwrap();
        assert_eq!(load(dir.path(), &[a.clone(), b.clone()]), Some(bus));
        assert_eq!(load(dir.path(), &[a.clone(), b.clone(), c.clone()]), None, "another set of GPUs");
        assert_eq!(load(dir.path(), std::slice::from_ref(&a)), None);
        let newer = MeasuredBus { gbs: 90.0, unix: 2.0e9 };
        save(dir.path(), &[a.clone(), b.clone()], newer).unwrap();
        assert_eq!(load(dir.path(), &[b, a]), Some(newer), "the newest measurement");
    }
}
