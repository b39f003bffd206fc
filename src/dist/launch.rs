//! Where this process stands in a multi-process run, from torchrun's contract (`RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
//! `TORCHELASTIC_USE_AGENT_STORE`), from Slurm's (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`, `SLURM_NTASKS_PER_NODE`, `SLURM_JOB_NODELIST`) where torchrun's is absent,
//! or from flags, which win over both. A pure function of those inputs, so every case is tested
//! without a cluster.

use thiserror::Error;

/// The port torch.distributed uses when none is given.
pub const DEFAULT_PORT: u16 = 29500;

/// This process's place in the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world_size: usize,
    /// This process's index on its node (picks `cuda:LOCAL_RANK` with one process per GPU).
    pub local_rank: usize,
    pub local_world_size: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// torchrun's agent already hosts the store on `MASTER_PORT`: rank 0 connects to it rather
    /// than listening (which would fail with EADDRINUSE).
    pub agent_store: bool,
    /// torchrun's restart count (`TORCHELASTIC_RESTART_COUNT`): each attempt keeps its keys
    /// apart in the agent's store, which outlives the workers (as PyTorch's
    /// `/worker/attempt_N` prefix does), so a restart never reads the last attempt's addresses.
    pub attempt: u64,
    /// Where the values came from, for messages.
    pub source: &'static str,
}

/// Values given on the command line, which win over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchFlags {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub local_rank: Option<usize>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
}

/// A multi-process launch that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LaunchError {
    #[error("{name}={value} is not a number; check the launcher's environment")]
    NotANumber { name: String, value: String },
    #[error(
        "rank {rank} is not below the world size {world_size}; check RANK/--rank and WORLD_SIZE/--world-size"
    )]
    RankOutOfRange { rank: usize, world_size: usize },
    #[error("a world of {world_size} processes needs this process's rank: set RANK (torchrun and srun do) or --rank")]
    NoRank { world_size: usize },
    #[error("a world of {world_size} processes needs MASTER_ADDR (rank 0's host) or --master-addr")]
    NoMaster { world_size: usize },
}

fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<Option<T>, LaunchError> {
    value
        .map(|v| v.trim().parse::<T>().map_err(|_| LaunchError::NotANumber { name: name.into(), value: v }))
        .transpose()
}

/// The first host of a Slurm node list: `node[01-04,07]` → `node01`, `a,b` → `a`.
pub fn first_slurm_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find(',').filter(|&c| list.find('[').is_none_or(|b| c < b)).unwrap_or(list.len());
    let first = &list[..end];
    match first.split_once('[') {
        None => (!first.is_empty()).then(|| first.to_owned()),
        Some((prefix, rest)) => {
            let inner = rest.trim_end_matches(']');
            let item = inner.split(',').next()?;
            let start = item.split('-').next()?;
            Some(format!("{prefix}{start}"))
        }
    }
}

/// `SLURM_NTASKS_PER_NODE` or `SLURM_TASKS_PER_NODE` (`4(x2),3`): this node's count, taking the
/// first entry.
fn slurm_tasks_per_node(v: &str) -> Option<usize> {
    v.split(',').next()?.split('(').next()?.trim().parse().ok()
}

