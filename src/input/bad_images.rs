//! The images of a streamed data set that failed to decode, and how many may.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use super::loader::LoadError;

/// The images that failed to decode while training, over every replica of the process (each
/// counted once, however many epochs meet it), and how many may.
pub struct BadImages {
    seen: Mutex<HashSet<PathBuf>>,
    pub allowed: usize,
    pub fraction: f64,
}

impl BadImages {
    /// `fraction` of all `total` images may fail.
    pub fn new(fraction: f64, total: usize) -> BadImages {
        BadImages { seen: Mutex::default(), allowed: (fraction * total as f64).floor() as usize, fraction }
    }

    /// Counts the images of `failed` (`(path, why)`) not counted before; an error once more
    /// than allowed have failed.
    pub(super) fn add(&self, failed: &[(PathBuf, String)]) -> Result<(), LoadError> {
        let mut seen = self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.extend(failed.iter().map(|(path, _)| path.clone()));
        match failed.last() {
            Some((path, why)) if seen.len() > self.allowed => Err(LoadError::TooManyBad {
                count: seen.len(),
                allowed: self.allowed,
                fraction: self.fraction,
                last: format!("{}: {why}", path.display()),
            }),
            _ => Ok(()),
        }
    }
}
