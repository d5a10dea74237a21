//! Choosing among served versions, request pins, the operator's pins and
//! the per-spawn check of an installed connector's stored files.

use std::path::PathBuf;
use std::sync::Arc;

use super::test_support::*;
use super::*;
use crate::manifest::{Manifest, Sha256Digest, Verified};

fn installed(text: &str, content: u8, pins: &[(&str, [u8; 32])]) -> Manifest {
    let mut m = manifest(text);
    m.verified = Some(Arc::new(Verified {
        dir: "/store/sha256-aa".into(),
        installed: true,
        content: Sha256Digest([content; 32]),
        files: vec![("manifest.toml".into(), m.digest)],
        signature: "signed",
        signer: Some("ed25519:0123456789abcdef".into()),
        pins: pins
            .iter()
            .map(|(p, h)| (PathBuf::from(p), Sha256Digest(*h)))
            .collect(),
    }));
    m
}

fn with_version(text: &str, version: &str) -> String {
    text.replace("version = \"0.1.0\"", &format!("version = \"{version}\""))
}

#[test]
fn one_served_version_is_chosen_unpinned_and_several_need_a_pin() {
    let one = installed(M0, 1, &[]);
    let two = installed(&with_version(M0, "0.2.0"), 2, &[]);
    let name = "github://aileron-test/gitcrawl";
    let none = ConnectorPin::default();
    assert!(std::ptr::eq(
        *select_served(name, &[&one], &none).unwrap(),
        &one
    ));
    let d = select_served(name, &[&one, &two], &none).unwrap_err();
    assert_eq!(d.reason, Reason::ConnectorVersionRequired);
    assert_eq!(d.granted.len(), 2, "{d:?}");
    let by_version = ConnectorPin {
        version: Some("0.2.0".parse().unwrap()),
        hash: None,
    };
    assert!(std::ptr::eq(
        *select_served(name, &[&one, &two], &by_version).unwrap(),
        &two
    ));
    let by_hash = ConnectorPin {
        version: None,
        hash: Some(Sha256Digest([1; 32])),
    };
    assert!(std::ptr::eq(
        *select_served(name, &[&one, &two], &by_hash).unwrap(),
        &one
    ));
    let crossed = ConnectorPin {
        version: Some("0.2.0".parse().unwrap()),
        hash: Some(Sha256Digest([1; 32])),
    };
    let d = select_served(name, &[&one, &two], &crossed).unwrap_err();
    assert_eq!(d.reason, Reason::ConnectorPinMismatch);
    // A manifest file has no content hash: a hash pin never matches it.
    let file = manifest(M0);
    let d = select_served(name, &[&file], &by_hash).unwrap_err();
    assert_eq!(d.reason, Reason::ConnectorPinMismatch);
    assert!(d.granted[0].ends_with("(manifest file)"), "{d:?}");
}

#[test]
fn the_gate_refuses_a_manifest_that_does_not_satisfy_the_requests_pin() {
    let m = installed(M0, 1, &[]);
    let mut req = Request::op("status", &[]);
    req.pin.hash = Some(Sha256Digest([9; 32]));
    let d = decide_full(
        &m,
        &req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    );
    assert_reason(&d, Reason::ConnectorPinMismatch, "action");
    assert_eq!(denied(&d).connector_version.as_deref(), Some("0.1.0"));
    assert_eq!(
        denied(&d).provenance.as_ref().unwrap().hash,
        Sha256Digest([1; 32])
    );
}

#[test]
fn an_installed_connector_is_rechecked_with_the_programs_own_digest_and_refused_when_changed() {
    let m = installed(M0, 1, &[]);
    let req = Request::op("status", &[]);
    let mut programs = FakePrograms::standard();
    let d = decide_full(&m, &req, &Operator::default(), &mut programs);
    let plan = allowed(&d);
    assert_eq!(plan.provenance.as_ref().unwrap().signature, "signed");
    assert_eq!(
        programs.rechecked,
        vec![(PathBuf::from("/usr/bin/git"), Sha256Digest(GIT_SHA))]
    );
    programs.installed_change = Some(ContentChanged {
        what: "manifest.toml is sha256:…".into(),
        found: Some(Sha256Digest([5; 32])),
    });
    let d = decide_full(&m, &req, &Operator::default(), &mut programs);
    assert_reason(&d, Reason::ConnectorHashMismatch, "connector_manifest");
    let denial = denied(&d);
    assert!(
        denial.message.contains(&Sha256Digest([1; 32]).to_string()),
        "{denial:?}"
    );
    assert!(
        denial.message.contains(&Sha256Digest([5; 32]).to_string()),
        "{denial:?}"
    );
    // A manifest file is not rechecked.
    let d = decide_full(&manifest(M0), &req, &Operator::default(), &mut programs);
    allowed(&d);
}

#[test]
fn the_operators_pin_beside_an_installed_connector_is_enforced() {
    let req = Request::op("status", &[]);
    let matching = installed(M0, 1, &[("/usr/bin/git", GIT_SHA)]);
    let d = decide_full(
        &matching,
        &req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    );
    assert!(allowed(&d).program.pinned);
    let stale = installed(M0, 1, &[("/usr/bin/git", [3; 32])]);
    let d = decide_full(
        &stale,
        &req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    );
    assert_reason(&d, Reason::ProgramHashMismatch, "connector_manifest");
    assert!(
        denied(&d).message.contains("the operator pins"),
        "{:?}",
        denied(&d)
    );
}

/// Under `exec = "declared"` every declared program is opened and its pin
/// checked, not only the op's own; `spawnd connector pin` pins each of
/// them, so the operator's pin of a second program holds as the
/// publisher's would.
#[test]
fn the_operators_pin_of_another_declared_program_is_enforced() {
    let text = M0
        .replace(
            "programs = [{ path = \"/usr/bin/git\" }]",
            "programs = [{ path = \"/usr/bin/git\" }, { path = \"/usr/bin/curl\" }]\nexec = \"declared\"",
        );
    let req = Request::op("status", &[]);
    let stale = installed(
        &text,
        1,
        &[("/usr/bin/git", GIT_SHA), ("/usr/bin/curl", [3; 32])],
    );
    let d = decide_full(
        &stale,
        &req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    );
    assert_reason(&d, Reason::ProgramHashMismatch, "connector_manifest");
    assert!(
        denied(&d).message.contains("/usr/bin/curl"),
        "{:?}",
        denied(&d)
    );
    // The operator's pin satisfies [sandbox] require_program_hash as the
    // publisher's does.
    let matching = installed(
        &text,
        1,
        &[("/usr/bin/git", GIT_SHA), ("/usr/bin/curl", GIT_SHA)],
    );
    let strict = Operator {
        require_pin: true,
        ..Operator::default()
    };
    let d = decide_full(&matching, &req, &strict, &mut FakePrograms::standard());
    allowed(&d);
}
