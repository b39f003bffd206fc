//! The script protocol's messages (`docs/reference/script-protocol.md`): newline JSON between a
//! rank of the user's script and the backend, every request answered once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::script::{Capability, ScriptDevice};

/// The version this build speaks; it talks to clients of this one and the one before.
pub const VERSION: u32 = 1;
/// The oldest client version this build still talks to.
pub const OLDEST: u32 = 1;

/// A rank's first message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    #[serde(default)]
    pub rank: usize,
    #[serde(default = "one")]
    pub world_size: usize,
    #[serde(default)]
    pub local_rank: usize,
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub framework: String,
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub devices: Vec<ScriptDevice>,
    #[serde(default)]
    pub can: Vec<Capability>,
    #[serde(default)]
    pub total_steps: Option<usize>,
}

fn one() -> usize {
    1
}

/// One optimizer step of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step: usize,
    #[serde(default)]
    pub loss: Option<f64>,
    #[serde(default)]
    pub acc: Option<f64>,
    #[serde(default)]
    pub samples: Option<f64>,
    #[serde(default)]
    pub lr: Option<f64>,
    #[serde(default)]
    pub step_ms: Option<f64>,
    #[serde(default)]
    pub scalars: BTreeMap<String, f64>,
}

/// A rank's request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Hello(Box<Hello>),
    Step(Box<Step>),
    Poll {
        step: usize,
    },
    Eval {
        step: usize,
        metrics: BTreeMap<String, f64>,
    },
    Saved {
        step: usize,
        path: Option<String>,
    },
    SaveFailed {
        step: usize,
        message: String,
    },
    Finish {
        step: usize,
        status: Status,
        #[serde(default)]
        message: Option<String>,
    },
}

/// How a rank's part of the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Completed,
    Stopped,
    Failed,
}

/// What the ranks are asked to do, each at the boundary after its step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum Order {
    Pause,
    Resume,
    Stop,
    Save,
    /// The scale on the script's own lr from the next step on (not multiplied with earlier ones).
    LrScale {
        scale: f64,
    },
}

/// An order and the step after which every rank carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scheduled {
    pub at_step: usize,
    #[serde(flatten)]
    pub order: Order,
}

/// The backend's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Answer {
    Welcome { version: u32, run_dir: String, controls: Vec<Scheduled> },
    Reply { controls: Vec<Scheduled> },
    Error { message: String },
}

/// A line from a rank: the request, or why it is not one (a request of an unknown type, a
/// number where none belongs), worded for the script's author.
pub fn read(line: &str) -> Result<Request, String> {
    serde_json::from_str(line).map_err(|e| {
        let kind = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
        match kind {
            Some(k) if !KNOWN.contains(&k.as_str()) => {
                format!("this dpt-tui does not know the request '{k}' (a newer client's); ignored")
            }
            _ => format!("bad request: {e}"),
        }
    })
}

const KNOWN: [&str; 7] = ["hello", "step", "poll", "eval", "saved", "save_failed", "finish"];

/// The version both sides speak, or why there is none.
pub fn agree(client: u32) -> Result<u32, String> {
    if client < OLDEST {
        return Err(format!(
            "the dpt_tui client speaks version {client}, this dpt-tui {OLDEST} to {VERSION}: upgrade the client (pip install ./python from this dpt-tui's repository)"
        ));
    }
    Ok(client.min(VERSION))
}

/// An answer as a line, newline included.
pub fn line(answer: &Answer) -> String {
    let mut line = serde_json::to_string(answer).expect("answers serialize");
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_the_protocol_page_writes_them() {
        let hello = r#"{"type":"hello","version":1,"rank":1,"world_size":2,"label":"gpt","framework":"plain","can":["pause","stop","lr"],"devices":[{"kind":"cuda","index":0,"name":"H100","uuid":"GPU-1"}],"future_field":3}"#;
        let Request::Hello(h) = read(hello).unwrap() else { panic!() };
        assert_eq!((h.rank, h.world_size, h.can.len()), (1, 2, 3));
        assert_eq!(h.devices[0].label(), "cuda:0");
        let step = r#"{"type":"step","step":4,"loss":null,"acc":0.5,"lr":0.1,"step_ms":20.5,"scalars":{"tokens":3}}"#;
        let Request::Step(s) = read(step).unwrap() else { panic!() };
        assert_eq!((s.step, s.loss, s.acc, s.scalars["tokens"]), (4, None, Some(0.5), 3.0));
        assert!(read(r#"{"type":"teleport"}"#).unwrap_err().contains("does not know the request 'teleport'"));
        assert!(read(r#"{"type":"step","step":"four"}"#).unwrap_err().starts_with("bad request"));
        let finish = r#"{"type":"finish","step":9,"status":"failed","message":"ValueError: x (train.py:3)"}"#;
        assert!(matches!(read(finish).unwrap(), Request::Finish { status: Status::Failed, .. }));
    }

    #[test]
    fn answers_carry_their_orders_flat_and_versions_meet_at_the_lower() {
        let a = Answer::Reply {
            controls: vec![
                Scheduled { at_step: 7, order: Order::LrScale { scale: 0.5 } },
                Scheduled { at_step: 7, order: Order::Pause },
            ],
        };
        assert_eq!(
            line(&a),
            "{\"type\":\"reply\",\"controls\":[{\"at_step\":7,\"control\":\"lr_scale\",\"scale\":0.5},{\"at_step\":7,\"control\":\"pause\"}]}\n"
        );
        assert_eq!(agree(VERSION), Ok(VERSION));
        assert_eq!(agree(VERSION + 1), Ok(VERSION), "a newer client talks at this build's version");
        assert!(agree(0).unwrap_err().contains("upgrade the client"));
    }
}
