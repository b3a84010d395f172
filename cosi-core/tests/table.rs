//! Table output of resources of one definition.

use cosi_core::{table, Registry, Resource, ResourceDefinition, ResourceSpec, SharedResource};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Address {
    link: String,
    addresses: Vec<Entry>,
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Entry {
    cidr: String,
    family: u8,
}

impl ResourceSpec for Address {
    const TYPE: &'static str = "AddressSpecs.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "network";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("LINK", ".link")
            .with_print_column("ADDRESS", ".addresses[0].cidr")
            .with_print_column("FAMILY", ".addresses[0].family")
            .with_print_column("ALL", ".addresses")
    }
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Other;

impl ResourceSpec for Other {
    const TYPE: &'static str = "Others.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct BadColumn;

impl ResourceSpec for BadColumn {
    const TYPE: &'static str = "BadColumns.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("OK", ".ok")
            .with_print_column("BAD", "list[0]")
    }
}

fn address(id: &str, entries: &[(&str, u8)]) -> SharedResource {
    let spec = Address {
        link: "eth0".into(),
        addresses: entries
            .iter()
            .map(|(cidr, family)| Entry {
                cidr: cidr.to_string(),
                family: *family,
            })
            .collect(),
    };
    let mut r = Resource::new(id, spec);
    r.metadata.set_version(cosi_core::Version::new(12));
    r.into_shared()
}

#[test]
fn table_shows_identity_then_print_columns_with_missing_values_empty() {
    let list = vec![
        address("eth0/10.0.0.1/24", &[("10.0.0.1/24", 4)]),
        address("lo", &[]),
    ];
    let text = table::render(&Address::definition(), &list).unwrap();
    assert_eq!(
        text,
        "\
NAMESPACE   TYPE          ID                 VERSION   LINK   ADDRESS       FAMILY   ALL
network     AddressSpec   eth0/10.0.0.1/24   12        eth0   10.0.0.1/24   4        [{\"cidr\":\"10.0.0.1/24\",\"family\":4}]
network     AddressSpec   lo                 12        eth0                          []
"
    );
}

#[test]
fn empty_list_renders_the_header_only() {
    let empty: Vec<SharedResource> = Vec::new();
    assert_eq!(
        table::render(&Other::definition(), &empty).unwrap(),
        "NAMESPACE   TYPE   ID   VERSION\n"
    );
}

#[test]
fn resource_of_another_type_is_rejected() {
    let list = vec![address("a", &[]), Resource::new("o", Other).into_shared()];
    let err = table::render(&Address::definition(), &list).unwrap_err();
    assert_eq!(
        err.to_string(),
        "test/Others.test.cosi.dev/o: invalid metadata.type: \
         a table of AddressSpecs.net.cosi.dev cannot show a Others.test.cosi.dev"
    );
}

#[test]
fn malformed_print_column_path_is_rejected_by_render_and_registration() {
    let list = vec![Resource::new("b", BadColumn).into_shared()];
    let err = table::render(&BadColumn::definition(), &list).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BadColumns.test.cosi.dev: invalid printColumns[1].path: path \"list[0]\" must start with '.'"
    );
    let err = Registry::new().register::<BadColumn>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "BadColumns.test.cosi.dev: invalid printColumns[1].path: path \"list[0]\" must start with '.'"
    );
}

#[test]
fn definition_found_by_alias_renders_its_columns() {
    let mut registry = Registry::new();
    registry.register::<Address>().unwrap();
    let definition = registry.resolve("addressspec").unwrap();
    let text = table::render(definition, [address("x", &[("::1/128", 6)])]).unwrap();
    assert!(
        text.lines().nth(1).unwrap().contains("::1/128   6"),
        "{text}"
    );
}
