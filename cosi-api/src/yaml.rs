//! The crate's only YAML use (the `serde_norway` fork behind the workspace's `serde_yaml` name):
//! specs written as YAML for generic clients, and read back from clients that send only YAML.

/// The spec as a YAML document (no leading `---`).
pub(crate) fn to_string(spec: &serde_json::Value) -> Result<String, String> {
    serde_yaml::to_string(spec).map_err(|e| e.to_string())
}

/// A YAML document as a spec in dynamic form.
pub(crate) fn from_str(text: &str) -> Result<serde_json::Value, String> {
    serde_yaml::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn spec_round_trips_through_yaml() {
        let spec = serde_json::json!({"label": "one", "value": 1, "list": [1, 2]});
        let text = super::to_string(&spec).unwrap();
        assert_eq!(text, "label: one\nlist:\n- 1\n- 2\nvalue: 1\n");
        assert_eq!(super::from_str(&text).unwrap(), spec);
    }

    #[test]
    fn malformed_yaml_is_an_error() {
        assert!(super::from_str("a: [1").is_err());
    }
}
