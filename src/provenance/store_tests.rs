//! The store on temporary directories: what an install keeps, refuses and
//! finds again, and what opening an entry notices.

use std::path::{Path, PathBuf};

use super::*;
use crate::provenance::keys::{new_signing_key, public_key_pem};
use crate::provenance::signature::sign;

struct Setup {
    tmp: tempfile::TempDir,
    store: Store,
    keyring: Keyring,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(&tmp.path().join("store"));
    let keyring = Keyring::at(&tmp.path().join("keyring"));
    Setup {
        tmp,
        store,
        keyring,
    }
}

impl Setup {
    /// A connector directory `rel` with a manifest for `name@version` and,
    /// when `program` is given, `bin/tool` with those bytes and a matching
    /// provenance_hash.
    fn connector(&self, rel: &str, name: &str, version: &str, program: Option<&[u8]>) -> PathBuf {
        let dir = self.tmp.path().join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = format!("[connector]\nname = \"{name}\"\nversion = \"{version}\"\n");
        if let Some(bytes) = program {
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            std::fs::write(dir.join("bin/tool"), bytes).unwrap();
            let hash = crate::program::hash_path(&dir.join("bin/tool")).unwrap();
            manifest.push_str(&format!("provenance_hash = \"{hash}\"\n"));
        }
        std::fs::write(dir.join("manifest.toml"), manifest).unwrap();
        dir
    }

    fn request<'a>(&'a self, source: &'a Path) -> InstallRequest<'a> {
        InstallRequest {
            source,
            expect_hash: None,
            expect_name: None,
            options: LoadOptions::default(),
            keyring: &self.keyring,
        }
    }

    fn refusal(&self, request: &InstallRequest<'_>) -> InstallRefusal {
        match self.store.install(request) {
            Err(InstallError::Refused(r)) => r,
            other => panic!("not refused: {other:?}"),
        }
    }

    /// Leaves nothing behind but entries, pins and the lock.
    fn assert_no_leftovers(&self) {
        for e in std::fs::read_dir(self.store.root()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                name.starts_with(ENTRY_PREFIX) || name == LOCK_FILE,
                "left behind: {name}"
            );
        }
    }
}

#[test]
fn an_install_keeps_exactly_the_stream_and_the_signature_read_only_under_the_content_hash() {
    let s = setup();
    let dir = s.connector(
        "c",
        "github://acme/tool",
        "1.0.0",
        Some(b"#!/bin/sh\necho hi\n"),
    );
    std::fs::write(dir.join("README"), "not shipped").unwrap();
    let key = new_signing_key().unwrap();
    let content = hash_connector(&dir).unwrap();
    let name = Fqn::parse("github://acme/tool").unwrap();
    let sig = sign(&key, &name, &"1.0.0".parse().unwrap(), &content);
    std::fs::write(dir.join(SIGNATURE_FILE), serde_json::to_vec(&sig).unwrap()).unwrap();
    let pub_file = s.tmp.path().join("publisher.pub");
    std::fs::write(&pub_file, public_key_pem(&key.verifying_key()).unwrap()).unwrap();
    s.keyring
        .trust(&Authority::parse("github://acme").unwrap(), &pub_file)
        .unwrap();

    let installed = s.store.install(&s.request(&dir)).unwrap();
    assert!(!installed.already);
    assert_eq!(installed.entry.hash(), content.content);
    assert_eq!(installed.entry.signature.name(), "signed");
    let entry = s.store.entry_dir(&content.content);
    let mut names: Vec<String> = std::fs::read_dir(&entry)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bin", "manifest.toml", "signature.json"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&entry), 0o555);
    assert_eq!(mode(&entry.join("bin/tool")), 0o555);
    assert_eq!(mode(&entry.join("manifest.toml")), 0o444);
    s.assert_no_leftovers();

    // Again: the same bytes are installed already.
    assert!(s.store.install(&s.request(&dir)).unwrap().already);
    let listed = s.store.list(LoadOptions::default(), &s.keyring).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].1.is_ok());
}

