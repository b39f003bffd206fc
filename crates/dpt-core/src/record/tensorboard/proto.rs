//! The protocol-buffer messages of TensorBoard's event files, with the field numbers of
//! TensorFlow's `event.proto` and `summary.proto`, the HParams plugin's `plugin_data.proto` and
//! `api.proto`, and `google/protobuf/struct.proto`; only the fields written here. A `oneof` member is an
//! optional field of its number (the same bytes on the wire).

use std::collections::BTreeMap;

use super::HParam;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub summary: Option<Summary>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    pub version: i32,
    #[prost(message, optional, tag = "2")]
    pub experiment: Option<Experiment>,
    #[prost(message, optional, tag = "3")]
    pub session_start_info: Option<SessionStartInfo>,
    #[prost(message, optional, tag = "4")]
    pub session_end_info: Option<SessionEndInfo>,
}

/// The HParams plugin's `Experiment` (`api.proto`): which hyperparameters and metrics its
/// table shows.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Experiment {
    #[prost(double, tag = "3")]
    pub time_created_secs: f64,
    #[prost(message, repeated, tag = "4")]
    pub hparam_infos: Vec<HParamInfo>,
    #[prost(message, repeated, tag = "5")]
    pub metric_infos: Vec<MetricInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    /// `DataType`: 1 string, 2 bool, 3 float64.
    #[prost(int32, tag = "4")]
    pub r#type: i32,
    #[prost(message, optional, tag = "5")]
    pub domain_discrete: Option<ListValue>,
}

/// `google.protobuf.ListValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<ProtoValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricInfo {
    #[prost(message, optional, tag = "1")]
    pub name: Option<MetricName>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricName {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(string, tag = "2")]
    pub tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionEndInfo {
    /// `Status`: 1 success, 2 failure.
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(double, tag = "2")]
    pub end_time_secs: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionStartInfo {
    #[prost(btree_map = "string, message", tag = "1")]
    pub hparams: BTreeMap<String, ProtoValue>,
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

/// `google.protobuf.Value`, as far as hyperparameters go.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoValue {
    #[prost(oneof = "Kind", tags = "2, 3, 4")]
    pub kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(double, tag = "2")]
    Number(f64),
    #[prost(string, tag = "3")]
    Text(String),
    #[prost(bool, tag = "4")]
    Bool(bool),
}

impl From<&HParam> for ProtoValue {
    fn from(v: &HParam) -> Self {
        ProtoValue {
            kind: Some(match v {
                HParam::Number(n) => Kind::Number(*n),
                HParam::Text(s) => Kind::Text(s.clone()),
                HParam::Bool(b) => Kind::Bool(*b),
            }),
        }
    }
}
