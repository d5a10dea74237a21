//! `spawnd connector …` (docs/provenance.md): parse the arguments, call the
//! provenance module, print what it did. Refusals keep their names
//! (`refused (signature_untrusted): …`) and their exit codes.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::args::{Cli, ConnectorCommand};
use super::context::load_config;
use super::output::{Failure, Success};
use crate::config::Config;
use crate::failure::FailureKind;
use crate::manifest::{parse_manifest, Fqn, LoadOptions, ScopePath, Sha256Digest};
use crate::provenance::content::{hash_connector, ContentError};
use crate::provenance::identity::parse_strict_version;
use crate::provenance::keys::{
    new_signing_key, parse_signing_key, public_key_pem, signing_key_pem,
};
use crate::provenance::pins::OperatorPins;
use crate::provenance::store::{check_provenance, InstallError};
use crate::provenance::{
    signature, ConnectorRef, Entry, InstallRefusal, InstallRequest, KeyId, Keyring,
    SignatureStatus, Store, StoreError,
};

/// Runs one `connector` subcommand.
pub(super) fn dispatch(cli: &Cli, command: &ConnectorCommand) -> Result<Success, Failure> {
    match command {
        ConnectorCommand::Hash { dir } => hash(dir),
        ConnectorCommand::Keygen { output } => keygen(output),
        ConnectorCommand::Sign { dir, key } => sign(dir, key),
        ConnectorCommand::Install { dir, hash, name } => {
            install(cli, dir, hash.as_ref(), name.as_deref())
        }
        ConnectorCommand::List => list(cli),
        ConnectorCommand::Remove { target } => remove(cli, target),
        ConnectorCommand::Pin { target, check } => pin(cli, target, *check),
    }
}

/// The store and the keyring the config names.
pub(super) fn store_and_keyring(config: &Config) -> Result<(Store, Keyring), Failure> {
    Ok((Store::at(&store_dir(config)?), keyring_of(config)?))
}

fn store_dir(config: &Config) -> Result<PathBuf, Failure> {
    config.connectors.store.clone().ok_or_else(|| {
        Failure::config("no connector store location: set [connectors] store in the config (the default is under the home directory, and this user has none)")
    })
}

/// The keyring the config names.
pub(super) fn keyring_of(config: &Config) -> Result<Keyring, Failure> {
    let dir = config.connectors.keyring.clone().ok_or_else(|| {
        Failure::config("no keyring location: set [connectors] keyring in the config (the default is under the home directory, and this user has none)")
    })?;
    Ok(Keyring::at(&dir))
}

fn options(config: &Config) -> LoadOptions {
    LoadOptions {
        max_wall_time_ms: config.sandbox.max_wall_time_ms,
    }
}

fn content_failure(e: ContentError) -> Failure {
    let kind = match &e {
        ContentError::Missing { .. } => FailureKind::NotFound,
        _ => FailureKind::Config,
    };
    Failure::new(kind, e.to_string())
}

fn store_failure(e: StoreError) -> Failure {
    match e {
        StoreError::NotFound(m) => Failure::not_found(m),
        e => Failure::config(e.to_string()),
    }
}

/// `connector hash DIR`.
fn hash(dir: &Path) -> Result<Success, Failure> {
    let content = hash_connector(dir).map_err(content_failure)?;
    let declared = declared_provenance(&content.manifest_text);
    if let Some(shipped) = content.shipped {
        if declared.as_deref() != Some(shipped.to_string().as_str()) {
            eprintln!(
                "spawnd: note: {} ships files, and its manifest's provenance_hash should be \"{shipped}\" (their hash); install refuses it otherwise",
                dir.display()
            );
        }
    }
    Ok(Success::new(
        json!({
            "dir": dir,
            "content": content.content,
            "shipped": content.shipped,
            "provenance_hash": declared,
            "files": content.files,
        }),
        content.content.to_string(),
    ))
}

/// The manifest's `[connector] provenance_hash` as written, read without
/// loading the whole manifest.
fn declared_provenance(text: &str) -> Option<String> {
    let table: toml::Table = text.parse().ok()?;
    Some(
        table
            .get("connector")?
            .get("provenance_hash")?
            .as_str()?
            .to_string(),
    )
}

