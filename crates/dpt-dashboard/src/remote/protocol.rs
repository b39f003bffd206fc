//! The attach protocol: newline-delimited JSON over a Unix domain socket, versioned.
//!
//! A client sends `hello` with its version; the server answers `welcome` with a snapshot of the
//! run (every event so far and the recent device samples), then streams `event` and `monitor`
//! messages. A client sends `control` commands, each answered by a `reply` with its id. A
//! client of another version gets an `error` and the connection closes.

use serde::{Deserialize, Serialize};

use crate::monitor::MonitorMsg;
use crate::record::Record;
use crate::Control;

/// The protocol version this build speaks (2: records as `metrics.jsonl` has them; 3: records
/// of script runs, `eval` among them). A client one version older or newer is served: records
/// only grow, and each side skips a record it does not know.
pub const VERSION: u32 = 3;

/// The run as a viewer first sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The run's history (bounded: see `record::history`).
    #[serde(deserialize_with = "known")]
    pub records: Vec<Record>,
    #[serde(deserialize_with = "known")]
    pub monitor: Vec<MonitorMsg>,
}

/// The entries this build can read; one of a kind a newer build added is left out, so a
/// snapshot from it still opens.
fn known<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    let values = Vec::<serde_json::Value>::deserialize(d)?;
    Ok(values.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect())
}

/// Client to server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// The first message: who is asking and how.
    Hello { version: u32, read_only: bool },
    /// A control for the engine; answered by a `reply` with the same id.
    Control { id: u64, control: Control },
}

/// Server to client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// The answer to `hello`: the run so far.
    Welcome { version: u32, snapshot: Box<Snapshot> },
    /// A live engine event.
    Record { record: Record },
    /// A live device reading.
    Monitor { msg: MonitorMsg },
    /// The answer to a `control`.
    Reply { id: u64, ok: bool, error: Option<String> },
    /// A refusal (version, permission, malformed message).
    Error { message: String },
}

/// One message as a line (without the newline).
pub fn encode<T: Serialize>(msg: &T) -> String {
    serde_json::to_string(msg).expect("protocol messages serialize")
}

/// The message on a line, or why it is not one.
pub fn decode<'a, T: Deserialize<'a>>(line: &'a str) -> Result<T, String> {
    serde_json::from_str(line).map_err(|e| format!("bad message: {e}"))
}

/// The server's answer to a `hello` of `version`: `None` to accept.
pub fn version_error(version: u32) -> Option<String> {
    (version.abs_diff(VERSION) > 1).then(|| {
        format!("protocol version mismatch: this run speaks version {VERSION}, the client {version}; attach with the dpt-tui that started the run")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Change;

    #[test]
    fn round_trips() {
        let msgs = vec![
            ClientMsg::Hello { version: VERSION, read_only: true },
            ClientMsg::Control { id: 3, control: Control::SetLr { lr: 0.05 } },
        ];
        for m in msgs {
            assert_eq!(decode::<ClientMsg>(&encode(&m)).unwrap(), m);
        }
        let msgs = vec![
            ServerMsg::Welcome { version: VERSION, snapshot: Box::default() },
            ServerMsg::Record { record: Record::Event(Change::Paused { global_step: 4 }) },
            ServerMsg::Reply { id: 3, ok: false, error: Some("read-only".into()) },
            ServerMsg::Error { message: "no".into() },
        ];
        for m in msgs {
            let line = encode(&m);
            assert!(!line.contains('\n'));
            assert_eq!(decode::<ServerMsg>(&line).unwrap(), m);
        }
        assert!(decode::<ClientMsg>("{\"type\":\"launch\"}").is_err());
        assert!(version_error(VERSION).is_none());
        assert!(
            version_error(VERSION + 1).is_none() && version_error(VERSION - 1).is_none(),
            "neighbours talk"
        );
        assert!(version_error(VERSION + 2).unwrap().contains("mismatch"));
        assert!(version_error(VERSION - 2).unwrap().contains("mismatch"));
    }

    #[test]
    fn a_snapshot_with_a_record_of_an_unknown_kind_opens_without_it() {
        let line = r#"{"type":"welcome","version":4,"snapshot":{"records":[{"kind":"event","event":"paused","global_step":2},{"kind":"hologram","x":1},{"kind":"event","event":"teleported"}],"monitor":[]}}"#;
        let ServerMsg::Welcome { snapshot, .. } = decode::<ServerMsg>(line).unwrap() else { panic!() };
        assert_eq!(snapshot.records, [Record::Event(Change::Paused { global_step: 2 })]);
    }
}
