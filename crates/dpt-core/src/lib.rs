//! dpt-tui's core without libtorch: what a run is in words and numbers, and the services that
//! need no tensors. Its vocabulary: the settings tree a run is configured by, the records it
//! writes and serves, the controls it takes, the device readings it reports, the state a
//! checkpoint keeps (the tallies, the best kept, the loss scaler's), the seeds it derives, and the
//! names the command line, the files and the dashboard share. Its services: the recorder that
//! appends the records to `metrics.jsonl`, the TensorBoard writer, the bottleneck rules, the
//! curves and comparisons the dashboard and `show` draw from the records. The engine and the
//! dashboard both build on it; it builds on neither.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod atomic;
pub mod augment;
pub mod best;
pub mod checkpoint_every;
pub mod config_error;
pub mod control;
pub mod data;
pub mod device;
pub mod exit;
pub mod flops;
pub mod model;
pub mod monitor;
pub mod optim;
pub mod policies;
pub mod record;
pub mod run_dir;
pub mod seed;
pub mod settings;
pub mod sweep;
pub mod tally;

pub use control::Control;

/// Seconds since the Unix epoch, now (0 on a clock set before it).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// This machine's host name ("?" where it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// Gives a plain enum its one table of names: `name()` (the word the command line and files
/// use), `Display` writing it, and a `FromStr` taking it (and any aliases after `|`) that refuses
/// other words naming the choices (`unknown optimizer 'x'; use sgd, adam or adamw`).
#[macro_export]
macro_rules! names {
    ($t:ident, $what:literal, { $($v:ident => $n:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $t {
            /// The word the command line and files use.
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $n),+
                }
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($n $(| $alias)* => Ok($t::$v),)+
                    _ => Err(format!("unknown {} '{s}'; use {}", $what, $crate::one_of(&[$($n),+]))),
                }
            }
        }
    };
}

/// Where a dpt-tui process said why it failed: the last `dpt-tui: ` line of its output (every
/// failure is said in one such line), without the prefix.
pub fn said_error(output: &str) -> Option<&str> {
    output.lines().rev().find_map(|l| l.trim_end().strip_prefix("dpt-tui: "))
}

/// Choices in words: `a`, `a or b`, `a, b or c`.
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A settings type the records' schema names without spelling out its fields: the settings
/// reference does (`docs/reference/settings.md`), and a record holds it as the settings hold it.
macro_rules! named_in_records {
    ($($t:ident),*) => {$(
        impl schemars::JsonSchema for $t {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($t).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "object" })
            }
        }
    )*};
}
pub(crate) use named_in_records;

/// Gives a type whose `Display` and `FromStr` are each other's inverse the `String` conversions
/// serde's `into` and `try_from` attributes use, so files write it as the command line does.
#[macro_export]
macro_rules! string_form {
    ($t:ty) => {
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.to_string()
            }
        }

        impl TryFrom<String> for $t {
            type Error = <$t as std::str::FromStr>::Err;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
    };
}

/// The innermost cause of an error ("No space left on device (os error 28)").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(cause) = last.source() {
        last = cause;
    }
    last.to_string()
}

/// An error and its causes on one line (`outer: cause: root cause`), for records and logs.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        // Some errors repeat their cause in their own message.
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use crate::data::{DataFormat, Loader};
    use crate::optim::OptimizerKind;

    #[test]
    fn a_failure_is_said_in_the_last_dpt_tui_line() {
        let log =
            "epoch 1\ndpt-tui: an earlier warning\nsome output\ndpt-tui: out of memory on cuda:0  \ntail\n";
        assert_eq!(super::said_error(log), Some("out of memory on cuda:0"));
        assert_eq!(super::said_error("no such line\n"), None);
    }

    #[test]
    fn a_name_table_reads_back_what_it_writes_and_names_the_choices() {
        for kind in [OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::AdamW] {
            assert_eq!(kind.to_string().parse::<OptimizerKind>(), Ok(kind));
        }
        assert_eq!("npy".parse::<DataFormat>(), Ok(DataFormat::Npy), "an alias");
        assert_eq!(DataFormat::Npy.name(), "npz", "written by its first name");
        assert_eq!(
            "lbfgs".parse::<OptimizerKind>(),
            Err("unknown optimizer 'lbfgs'; use sgd, adam or adamw".to_owned())
        );
        assert_eq!(
            "disk".parse::<Loader>(),
            Err("unknown loader 'disk'; use auto, resident or stream".to_owned())
        );
        assert_eq!(crate::one_of(&["a"]), "a");
    }
}