/// `connector keygen --output PREFIX`.
fn keygen(prefix: &Path) -> Result<Success, Failure> {
    let public_path = PathBuf::from(format!("{}.pub", prefix.display()));
    if public_path.symlink_metadata().is_ok() {
        return Err(Failure::config(format!(
            "{} exists: an existing key is never overwritten; choose another --output",
            public_path.display()
        )));
    }
    let key = new_signing_key().map_err(|e| Failure::internal(e.to_string()))?;
    let private = signing_key_pem(&key).map_err(|e| Failure::internal(e.to_string()))?;
    let public =
        public_key_pem(&key.verifying_key()).map_err(|e| Failure::internal(e.to_string()))?;
    super::audit_cmd::write_new_key(prefix, private.as_bytes())?;
    if let Err(e) = write_new_public(&public_path, &public) {
        let _ = std::fs::remove_file(prefix);
        return Err(e);
    }
    let id = KeyId::of(&key.verifying_key());
    Ok(Success::new(
        json!({"private_key": prefix, "public_key": public_path, "key_id": id.as_str()}),
        format!(
            "wrote the private key {} (mode 0600: keep it secret, off the hosts that install connectors)\nand the public key {} (key id {id}): publish it as keys/publisher.pub in the connector's repository;\noperators trust it with `spawnd keyring trust github://OWNER --key publisher.pub`",
            prefix.display(),
            public_path.display()
        ),
    ))
}

fn write_new_public(path: &Path, text: &str) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .map_err(|e| Failure::config(format!("cannot write {}: {e}", path.display())))
}

/// `connector sign DIR --key FILE`.
fn sign(dir: &Path, key_file: &Path) -> Result<Success, Failure> {
    let text = std::fs::read_to_string(key_file).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("cannot read the signing key {}: {e}", key_file.display()),
        )
    })?;
    let key = parse_signing_key(&text)
        .map_err(|e| Failure::config(format!("{}: {e}", key_file.display())))?;
    let content = hash_connector(dir).map_err(content_failure)?;
    let source = dir.join("manifest.toml").display().to_string();
    let manifest = parse_manifest(&source, &content.manifest_text, LoadOptions::default())
        .map_err(|e| {
            Failure::config(format!(
                "{e}\n(a connector is signed as it installs: fix the manifest first)"
            ))
            .with_details(&e)
        })?;
    check_provenance(&manifest, &content)
        .map_err(|r| Failure::config(format!("not signed: {r}")).with_details(&r))?;
    let c = &manifest.connector;
    let file = signature::sign(&key, &c.name, &c.version, &content);
    let path = signature::write(dir, &file).map_err(|e| {
        Failure::config(format!(
            "cannot write {}: {e}",
            dir.join(signature::SIGNATURE_FILE).display()
        ))
    })?;
    Ok(Success::new(
        json!({"file": path, "name": c.name, "version": c.version.to_string(), "content": content.content, "key_id": file.key_id}),
        format!(
            "signed {}@{} ({}) with key {}: {}",
            c.name,
            c.version,
            content.content,
            file.key_id,
            path.display()
        ),
    ))
}

/// A refusal as the CLI reports it: `refused (REASON): …`, its exit code
/// (3 for a refusal of trust, 4 for a manifest problem), `{reason,
/// message}` in `error.details`.
pub(super) fn refusal_failure(r: &InstallRefusal) -> Failure {
    let kind = match r.reason.exit_code() {
        3 => FailureKind::Denied,
        _ => FailureKind::Config,
    };
    Failure::new(kind, r.to_string()).with_details(r)
}

/// `connector install DIR [--hash H] [--name FQN[@VERSION]]`.
fn install(
    cli: &Cli,
    dir: &Path,
    hash: Option<&Sha256Digest>,
    name: Option<&str>,
) -> Result<Success, Failure> {
    let expect_name = name.map(parse_expected_name).transpose()?;
    let config = load_config(cli)?;
    let (store, keyring) = store_and_keyring(&config)?;
    let request = InstallRequest {
        source: dir,
        expect_hash: hash.copied(),
        expect_name,
        options: options(&config),
        keyring: &keyring,
    };
    let installed = store.install(&request).map_err(|e| match e {
        InstallError::Refused(r) => refusal_failure(&r),
        InstallError::Store(e) => store_failure(e),
    })?;
    let entry = &installed.entry;
    let c = &entry.manifest.connector;
    let what = if installed.already {
        "is installed already"
    } else {
        "installed"
    };
    Ok(Success::new(
        json!({"installed": !installed.already, "connector": entry_json(entry, &store)}),
        format!(
            "{}@{} {what}: {} ({}) in {}",
            c.name,
            c.version,
            entry.hash(),
            signature_text(&entry.signature),
            entry.dir.display()
        ),
    ))
}

