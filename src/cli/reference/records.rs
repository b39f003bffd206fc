//! The records page: `metrics.jsonl`'s kinds and fields, written from the record types' own JSON
//! Schema (`dpt_core::record::schema`: schemars' derive over the types, their serde attributes
//! and doc comments). A kind, a field or a value type added to the records appears here by
//! itself, and a page with a kind and no fields is refused rather than written.

use std::fmt::Write;

use serde_json::{Map, Value};

use super::{cell, doc_text, header};

/// The record kinds' payload types, which have sections of their own rather than a place among
/// the values inside records.
const PAYLOADS: [&str; 6] = ["RunInfo", "StepStats", "EpochStats", "Summary", "EvalStats", "Change"];

/// A schema's `$defs`.
struct Defs<'a>(&'a Map<String, Value>);

impl<'a> Defs<'a> {
    /// The definition a `$ref` names, with its name.
    fn of(&self, schema: &Value) -> Option<(&'a str, &'a Value)> {
        let name = schema["$ref"].as_str()?.rsplit('/').next()?;
        self.0.get_key_value(name).map(|(k, v)| (k.as_str(), v))
    }

    /// A value type's description on the page: its fields, or its values with their meanings.
    fn is_described(def: &Value) -> bool {
        def["properties"].as_object().is_some_and(|p| !p.is_empty()) || !documented_values(def).is_empty()
    }

    /// The JSON form of a field's schema, and whether it may be null.
    fn json_type(&self, schema: &Value) -> (String, bool) {
        if let Some(options) = schema["anyOf"].as_array() {
            let null = options.iter().any(|o| o["type"] == "null");
            let some: Vec<String> =
                options.iter().filter(|o| o["type"] != "null").map(|o| self.json_type(o).0).collect();
            return (some.join(" or "), null);
        }
        if let Some((name, def)) = self.of(schema) {
            return match name {
                "Settings" => ("the settings tree".to_owned(), false),
                _ if Defs::is_described(def) || def["type"] == "object" => (format!("`{name}`"), false),
                _ => self.json_type(def),
            };
        }
        let (kinds, null) = match &schema["type"] {
            Value::String(t) => (vec![t.as_str()], false),
            Value::Array(ts) => {
                let ts: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
                (ts.iter().copied().filter(|t| *t != "null").collect(), ts.contains(&"null"))
            }
            _ if schema["oneOf"].is_array() || schema["enum"].is_array() => (vec!["string"], false),
            _ => (vec!["any"], false),
        };
        let named: Vec<String> = kinds
            .iter()
            .map(|&k| match k {
                "array" => format!("array of {}", self.json_type(&schema["items"]).0),
                "object" if schema["additionalProperties"].is_object() => {
                    format!("object of {}", self.json_type(&schema["additionalProperties"]).0)
                }
                other => other.to_owned(),
            })
            .collect();
        (named.join(" or "), null)
    }

    /// The table of an object's fields: name, type, meaning.
    fn fields(&self, object: &Value, keep: impl Fn(&str) -> bool) -> String {
        let required: Vec<&str> = object["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = String::from("\n| field | type | meaning |\n| --- | --- | --- |\n");
        for (name, schema) in object["properties"].as_object().into_iter().flatten() {
            if !keep(name) {
                continue;
            }
            let (ty, null) = self.json_type(schema);
            let null = if null { " or null" } else { "" };
            let absent = if required.contains(&name.as_str()) { "" } else { ", may be absent" };
            let meaning = description(schema);
            let _ = writeln!(out, "| `{name}` | {}{null}{absent} | {} |", cell(&ty), cell(&meaning));
        }
        out
    }
}

/// A schema's description as one line.
fn description(schema: &Value) -> String {
    doc_text(
        &schema["description"].as_str().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" "),
    )
}

