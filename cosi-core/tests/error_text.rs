//! An error's text stays short whatever a caller sent: every piece of caller text it quotes is
//! cut to `text::QUOTED_BYTES`, saying how many bytes were cut, and the error still names what
//! it is about.

use cosi_core::text::QUOTED_BYTES;
use cosi_core::{validate_label_value, Error, Finalizers, Kind, Phase, Pointer, Registry, Version};

const MIB: usize = 1 << 20;

fn megabyte_pointer() -> Pointer {
    Pointer::new("ns", "Notes.test.cosi.dev", "a".repeat(MIB))
}

#[test]
fn an_error_about_a_megabyte_id_quotes_its_start_and_how_much_was_cut() {
    let pointer = megabyte_pointer();
    let whole = pointer.to_string();

    let text = Error::NotFound { pointer }.to_string();

    assert_eq!(
        text,
        format!(
            "{}… ({} bytes cut): not found",
            &whole[..QUOTED_BYTES],
            whole.len() - QUOTED_BYTES
        )
    );
    assert!(text.len() < 1024, "{} bytes", text.len());
}

#[test]
fn an_invalid_megabyte_label_value_is_quoted_cut_and_the_field_named() {
    let value = "v".repeat(MIB);

    let err = validate_label_value(&value)
        .unwrap_err()
        .at(megabyte_pointer().to_string(), "metadata.labels.app");

    let text = err.to_string();
    let subject = megabyte_pointer().to_string();
    assert_eq!(
        text,
        format!(
            "{}… ({} bytes cut): invalid metadata.labels.app: label value \"{}\"… ({} bytes cut): \
             name is {MIB} characters long, at most 63 are allowed",
            &subject[..QUOTED_BYTES],
            subject.len() - QUOTED_BYTES,
            "v".repeat(QUOTED_BYTES),
            MIB - QUOTED_BYTES
        )
    );
    assert!(text.len() < 1024, "{} bytes", text.len());
}

#[test]
fn a_megabyte_type_name_that_resolves_to_nothing_is_quoted_cut() {
    let name = "T".repeat(MIB);

    let text = Registry::new().resolve(&name).unwrap_err().to_string();

    assert_eq!(
        text,
        format!(
            "\"{}… ({} bytes cut): invalid resource type: no registered type has this full \
             name, plural, singular or alias",
            "T".repeat(QUOTED_BYTES - 1),
            MIB + 2 - QUOTED_BYTES
        )
    );
}

#[test]
fn every_error_quoting_megabytes_of_caller_text_stays_under_four_kib() {
    let huge = "x".repeat(MIB);
    let pointer = megabyte_pointer();
    let errors = [
        Error::NotFound {
            pointer: pointer.clone(),
        },
        Error::AlreadyExists {
            pointer: pointer.clone(),
        },
        Error::VersionConflict {
            pointer: pointer.clone(),
            expected: Version::new(1),
            actual: Version::new(2),
        },
        Error::OwnerConflict {
            pointer: pointer.clone(),
            owner: Some(huge.clone()),
            writer: None,
        },
        Error::OwnerConflict {
            pointer: pointer.clone(),
            owner: Some(huge.clone()),
            writer: Some(huge.clone()),
        },
        Error::PhaseConflict {
            pointer: pointer.clone(),
            expected: Phase::Running,
            actual: Phase::TearingDown,
        },
        Error::PendingFinalizers {
            pointer: pointer.clone(),
            finalizers: Finalizers::from([huge.clone(), format!("{huge}2")]),
        },
        Error::invalid(huge.clone(), huge.clone(), huge.clone()),
        Error::AccessDenied {
            subject: huge.clone(),
            message: huge.clone(),
        },
        Error::Unsupported {
            subject: huge.clone(),
            message: huge.clone(),
        },
        Error::WatchOverrun {
            kind: Kind::new(&huge, "Notes.test.cosi.dev"),
            position: cosi_core::Bookmark::from_bytes(huge.as_bytes()),
        },
        Error::Backend {
            subject: huge.clone(),
            message: huge.clone(),
            retryable: false,
            source: None,
        },
        Error::bookmark_not_issued_here(huge.clone(), &cosi_core::Bookmark::from_bytes(&[7; MIB])),
    ];
    for err in errors {
        let text = err.to_string();
        assert!(
            text.len() < 4096,
            "{}: {} bytes",
            err.kind_name(),
            text.len()
        );
        assert!(text.contains(" bytes cut)"), "{}", err.kind_name());
    }
}
