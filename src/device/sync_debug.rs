//! `DPT_SYNC_DEBUG`: c10's CUDA sync debug mode for a run on GPUs, as
//! `torch.cuda.set_sync_debug_mode` sets it, so that the first GPU run shows every host
//! synchronization its steps make: `1` (or `warn`) prints each synchronizing CUDA call and
//! counts them (the progress lines' `CUDA syncs/step`), `2` (or `error`) fails the first one with
//! an error that names it, `0` (or unset) leaves it off.

use dpt_sys::c10d::{cuda_sync_count, C10dError, SyncDebug};

/// The variable's name.
pub const VAR: &str = "DPT_SYNC_DEBUG";

/// The mode `value` asks for (`None`: off), or a line saying what it takes.
pub fn mode(value: Option<&str>) -> Result<Option<SyncDebug>, String> {
    match value.map(str::trim) {
        None | Some("" | "0" | "off") => Ok(None),
        Some("1" | "warn") => Ok(Some(SyncDebug::Warn)),
        Some("2" | "error") => Ok(Some(SyncDebug::Error)),
        Some(other) => {
            Err(format!("{VAR}={other} is not a sync debug mode; use 1 (warn and count) or 2 (error)"))
        }
    }
}

/// The synchronizing CUDA calls counted between report windows.
#[derive(Debug)]
pub struct SyncTally {
    /// The process's count at the last window.
    last: u64,
}

impl SyncTally {
    /// From the count now.
    pub fn start() -> Result<SyncTally, C10dError> {
        Ok(SyncTally { last: cuda_sync_count()? })
    }

    /// Synchronizing calls per step over a window of `steps` steps that ends now.
    pub fn per_step(&mut self, steps: usize) -> Option<f64> {
        let now = cuda_sync_count().ok()?;
        let calls = now.saturating_sub(std::mem::replace(&mut self.last, now));
        (steps > 0).then(|| calls as f64 / steps as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_a_mode_or_is_refused_in_a_line() {
        assert_eq!(mode(None), Ok(None));
        assert_eq!(mode(Some("0")), Ok(None));
        assert_eq!(mode(Some("1")), Ok(Some(SyncDebug::Warn)));
        assert_eq!(mode(Some(" warn")), Ok(Some(SyncDebug::Warn)));
        assert_eq!(mode(Some("error")), Ok(Some(SyncDebug::Error)));
        let e = mode(Some("yes")).expect_err("refused");
        assert!(e.starts_with("DPT_SYNC_DEBUG=yes is not a sync debug mode"), "{e}");
    }
}
