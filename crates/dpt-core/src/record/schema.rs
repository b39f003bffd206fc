//! The records' JSON Schema, from the record types themselves (`schemars`' derive, which reads
//! their serde attributes and doc comments): what `metrics.jsonl` holds, as the reference's
//! records page writes it. A field, a kind or a type added to the records appears there by
//! itself; one that moves takes its documentation along.

use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::run_info_wire::Earlier;
use super::Record;

/// The schema of `T` as files hold it (the serialize side), its types under `$defs`.
pub fn of<T: schemars::JsonSchema>() -> Value {
    let generator = SchemaSettings::default().for_serialize().into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).expect("a schema is JSON")
}

/// Every record kind's schema: one of these, tagged by `kind`.
pub fn records() -> Value {
    of::<Record>()
}

/// The fields of the start record that earlier versions' readers take (the settings those
/// listed as loose fields): also in `start`'s schema, told apart by the page.
pub fn earlier_fields() -> Vec<String> {
    of::<Earlier>()["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_tagged_and_the_start_records_loose_fields_are_told_apart() {
        let kinds: Vec<String> = records()["oneOf"]
            .as_array()
            .expect("one of the kinds")
            .iter()
            .filter_map(|k| k["properties"]["kind"]["const"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(kinds, ["start", "step", "epoch", "event", "summary", "eval"]);
        let earlier = earlier_fields();
        assert!(
            earlier.contains(&"epochs".to_owned()) && earlier.contains(&"optim".to_owned()),
            "{earlier:?}"
        );
        assert!(!earlier.contains(&"settings".to_owned()));
    }
}