/// The launch, or `None` for a single process (no world size above 1 anywhere).
pub fn resolve(
    env: &dyn Fn(&str) -> Option<String>,
    flags: &LaunchFlags,
) -> Result<Option<Launch>, LaunchError> {
    let torchrun = env("WORLD_SIZE").is_some();
    let slurm = !torchrun && env("SLURM_NTASKS").is_some() && env("SLURM_PROCID").is_some();
    let var = |torch: &str, slurm_name: &str| if slurm { env(slurm_name) } else { env(torch) };
    let world_size = match flags.world_size {
        Some(w) => w,
        None => number::<usize>("WORLD_SIZE", var("WORLD_SIZE", "SLURM_NTASKS"))?.unwrap_or(1),
    };
    if world_size <= 1 {
        return Ok(None);
    }
    let rank = match flags.rank {
        Some(r) => r,
        None => {
            number::<usize>("RANK", var("RANK", "SLURM_PROCID"))?.ok_or(LaunchError::NoRank { world_size })?
        }
    };
    if rank >= world_size {
        return Err(LaunchError::RankOutOfRange { rank, world_size });
    }
    let local_rank = match flags.local_rank {
        Some(r) => r,
        None => number::<usize>("LOCAL_RANK", var("LOCAL_RANK", "SLURM_LOCALID"))?.unwrap_or(0),
    };
    let local_world_size = if slurm {
        env("SLURM_NTASKS_PER_NODE")
            .or_else(|| env("SLURM_TASKS_PER_NODE"))
            .and_then(|v| slurm_tasks_per_node(&v))
            .unwrap_or(1)
    } else {
        number::<usize>("LOCAL_WORLD_SIZE", env("LOCAL_WORLD_SIZE"))?.unwrap_or(1)
    };
    let master_addr = flags
        .master_addr
        .clone()
        .or_else(|| env("MASTER_ADDR"))
        .or_else(|| {
            if slurm {
                env("SLURM_JOB_NODELIST").or_else(|| env("SLURM_NODELIST")).and_then(|l| first_slurm_host(&l))
            } else {
                None
            }
        })
        .ok_or(LaunchError::NoMaster { world_size })?;
    let master_port = match flags.master_port {
        Some(p) => p,
        None => number::<u16>("MASTER_PORT", env("MASTER_PORT"))?.unwrap_or(DEFAULT_PORT),
    };
    let agent_store = env("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let attempt =
        number::<u64>("TORCHELASTIC_RESTART_COUNT", env("TORCHELASTIC_RESTART_COUNT"))?.unwrap_or(0);
    let source = if flags.world_size.is_some() {
        "flags"
    } else if slurm {
        "Slurm"
    } else {
        "torchrun's environment"
    };
    Ok(Some(Launch {
        rank,
        world_size,
        local_rank,
        local_world_size,
        master_addr,
        master_port,
        agent_store,
        attempt,
        source,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn torchrun_contract() {
        let e = [
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ];
        let l = resolve(&env(&e), &LaunchFlags::default()).unwrap().unwrap();
        assert_eq!((l.rank, l.world_size, l.local_rank, l.local_world_size), (3, 8, 1, 2));
        assert_eq!((l.master_addr.as_str(), l.master_port, l.agent_store), ("10.0.0.1", 29400, true));
        assert_eq!(l.attempt, 2, "a restart's keys stay apart from the last attempt's");
    }

    #[test]
    fn slurm_when_torchrun_is_absent() {
        let e = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ];
        let l = resolve(&env(&e), &LaunchFlags::default()).unwrap().unwrap();
        assert_eq!((l.rank, l.world_size, l.local_rank, l.local_world_size), (5, 8, 1, 4));
        assert_eq!((l.master_addr.as_str(), l.master_port, l.agent_store), ("gpu07", DEFAULT_PORT, false));
        assert_eq!(l.source, "Slurm");
    }

    #[test]
    fn flags_win_and_one_process_is_no_launch() {
        assert_eq!(resolve(&env(&[]), &LaunchFlags::default()).unwrap(), None);
        assert_eq!(
            resolve(&env(&[("WORLD_SIZE", "1"), ("RANK", "0")]), &LaunchFlags::default()).unwrap(),
            None
        );
        let flags = LaunchFlags {
            rank: Some(1),
            world_size: Some(2),
            master_addr: Some("127.0.0.1".into()),
            master_port: Some(3000),
            ..LaunchFlags::default()
        };
        let l = resolve(&env(&[("RANK", "0"), ("WORLD_SIZE", "4")]), &flags).unwrap().unwrap();
        assert_eq!((l.rank, l.world_size, l.master_port), (1, 2, 3000));
    }

    #[test]
    fn bad_launches_are_clear_errors() {
        let f = LaunchFlags::default();
        assert!(matches!(resolve(&env(&[("WORLD_SIZE", "two")]), &f), Err(LaunchError::NotANumber { .. })));
        assert_eq!(resolve(&env(&[("WORLD_SIZE", "2")]), &f), Err(LaunchError::NoRank { world_size: 2 }));
        assert_eq!(
            resolve(&env(&[("WORLD_SIZE", "2"), ("RANK", "2"), ("MASTER_ADDR", "h")]), &f),
            Err(LaunchError::RankOutOfRange { rank: 2, world_size: 2 })
        );
        assert_eq!(
            resolve(&env(&[("WORLD_SIZE", "2"), ("RANK", "1")]), &f),
            Err(LaunchError::NoMaster { world_size: 2 })
        );
    }

    #[test]
    fn slurm_host_lists() {
        assert_eq!(first_slurm_host("node[01-04,07]").as_deref(), Some("node01"));
        assert_eq!(first_slurm_host("a,b[1-2]").as_deref(), Some("a"));
        assert_eq!(first_slurm_host("solo").as_deref(), Some("solo"));
        assert_eq!(first_slurm_host("").as_deref(), None);
    }
}