/// An enum's values that have a meaning of their own: (value, meaning).
fn documented_values(def: &Value) -> Vec<(String, String)> {
    let Some(options) = def["oneOf"].as_array() else { return Vec::new() };
    let mut out = Vec::new();
    for o in options {
        match (&o["const"], o["enum"].as_array()) {
            (Value::String(v), _) => out.push((v.clone(), description(o))),
            (_, Some(values)) => {
                out.extend(values.iter().filter_map(Value::as_str).map(|v| (v.to_owned(), String::new())))
            }
            _ => return Vec::new(),
        }
    }
    if out.iter().all(|(_, meaning)| meaning.is_empty()) {
        return Vec::new();
    }
    out
}

/// Where a value type is used: `` `step`'s `timing` ``, `` each of `script`'s `devices` ``,
/// `` the `not_finite` event's `then` ``.
fn places(defs: &Defs, name: &str, kinds: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (holder, def) in defs.0 {
        let shown = kinds
            .iter()
            .find(|(_, ty)| ty == holder)
            .map_or_else(|| format!("`{holder}`"), |(k, _)| format!("`{k}`"));
        // A struct's fields, or each variant's of a tagged enum (an event's).
        let mut holders = vec![(shown.clone(), &def["properties"])];
        for variant in def["oneOf"].as_array().into_iter().flatten() {
            let tag = variant["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .find_map(|(_, p)| p["const"].as_str());
            if let Some(tag) = tag {
                holders.push((format!("the `{tag}` {}", shown.trim_matches('`')), &variant["properties"]));
            }
        }
        for (shown, properties) in holders {
            for (field, schema) in properties.as_object().into_iter().flatten() {
                let options = schema["anyOf"].as_array().cloned().unwrap_or_else(|| vec![schema.clone()]);
                for o in options {
                    let (each, target) =
                        if o["type"] == "array" { ("each of ", &o["items"]) } else { ("", &o) };
                    if defs.of(target).is_some_and(|(n, _)| n == name) {
                        out.push(format!("{each}{shown}'s `{field}`"));
                    }
                }
            }
        }
    }
    out
}

/// The records page, or why it cannot be written (a kind without fields).
pub(super) fn page() -> Result<String, String> {
    page_of(&dpt_core::record::schema::records())
}

/// The page of the records whose schema is `schema`; an error where a kind has no fields (a
/// type that moved, say), rather than an empty table.
fn page_of(schema: &Value) -> Result<String, String> {
    let empty = Map::new();
    let defs = Defs(schema["$defs"].as_object().unwrap_or(&empty));
    let mut out = header(
        "Records",
        "`metrics.jsonl` in a run directory is the run's record: one JSON object per line, tagged \
         by `kind`, each with `time` (RFC 3339, when it was written). Later versions add kinds and \
         fields, never remove these. The fields below are the record types' own schema (their \
         serde form and doc comments, `crates/dpt-core/src/record/schema.rs`), in alphabetical \
         order; \"may be absent\" marks a field left out when it has no value. A resumed run \
         continues the same file with a new `start` and a `restored` event; records after a \
         `restored` event supersede those of a higher `global_step` before it.",
    );
    // Each kind: its tag, its meaning and its payload's type.
    let mut kinds = Vec::new();
    for variant in schema["oneOf"].as_array().into_iter().flatten() {
        let kind = variant["properties"]["kind"]["const"].as_str().ok_or("a record kind without its tag")?;
        let (ty, _) = defs.of(variant).ok_or_else(|| format!("record kind `{kind}` without a type"))?;
        kinds.push((kind.to_owned(), ty.to_owned(), description(variant)));
    }
    let earlier = dpt_core::record::schema::earlier_fields();
    for (kind, ty, meaning) in &kinds {
        let def = &defs.0[ty.as_str()];
        let _ = write!(out, "\n## `{kind}`\n\n{meaning}\n");
        if kind == "event" {
            out.push_str(&events(&defs, def)?);
            continue;
        }
        if def["properties"].as_object().is_none_or(Map::is_empty) {
            return Err(format!("record kind `{kind}` ({ty}) has no fields in its schema"));
        }
        out.push_str(&defs.fields(def, |f| !earlier.iter().any(|e| e == f)));
        if kind == "start" && !earlier.is_empty() {
            out.push_str(
                "\nBeside them, for readers of earlier versions' records, the settings those listed as \
                 loose fields (each also in `settings`):\n",
            );
            out.push_str(&defs.fields(def, |f| earlier.iter().any(|e| e == f)));
        }
    }
    out.push_str("\n## Values inside records\n");
    let by_kind: Vec<(String, String)> = kinds.iter().map(|(k, t, _)| (k.clone(), t.clone())).collect();
    for (name, def) in defs.0 {
        if PAYLOADS.contains(&name.as_str()) || !Defs::is_described(def) {
            continue;
        }
        let _ = write!(out, "\n### `{name}`: {}\n", places(&defs, name, &by_kind).join(", "));
        let values = documented_values(def);
        if values.is_empty() {
            out.push_str(&defs.fields(def, |_| true));
        } else {
            out.push_str("\n| value | meaning |\n| --- | --- |\n");
            for (value, meaning) in values {
                let _ = writeln!(out, "| `{value}` | {} |", cell(&meaning));
            }
        }
    }
    out.push_str("\nThe `settings` of a `start` record is the settings tree ([settings.md](settings.md)).\n");
    Ok(out)
}

/// The `event` kind's table: each event's tag, its fields and its meaning.
fn events(defs: &Defs, change: &Value) -> Result<String, String> {
    let mut out = String::from("\nTagged by `event`:\n\n| event | fields | meaning |\n| --- | --- | --- |\n");
    let variants = change["oneOf"].as_array().ok_or("the event kind without its events")?;
    for v in variants {
        let tag = v["properties"]["event"]["const"].as_str().ok_or("an event without its tag")?;
        let fields: Vec<String> = v["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(name, _)| name.as_str() != "event")
            .map(|(name, schema)| format!("`{name}` ({})", defs.json_type(schema).0))
            .collect();
        let _ = writeln!(out, "| `{tag}` | {} | {} |", cell(&fields.join(", ")), cell(&description(v)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use dpt_tui::record::Record;

    #[test]
    fn every_field_a_record_writes_is_on_the_page_and_every_kind_has_its_section() {
        let page = super::page().expect("the records page");
        let records =
            [Record::Start(Box::default()), Record::Step(Box::default()), Record::Epoch(Box::default())];
        for record in records {
            let json = serde_json::to_value(&record).expect("a record serializes");
            let kind = json["kind"].as_str().expect("tagged");
            assert!(page.contains(&format!("\n## `{kind}`\n")), "{kind}");
            for key in json.as_object().expect("an object").keys().filter(|k| *k != "kind") {
                assert!(page.contains(&format!("| `{key}` |")), "{kind}'s `{key}` is not on the page");
            }
        }
        for kind in ["summary", "eval", "event"] {
            assert!(page.contains(&format!("\n## `{kind}`\n")), "{kind}");
        }
        assert!(page.contains("| `not_finite` |") && page.contains("### `FinishReason`"), "{page}");
    }

    #[test]
    fn a_kind_whose_schema_lost_its_fields_is_an_error_not_an_empty_table() {
        let mut schema = dpt_core::record::schema::records();
        let step = schema["oneOf"]
            .as_array()
            .expect("kinds")
            .iter()
            .find(|v| v["properties"]["kind"]["const"] == "step")
            .expect("the step kind")
            .clone();
        let name =
            super::Defs(schema["$defs"].as_object().expect("defs")).of(&step).expect("its type").0.to_owned();
        schema["$defs"][name.as_str()]["properties"] = serde_json::json!({});
        let e = super::page_of(&schema).expect_err("refused");
        assert_eq!(e, format!("record kind `step` ({name}) has no fields in its schema"));
    }
}
