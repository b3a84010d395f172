//! The crate's only YAML use (the `serde_norway` fork behind the workspace's `serde_yaml` name):
//! specs written as YAML for generic clients, and read back from clients that send only YAML.
//! What a client sends is held to the workspace's YAML limits ([`cosi_core::yaml::check`])
//! before the library reads it.

/// The spec as a YAML document (no leading `---`).
pub(crate) fn to_string(spec: &serde_json::Value) -> Result<String, String> {
    serde_yaml::to_string(spec).map_err(|e| e.to_string())
}

/// A YAML document as a spec in dynamic form; text over the YAML limits is refused unread.
pub(crate) fn from_str(text: &str) -> Result<serde_json::Value, String> {
    cosi_core::yaml::check(text).map_err(|e| e.to_string())?;
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

    #[test]
    fn deeply_nested_yaml_is_refused_at_the_limit() {
        let err = super::from_str(&"[".repeat(100_000)).unwrap_err();
        assert_eq!(err, "line 1 column 65: more than 64 levels of nesting");
    }
}