/// `--name FQN` or `--name FQN@VERSION`.
fn parse_expected_name(text: &str) -> Result<(Fqn, Option<semver::Version>), Failure> {
    let usage = |why: String| Failure::usage(format!("--name: {why}"));
    match text.rsplit_once('@') {
        Some((name, version)) => Ok((
            Fqn::parse(name).map_err(usage)?,
            Some(parse_strict_version(version).map_err(usage)?),
        )),
        None => Ok((Fqn::parse(text).map_err(usage)?, None)),
    }
}

/// How a signature status reads in a line.
fn signature_text(status: &SignatureStatus) -> String {
    match status {
        SignatureStatus::Unsigned => "unsigned".into(),
        SignatureStatus::Signed { authority, key_id } => {
            format!("signed by {authority} key {key_id}")
        }
        SignatureStatus::Untrusted { authority, key_id } => {
            format!("untrusted: key {key_id} is not trusted for {authority}")
        }
        SignatureStatus::Invalid { why } => format!("invalid signature: {why}"),
    }
}

fn entry_json(entry: &Entry, store: &Store) -> Value {
    let c = &entry.manifest.connector;
    let pins = store.pins(&entry.hash()).map(|p| p.programs.len()).ok();
    json!({
        "name": c.name,
        "version": c.version.to_string(),
        "hash": entry.hash(),
        "signature": entry.signature,
        "dir": entry.dir,
        "operator_pins": pins,
    })
}

/// `connector list`.
fn list(cli: &Cli) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let (store, keyring) = store_and_keyring(&config)?;
    let mut listed = store
        .list(options(&config), &keyring)
        .map_err(store_failure)?;
    // By name, then version; entries with a problem last.
    listed.sort_by(|(ha, a), (hb, b)| match (a, b) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (&a.manifest.connector, &b.manifest.connector);
            (&a.name, &a.version).cmp(&(&b.name, &b.version))
        }
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => ha.0.cmp(&hb.0),
    });
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (hash, opened) in &listed {
        match opened {
            Ok(entry) => {
                let c = &entry.manifest.connector;
                lines.push(format!(
                    "{}@{}  {hash}  {}",
                    c.name,
                    c.version,
                    signature_text(&entry.signature)
                ));
                rows.push(entry_json(entry, &store));
            }
            Err(e) => {
                lines.push(format!("{hash}  PROBLEM: {e}"));
                rows.push(json!({"hash": hash, "problem": e.to_string()}));
            }
        }
    }
    if lines.is_empty() {
        lines.push(format!(
            "no connector is installed in {}",
            store.root().display()
        ));
    }
    // Exit 1 when the daemon would refuse to load the store: an entry with
    // a problem, or a signature that is untrusted or invalid.
    let unservable = listed.iter().any(|(_, opened)| match opened {
        Ok(entry) => !matches!(
            entry.signature,
            crate::provenance::SignatureStatus::Signed { .. }
                | crate::provenance::SignatureStatus::Unsigned
        ),
        Err(_) => true,
    });
    let mut done = Success::new(
        json!({"store": store.root(), "connectors": rows, "servable": !unservable}),
        lines.join("\n"),
    );
    if unservable {
        done.exit = 1;
    }
    Ok(done)
}

/// `connector remove NAME@VERSION | sha256:…`.
fn remove(cli: &Cli, target: &str) -> Result<Success, Failure> {
    let r = ConnectorRef::parse(target).map_err(Failure::usage)?;
    let config = load_config(cli)?;
    let store = Store::at(&store_dir(&config)?);
    let removed = store.remove(&r).map_err(store_failure)?;
    let hashes: Vec<String> = removed.iter().map(|h| h.to_string()).collect();
    Ok(Success::new(
        json!({"removed": hashes}),
        format!("removed {r} ({})", hashes.join(", ")),
    ))
}

