//! The flags of `dpt-tui bench` (`session::bench`): where it runs, for how long, which cases,
//! on what data, against which Python, and where its results go. Read once into these types;
//! the bench checks them against the machine (`--devices` through the resolver a run uses).

use std::path::PathBuf;
use std::time::Duration;

use super::values::parse;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The devices, as a run's --devices names them: `auto` (every CUDA device, else the CPU),
    /// `cpu`, or GPUs such as `cuda:0,cuda:1`; one-device cases run on the first, the
    /// data-parallel case on all.
    #[arg(long, value_name = "LIST", default_value = "auto")]
    pub devices: String,
    /// The whole bench's time (`90s`, `8m`, `1h`; a minute at least), shared out over the
    /// cases; a case past its share is reported as timed out and the rest go on.
    #[arg(long, default_value = "5m", value_name = "TIME", value_parser = parse::<Budget>)]
    pub budget: Budget,
    /// The cases to run (comma-separated; default: every case this machine can run).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Real data instead of synthetic: a folder of IDX files (MNIST, Fashion-MNIST) for the
    /// image cases, or of train.bin/val.bin tokens for the GPT; give it twice for both.
    #[arg(long, value_name = "DIR")]
    pub data: Vec<PathBuf>,
    /// A Python with torch of this build's release for the PyTorch side (default: the
    /// set-up's own virtualenv; `none`: no PyTorch side).
    #[arg(long, value_name = "PY", value_parser = parse::<PythonArg>)]
    pub python: Option<PythonArg>,
    /// Where bench.json, bench.md and each case's record and logs go (a new folder;
    /// default `bench-<time>`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `--python`: a Python to run the PyTorch side, or none at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonArg {
    /// `none`: the bench measures dpt-tui alone.
    None,
    Path(PathBuf),
}

impl std::str::FromStr for PythonArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" => Err("--python is empty: name a Python (such as .venv/bin/python) or `none`".into()),
            "none" => Ok(PythonArg::None),
            path => Ok(PythonArg::Path(PathBuf::from(path))),
        }
    }
}

/// The whole bench's time, from `--budget` (`90s`, `8m`, `1h`); at least a minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget(pub Duration);

/// The least budget a bench is given: the start-up of one case's two processes alone takes
/// seconds on a GPU.
pub const MIN_BUDGET: Duration = Duration::from_secs(60);

impl std::str::FromStr for Budget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (n, unit) = t.split_at(digits);
        let n: u64 =
            n.parse().map_err(|_| format!("bad --budget '{s}': use a time such as 90s, 8m or 1h"))?;
        let scale = match unit {
            "s" => 1,
            "m" | "" => 60,
            "h" => 3600,
            _ => return Err(format!("bad --budget '{s}': use a time such as 90s, 8m or 1h")),
        };
        let secs =
            n.checked_mul(scale).ok_or_else(|| format!("--budget {s} is too long: give hours, not ages"))?;
        let budget = Duration::from_secs(secs);
        if budget < MIN_BUDGET {
            return Err(format!(
                "--budget {s} is under a minute: a case's two processes take seconds to start; give 1m or more"
            ));
        }
        Ok(Budget(budget))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_a_time_of_a_minute_or_more() {
        assert_eq!("8m".parse(), Ok(Budget(Duration::from_secs(480))));
        assert_eq!("90s".parse(), Ok(Budget(Duration::from_secs(90))));
        assert_eq!("1h".parse(), Ok(Budget(Duration::from_secs(3600))));
        assert_eq!("5".parse(), Ok(Budget(Duration::from_secs(300))), "minutes by default");
        let short = "30s".parse::<Budget>().expect_err("refused");
        assert!(short.contains("under a minute"), "{short}");
        assert!("8 minutes".parse::<Budget>().expect_err("refused").contains("bad --budget"));
        assert!("99999999999999999h".parse::<Budget>().expect_err("refused").contains("too long"));
    }

    #[test]
    fn python_is_a_path_or_none() {
        assert_eq!("none".parse(), Ok(PythonArg::None));
        assert_eq!("/usr/bin/python3".parse(), Ok(PythonArg::Path("/usr/bin/python3".into())));
        assert!("".parse::<PythonArg>().expect_err("refused").contains("--python is empty"));
    }
}
