//! dpt-tui's vocabulary, without libtorch: the settings tree a run is configured by, the records
//! it writes and serves, the controls it takes, the device readings it reports, and the names
//! the command line, the files and the dashboard share. The engine and the dashboard both build
//! on it; it builds on neither.
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
pub mod model;
pub mod monitor;
pub mod optim;
pub mod policies;
pub mod record;
pub mod run_dir;
pub mod settings;

pub use control::Control;
pub use device::DeviceId;

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