#[test]
fn two_versions_coexist_and_are_found_and_removed_by_name_or_hash() {
    let s = setup();
    let v1 = s.connector("v1", "github://acme/tool", "1.0.0", None);
    let v2 = s.connector("v2", "github://acme/tool", "2.0.0-rc.1", None);
    let h1 = s.store.install(&s.request(&v1)).unwrap().entry.hash();
    let h2 = s.store.install(&s.request(&v2)).unwrap().entry.hash();
    assert_ne!(h1, h2);
    let r1 = ConnectorRef::parse("github://acme/tool@1.0.0").unwrap();
    assert_eq!(s.store.find(&r1).unwrap(), vec![h1]);
    let mut pins = OperatorPins::for_connector(h1);
    pins.programs
        .insert("/usr/bin/git".into(), Sha256Digest([5; 32]));
    let entry = s
        .store
        .open(&h1, LoadOptions::default(), &s.keyring)
        .unwrap();
    s.store.write_pins(&entry, &pins).unwrap();
    assert_eq!(s.store.pins(&h1).unwrap(), pins);
    assert_eq!(s.store.remove(&r1).unwrap(), vec![h1]);
    assert!(!s.store.pins_path(&h1).exists());
    assert!(matches!(s.store.find(&r1), Err(StoreError::NotFound(_))));
    assert_eq!(s.store.remove(&ConnectorRef::Hash(h2)).unwrap(), vec![h2]);
    assert!(s.store.hashes().unwrap().is_empty());
    s.assert_no_leftovers();
}

#[test]
fn each_check_refuses_with_its_own_reason_and_leaves_nothing() {
    let s = setup();
    let cases: Vec<(PathBuf, Refusal)> = vec![
        (
            s.connector("latest", "github://acme/tool", "latest", None),
            Refusal::VersionNotStrict,
        ),
        (
            s.connector("range", "github://acme/tool", "^1.2", None),
            Refusal::VersionNotStrict,
        ),
        (
            s.connector("short", "github://acme/tool", "1.2", None),
            Refusal::VersionNotStrict,
        ),
        (
            s.connector("hub", "hub://acme/tool", "1.0.0", None),
            Refusal::SchemeUnknown,
        ),
        (s.tmp.path().join("missing"), Refusal::ConnectorUnreadable),
    ];
    for (dir, reason) in cases {
        let r = s.refusal(&s.request(&dir));
        assert_eq!(r.reason, reason, "{}: {r}", dir.display());
    }
    let bad = s.connector("bad", "github://acme/tool", "1.0.0", None);
    std::fs::write(
        bad.join("manifest.toml"),
        "[connector]\nname = \"github://acme/tool\"\nversion = \"1.0.0\"\nbogus = 1\n",
    )
    .unwrap();
    assert_eq!(s.refusal(&s.request(&bad)).reason, Refusal::ManifestInvalid);

    let dir = s.connector("ok", "github://acme/tool", "1.0.0", Some(b"prog"));
    let mut r = s.request(&dir);
    r.expect_name = Some((Fqn::parse("github://other/tool").unwrap(), None));
    assert_eq!(s.refusal(&r).reason, Refusal::NameMismatch);
    r.expect_name = Some((
        Fqn::parse("github://acme/tool").unwrap(),
        Some("1.0.1".parse().unwrap()),
    ));
    assert_eq!(s.refusal(&r).reason, Refusal::NameMismatch);
    let mut r = s.request(&dir);
    r.expect_hash = Some(Sha256Digest([0; 32]));
    let refusal = s.refusal(&r);
    assert_eq!(refusal.reason, Refusal::HashMismatch);
    let actual = hash_connector(&dir).unwrap().content;
    assert!(refusal.message.contains(&actual.to_string()), "{refusal}");

    // The program changed after the manifest recorded its hash.
    std::fs::write(dir.join("bin/tool"), "other program").unwrap();
    assert_eq!(
        s.refusal(&s.request(&dir)).reason,
        Refusal::ProvenanceMismatch
    );
    // Shipped files, and no provenance_hash.
    let text = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("provenance_hash"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("manifest.toml"), &without).unwrap();
    assert_eq!(
        s.refusal(&s.request(&dir)).reason,
        Refusal::ProvenanceMissing
    );
    // A provenance_hash with nothing shipped.
    std::fs::remove_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("manifest.toml"), &text).unwrap();
    assert_eq!(
        s.refusal(&s.request(&dir)).reason,
        Refusal::ProvenanceMismatch
    );
    s.assert_no_leftovers();
    assert!(s.store.hashes().unwrap().is_empty());
}

