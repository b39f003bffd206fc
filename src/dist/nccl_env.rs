//! The environment libtorch's NCCL process group reads when it is made. Its default for
//! `TORCH_NCCL_ASYNC_ERROR_HANDLING` in torch 2.11 is 3 (`SkipCleanUp`, `ProcessGroupNCCL.hpp`):
//! when a peer dies or a collective times out, the watchdog tears the process down from C++,
//! before dpt-tui can say which rank failed. dpt-tui sets 2 (`CleanUpOnly`): the watchdog
//! aborts the communicators and the failed collective returns an error, which the coordinator
//! turns into the same one line naming the rank as under Gloo. A value the user set (either
//! spelling) is kept, except torchrun's own: its agent gives every worker `1` unless the
//! variable was set (`local_elastic_agent.py`), so a `1` under torchrun (`TORCHELASTIC_RUN_ID`
//! set) is the launcher's default, and replaced. Set once at the start of `main`, before any
//! thread exists.

use std::sync::OnceLock;

/// The variable, and its older spelling that torch still reads.
pub const ASYNC_ERROR_HANDLING: &str = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
const LEGACY: &str = "NCCL_ASYNC_ERROR_HANDLING";
/// `CleanUpOnly`: abort the communicators, report the error, keep the process.
pub const CLEAN_UP_ONLY: &str = "2";

/// The value torchrun's agent gives its workers when the variable is unset.
const TORCHRUN_DEFAULT: &str = "1";

static SET_BY_US: OnceLock<bool> = OnceLock::new();

/// What to set given the environment `get` reads: nothing when the user chose a mode.
pub fn to_set(get: impl Fn(&str) -> Option<String>) -> Option<(&'static str, &'static str)> {
    let value = |k: &str| get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let launchers = get("TORCHELASTIC_RUN_ID").is_some()
        && value(LEGACY).is_none()
        && value(ASYNC_ERROR_HANDLING).as_deref() == Some(TORCHRUN_DEFAULT);
    let chosen = [ASYNC_ERROR_HANDLING, LEGACY].iter().any(|k| value(k).is_some()) && !launchers;
    (!chosen).then_some((ASYNC_ERROR_HANDLING, CLEAN_UP_ONLY))
}

/// Sets the error-handling mode unless the user did. Call first thing in `main`, while the
/// process has one thread (the environment is not safe to change beside readers).
pub fn apply() {
    let set = to_set(|k| std::env::var(k).ok());
    if let Some((k, v)) = set {
        std::env::set_var(k, v);
    }
    let _ = SET_BY_US.set(set.is_some());
}

/// The mode NCCL process groups of this process get, in words (for `doctor`).
pub fn describe() -> String {
    let value = std::env::var(ASYNC_ERROR_HANDLING)
        .or_else(|_| std::env::var(LEGACY))
        .unwrap_or_else(|_| "unset (torch's default, 3: a failed peer aborts the process)".into());
    let whose = if SET_BY_US.get().copied().unwrap_or(false) {
        "set by dpt-tui: a dead or hung peer is an error naming it, not an abort"
    } else {
        "yours"
    };
    format!("{ASYNC_ERROR_HANDLING}={value} ({whose})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_up_only_unless_the_user_chose() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(to_set(env(&[])), Some(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")));
        assert_eq!(to_set(env(&[("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")])), None);
        assert_eq!(to_set(env(&[("NCCL_ASYNC_ERROR_HANDLING", "3")])), None, "the older spelling counts");
        assert_eq!(
            to_set(env(&[("TORCH_NCCL_ASYNC_ERROR_HANDLING", "")])),
            Some(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2"))
        );
        // Under torchrun, its agent's 1 is the launcher's default, not the user's choice.
        const TORCHRUN: &[(&str, &str)] =
            &[("TORCHELASTIC_RUN_ID", "none"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")];
        assert_eq!(to_set(env(TORCHRUN)), Some(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")));
        const CHOSEN: &[(&str, &str)] =
            &[("TORCHELASTIC_RUN_ID", "none"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")];
        assert_eq!(to_set(env(CHOSEN)), None, "another value under torchrun is the user's");
    }
}