/// The one installed entry `r` names, opened and checked, and the store.
pub(super) fn open_entry(config: &Config, r: &ConnectorRef) -> Result<(Entry, Store), Failure> {
    let (store, keyring) = store_and_keyring(config)?;
    let found = store.find(r).map_err(store_failure)?;
    let [hash] = found.as_slice() else {
        return Err(Failure::config(format!(
            "{r} names {} entries; name one by its content hash",
            found.len()
        )));
    };
    let entry = store
        .open(hash, options(config), &keyring)
        .map_err(store_failure)?;
    Ok((entry, store))
}

/// `connector pin NAME@VERSION | sha256:… [--check]`.
fn pin(cli: &Cli, target: &str, check: bool) -> Result<Success, Failure> {
    let r = ConnectorRef::parse(target).map_err(Failure::usage)?;
    let config = load_config(cli)?;
    let (entry, store) = open_entry(&config, &r)?;
    let hash = &entry.hash();
    let old = store.pins(hash).map_err(store_failure)?;
    let (pins, report, stale) = pins_for(&entry, &old)?;
    let mut lines: Vec<String> = report.iter().map(|row| report_line(row, check)).collect();
    let written = if check || !stale {
        None
    } else {
        Some(store.write_pins(&entry, &pins).map_err(store_failure)?)
    };
    if check && stale {
        lines.push(format!(
            "pins are missing or stale: run `spawnd connector pin {r}`"
        ));
    }
    if let Some(path) = &written {
        lines.push(format!("wrote {}", path.display()));
    }
    let mut done = Success::new(
        json!({"connector": r.to_string(), "hash": hash, "programs": report, "check": check, "file": written}),
        lines.join("\n"),
    );
    if check && stale {
        done.exit = 1;
    }
    Ok(done)
}

/// The operator pins an entry's programs need on this host, what each
/// program's status is, and whether the pins file must change.
fn pins_for(
    entry: &Entry,
    old: &OperatorPins,
) -> Result<(OperatorPins, Vec<Value>, bool), Failure> {
    let mut pins = OperatorPins::for_connector(entry.hash());
    let mut report = Vec::new();
    let programs = entry
        .manifest
        .spawn
        .as_ref()
        .map(|s| s.programs.clone())
        .unwrap_or_default();
    for program in &programs {
        let ScopePath::Absolute(path) = &program.path else {
            let why = match program.path {
                ScopePath::Connector(_) => {
                    "the connector ships it: provenance_hash and the content hash fix its bytes"
                }
                _ => "a ~/ program is each caller's own",
            };
            report.push(json!({"path": program.path.to_string(), "status": "skipped", "why": why}));
            continue;
        };
        let digest = crate::program::hash_path(path).map_err(|e| {
            Failure::from_io(
                &e,
                FailureKind::Config,
                format!("cannot hash {}: {e}", path.display()),
            )
        })?;
        let mut row = json!({"path": path, "sha256": digest});
        row["status"] = json!(match (program.hash, old.hash_for(path)) {
            (Some(publisher), _) if publisher == digest => "publisher_pinned",
            (Some(publisher), _) => {
                row["publisher"] = json!(publisher);
                "publisher_pinned_differs"
            }
            (None, Some(was)) if *was == digest => "unchanged",
            (None, Some(was)) => {
                row["was"] = json!(was);
                "updated"
            }
            (None, None) => "pinned",
        });
        if program.hash.is_none() {
            pins.programs.insert(path.clone(), digest);
        }
        report.push(row);
    }
    let stale = pins != *old;
    Ok((pins, report, stale))
}

/// One program's line of `connector pin`: what was done to its pin, or,
/// with `check` (which writes nothing), what pinning would do.
fn report_line(row: &Value, check: bool) -> String {
    let s = |k: &str| row[k].as_str().unwrap_or_default().to_string();
    match s("status").as_str() {
        status @ ("updated" | "pinned") => {
            super::manifest_cmd::pin_line(status, &s("path"), &s("was"), &s("sha256"), check)
        }
        "publisher_pinned" => format!("publisher-pinned {} {} (matches this host)", s("path"), s("sha256")),
        "publisher_pinned_differs" => format!(
            "publisher-pinned {} {}, but this host's is {}: spawns of it will be refused (program_hash_mismatch)",
            s("path"),
            s("publisher"),
            s("sha256")
        ),
        "skipped" => format!("skipped {} ({})", s("path"), s("why")),
        status => format!("{status} {} {}", s("path"), s("sha256")),
    }
}
