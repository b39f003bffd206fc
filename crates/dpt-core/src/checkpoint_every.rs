//! How often periodic checkpoints are written (`--checkpoint-every`): every N epochs (a bare
//! number, as before), every N optimizer steps (`500steps`), or every so much wall-clock time
//! (`20m`, `90s`, `2h`). 0 of anything: only when the run stops and at its end.

use std::time::Duration;

/// The cadence of periodic checkpoints (written in files as on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum CheckpointEvery {
    Epochs(usize),
    Steps(usize),
    Time(Duration),
}

impl Default for CheckpointEvery {
    fn default() -> Self {
        CheckpointEvery::Epochs(1)
    }
}

impl CheckpointEvery {
    /// Whether any checkpoint is ever due (0 steps, epochs or seconds: never).
    pub fn is_on(self) -> bool {
        match self {
            CheckpointEvery::Epochs(n) | CheckpointEvery::Steps(n) => n > 0,
            CheckpointEvery::Time(t) => !t.is_zero(),
        }
    }

    /// Whether a checkpoint is due after the step that made `global_step` steps in all, `since`
    /// the last one was written; `epoch_end`: that step ended epoch `epochs_done` (1-based).
    pub fn due(self, global_step: usize, epoch_end: Option<usize>, since: Duration) -> bool {
        match self {
            CheckpointEvery::Epochs(n) => n > 0 && epoch_end.is_some_and(|e| e % n == 0),
            CheckpointEvery::Steps(n) => n > 0 && global_step % n == 0,
            CheckpointEvery::Time(t) => !t.is_zero() && since >= t,
        }
    }
}

crate::string_form!(CheckpointEvery);

impl std::fmt::Display for CheckpointEvery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointEvery::Epochs(n) => write!(f, "{n}"),
            CheckpointEvery::Steps(n) => write!(f, "{n}steps"),
            CheckpointEvery::Time(t) => match t.as_secs() {
                s if s > 0 && s % 3600 == 0 => write!(f, "{}h", s / 3600),
                s if s > 0 && s % 60 == 0 => write!(f, "{}m", s / 60),
                s => write!(f, "{s}s"),
            },
        }
    }
}

impl std::str::FromStr for CheckpointEvery {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("'{s}' is not a cadence; use N (epochs), Nepochs, Nsteps, or a time such as 20m, 90s, 2h")
        };
        let t = s.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let count = || usize::try_from(n).map_err(|_| bad());
        match t[digits..].trim() {
            "" | "epoch" | "epochs" => Ok(CheckpointEvery::Epochs(count()?)),
            "step" | "steps" => Ok(CheckpointEvery::Steps(count()?)),
            "s" | "sec" | "secs" => Ok(CheckpointEvery::Time(Duration::from_secs(n))),
            "m" | "min" | "mins" => Ok(CheckpointEvery::Time(Duration::from_secs(n * 60))),
            "h" => Ok(CheckpointEvery::Time(Duration::from_secs(n * 3600))),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cadences_parse_print_and_fall_due() {
        for (text, every) in [
            ("2", CheckpointEvery::Epochs(2)),
            ("1epoch", CheckpointEvery::Epochs(1)),
            ("500steps", CheckpointEvery::Steps(500)),
            ("20m", CheckpointEvery::Time(Duration::from_secs(1200))),
            ("90s", CheckpointEvery::Time(Duration::from_secs(90))),
            ("2h", CheckpointEvery::Time(Duration::from_secs(7200))),
        ] {
            assert_eq!(text.parse::<CheckpointEvery>(), Ok(every), "{text}");
            assert_eq!(every.to_string().parse::<CheckpointEvery>(), Ok(every), "{every} round trips");
        }
        assert!("steps".parse::<CheckpointEvery>().is_err());
        assert!(CheckpointEvery::Epochs(1).is_on() && CheckpointEvery::Time(Duration::from_secs(1)).is_on());
        for off in ["0", "0steps", "0s"] {
            assert!(!off.parse::<CheckpointEvery>().unwrap().is_on(), "{off} is never due");
        }
        assert!("5 fortnights".parse::<CheckpointEvery>().unwrap_err().contains("Nsteps"));
        let zero = Duration::ZERO;
        assert!(CheckpointEvery::Steps(500).due(1000, None, zero));
        assert!(!CheckpointEvery::Steps(500).due(999, None, zero));
        assert!(
            CheckpointEvery::Epochs(2).due(7, Some(4), zero)
                && !CheckpointEvery::Epochs(2).due(7, None, zero)
        );
        let every = CheckpointEvery::Time(Duration::from_secs(60));
        assert!(every.due(3, None, Duration::from_secs(61)) && !every.due(3, None, Duration::from_secs(59)));
        assert!(!CheckpointEvery::Steps(0).due(0, Some(1), zero), "0: never");
    }
}