#[test]
fn a_release_with_other_bytes_under_an_installed_version_is_refused() {
    let s = setup();
    let first = s.connector("a", "github://acme/tool", "1.0.0", Some(b"one"));
    let retagged = s.connector("b", "github://acme/tool", "1.0.0", Some(b"two"));
    let h = s.store.install(&s.request(&first)).unwrap().entry.hash();
    let r = s.refusal(&s.request(&retagged));
    assert_eq!(r.reason, Refusal::VersionConflict);
    assert!(r.message.contains(&h.to_string()), "{r}");
    s.assert_no_leftovers();
}

#[test]
fn opening_an_entry_whose_bytes_changed_names_both_hashes() {
    let s = setup();
    let dir = s.connector("c", "github://acme/tool", "1.0.0", Some(b"prog"));
    let h = s.store.install(&s.request(&dir)).unwrap().entry.hash();
    let entry = s.store.entry_dir(&h);
    for p in [entry.clone(), entry.join("bin"), entry.join("bin/tool")] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(entry.join("bin/tool"), "prog, edited").unwrap();
    let e = s
        .store
        .open(&h, LoadOptions::default(), &s.keyring)
        .unwrap_err();
    let StoreError::Tampered {
        expected, found, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(*expected, h);
    assert_ne!(*found, h);
    let text = e.to_string();
    assert!(
        text.contains(&h.to_string()) && text.contains(&found.to_string()),
        "{text}"
    );
    std::fs::write(entry.join("extra"), "x").unwrap();
    let e = s
        .store
        .open(&h, LoadOptions::default(), &s.keyring)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no install puts there"), "{e}");
}

#[test]
fn bytes_moved_between_the_program_and_the_manifest_keep_the_content_hash_and_are_refused() {
    let s = setup();
    let dir = s.connector(
        "c",
        "github://acme/tool",
        "1.0.0",
        Some(b"#!/bin/sh\necho hi\n"),
    );
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    let shifted = format!("# moved\n{manifest}");
    std::fs::write(dir.join("manifest.toml"), &shifted).unwrap();
    let before = hash_connector(&dir).unwrap().content;
    // The comment line moves from the manifest's start to the program's end:
    // the stream, and so the content hash, is the same.
    std::fs::write(dir.join("bin/tool"), "#!/bin/sh\necho hi\n# moved\n").unwrap();
    std::fs::write(dir.join("manifest.toml"), &manifest).unwrap();
    assert_eq!(hash_connector(&dir).unwrap().content, before);
    let mut r = s.request(&dir);
    r.expect_hash = Some(before);
    // provenance_hash still names the program as published.
    assert_eq!(s.refusal(&r).reason, Refusal::ProvenanceMismatch);
}

/// SemVer ignores build metadata for precedence: `1.0.0+a` and `1.0.0+b`
/// are one release, so other bytes under the second are a re-tag too.
#[test]
fn a_release_retagged_with_other_build_metadata_is_refused() {
    let s = setup();
    let first = s.connector("a", "github://acme/tool", "1.0.0+a", Some(b"one"));
    let retagged = s.connector("b", "github://acme/tool", "1.0.0+b", Some(b"two"));
    s.store.install(&s.request(&first)).unwrap();
    let r = s.refusal(&s.request(&retagged));
    assert_eq!(r.reason, Refusal::VersionConflict);
}
