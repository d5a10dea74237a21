//! The content-addressed store (`[connectors] store`, docs/provenance.md,
//! "The store"): each installed connector is a read-only directory
//! `STORE/sha256-<content hash>/` holding exactly the stream's files
//! (`bin/…`, `manifest.toml`) and the publisher's `signature.json` when
//! there is one, nothing else. Two versions of a connector are two entries;
//! one name and version is only ever one content hash.
//!
//! An install copies the connector into a temporary directory inside the
//! store, checks what was copied (so the bytes checked are the bytes
//! kept), syncs it, makes it read-only and renames it into place under the
//! store's lock: an entry is complete or absent. Opening an entry hashes
//! it again and refuses one whose bytes no longer match its name.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::content::{
    hash_connector, hash_shipped_part, ConnectorContent, ContentError, MANIFEST_FILE, SHIPPED_DIR,
};
use super::files;
use super::identity::{known_scheme, parse_strict_version, Authority, ConnectorRef};
use super::keyring::{Keyring, KeyringError};
use super::pins::{self, OperatorPins, PinsError};
use super::refusal::{InstallRefusal, Refusal};
use super::signature::{self, SignatureStatus, MAX_SIGNATURE_BYTES, SIGNATURE_FILE};
use crate::manifest::{parse_manifest, Fqn, LoadOptions, Manifest, Sha256Digest};

/// An entry's directory name is this and the content hash's hex.
pub(crate) const ENTRY_PREFIX: &str = "sha256-";
/// The operator pins file beside an entry: `sha256-<hex>` and this.
pub(crate) const PINS_SUFFIX: &str = ".pins.toml";
/// The store's lock file.
const LOCK_FILE: &str = ".lock";

/// Why the store could not be read or changed, or an entry not trusted.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory that could not be read or written.
    #[error("store {path}: {cause}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
    /// Something others could change, or not owned by root or this user.
    #[error("store: {0}")]
    Unsafe(String),
    /// An entry whose bytes changed after install.
    #[error("{dir} holds content {found}, but was installed as {expected}: its files changed after install (tampering or corruption); remove it (`spawnd connector remove {expected}`) and install the connector again")]
    Tampered {
        /// The entry.
        dir: PathBuf,
        /// The hash it was installed as.
        expected: Sha256Digest,
        /// The hash of its bytes now.
        found: Sha256Digest,
    },
    /// An entry that cannot be hashed.
    #[error("{0}")]
    Content(#[from] ContentError),
    /// An entry whose manifest does not load.
    #[error("{0}")]
    Manifest(String),
    /// No such entry.
    #[error("{0}")]
    NotFound(String),
    /// The keyring could not be read.
    #[error("{0}")]
    Keyring(#[from] KeyringError),
    /// The operator pins could not be read.
    #[error("{0}")]
    Pins(#[from] PinsError),
}

/// Why an install did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A check refused the connector.
    #[error("{0}")]
    Refused(#[from] InstallRefusal),
    /// The store or the keyring failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// An installed connector, checked.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its directory.
    pub dir: PathBuf,
    /// Its content, hashed now (equal to the name's hash).
    pub content: ConnectorContent,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its signature, checked against the keyring now.
    pub signature: SignatureStatus,
}

impl Entry {
    /// The content hash.
    pub fn hash(&self) -> Sha256Digest {
        self.content.content
    }
}

/// An entry as `list` finds it: its hash, and the entry or why it fails
/// its checks.
pub(crate) type Listed = (Sha256Digest, Result<Entry, StoreError>);

/// What to install and what it must be.
pub struct InstallRequest<'a> {
    /// The connector directory.
    pub source: &'a Path,
    /// `--hash`: the content hash it must have.
    pub expect_hash: Option<Sha256Digest>,
    /// `--name`: the name (and version) it must have.
    pub expect_name: Option<(Fqn, Option<semver::Version>)>,
    /// The operator's manifest ceilings.
    pub options: LoadOptions,
    /// The keys trusted for signatures.
    pub keyring: &'a Keyring,
}

/// What an install did.
#[derive(Debug)]
pub struct Installed {
    /// The entry.
    pub entry: Entry,
    /// It was installed already (same bytes): nothing was written.
    pub already: bool,
}

/// The store at a directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store at `root` (it may not exist yet: then it is empty).
    pub fn at(root: &Path) -> Store {
        Store {
            root: root.to_path_buf(),
        }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the entry with content hash `hash`.
    pub fn entry_dir(&self, hash: &Sha256Digest) -> PathBuf {
        self.root
            .join(format!("{ENTRY_PREFIX}{}", hex::encode(hash.0)))
    }

    /// The operator pins file of the entry `hash`.
    pub fn pins_path(&self, hash: &Sha256Digest) -> PathBuf {
        self.root.join(format!(
            "{ENTRY_PREFIX}{}{PINS_SUFFIX}",
            hex::encode(hash.0)
        ))
    }

    /// Installs a connector directory (see the module's description).
    pub fn install(&self, request: &InstallRequest<'_>) -> Result<Installed, InstallError> {
        self.ensure_root()?;
        let staged = self.stage(request.source)?;
        let checked = check_staged(staged.path(), request);
        let (content, manifest, signature) = match checked {
            Ok(c) => c,
            Err(e) => {
                remove_staged(staged);
                return Err(e);
            }
        };
        let _lock = self.lock()?;
        let target = self.entry_dir(&content.content);
        if target.exists() {
            remove_staged(staged);
            let entry = self.open(&content.content, request.options, request.keyring)?;
            return Ok(Installed {
                entry,
                already: true,
            });
        }
        if let Err(e) = self.check_version_free(&manifest, &content.content) {
            remove_staged(staged);
            return Err(e);
        }
        let staged = staged.keep();
        let placed = make_read_only(&staged).and_then(|()| {
            std::fs::rename(&staged, &target)?;
            files::sync_dir(&self.root)
        });
        if let Err(e) = placed {
            let _ = files::remove_tree(&staged);
            return Err(io(&target, e).into());
        }
        Ok(Installed {
            entry: Entry {
                dir: target,
                content,
                manifest,
                signature,
            },
            already: false,
        })
    }

    /// Opens and checks the entry `hash`: safe, its bytes still its hash,
    /// its manifest loading, its signature checked against the keyring.
    pub fn open(
        &self,
        hash: &Sha256Digest,
        options: LoadOptions,
        keyring: &Keyring,
    ) -> Result<Entry, StoreError> {
        let dir = self.entry_dir(hash);
        if !dir.exists() {
            return Err(StoreError::NotFound(format!(
                "no connector {hash} is installed: `spawnd connector list` shows what is"
            )));
        }
        files::check_owner_and_mode(&self.root).map_err(StoreError::Unsafe)?;
        check_entry_safe(&dir)?;
        let content = hash_connector(&dir)?;
        if content.content != *hash {
            return Err(StoreError::Tampered {
                dir,
                expected: *hash,
                found: content.content,
            });
        }
        let manifest = parse_manifest(
            &dir.join(MANIFEST_FILE).display().to_string(),
            &content.manifest_text,
            options,
        )
        .map_err(|e| StoreError::Manifest(e.to_string()))?;
        let file = read_signature(&dir).map_err(|e| StoreError::Io {
            path: dir.join(SIGNATURE_FILE),
            cause: e,
        })?;
        let trusted = keyring.keys_for(&Authority::of(&manifest.connector.name))?;
        let signature = signature::check(
            file.as_deref(),
            &manifest.connector.name,
            &manifest.connector.version,
            &content,
            &trusted,
        );
        Ok(Entry {
            dir,
            content,
            manifest,
            signature,
        })
    }

    /// Every entry's hash, in hash order.
    pub fn hashes(&self) -> Result<Vec<Sha256Digest>, StoreError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.root, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let name = entry.map_err(|e| io(&self.root, e))?.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_prefix(ENTRY_PREFIX)) else {
                continue;
            };
            if let Ok(hash) = format!("sha256:{hex}").parse::<Sha256Digest>() {
                out.push(hash);
            }
        }
        out.sort_by_key(|h| h.0);
        Ok(out)
    }

    /// Every entry, opened and checked (an entry that fails its checks is
    /// listed with why).
    pub fn list(&self, options: LoadOptions, keyring: &Keyring) -> Result<Vec<Listed>, StoreError> {
        Ok(self
            .hashes()?
            .into_iter()
            .map(|h| (h, self.open(&h, options, keyring)))
            .collect())
    }

    /// The hashes of the entries `r` names: one for a content hash, every
    /// entry with that name and version for `NAME@VERSION`.
    pub fn find(&self, r: &ConnectorRef) -> Result<Vec<Sha256Digest>, StoreError> {
        let found: Vec<Sha256Digest> = match r {
            ConnectorRef::Hash(h) => vec![*h]
                .into_iter()
                .filter(|h| self.entry_dir(h).exists())
                .collect(),
            ConnectorRef::NameVersion(name, version) => self
                .hashes()?
                .into_iter()
                .filter(|h| {
                    identity_of(&self.entry_dir(h)).is_some_and(|(n, v)| {
                        n == name.as_str()
                            && semver::Version::parse(&v)
                                .is_ok_and(|v| crate::manifest::names_version(version, &v))
                    })
                })
                .collect(),
        };
        if found.is_empty() {
            return Err(StoreError::NotFound(format!(
                "no connector {r} is installed in {}: `spawnd connector list` shows what is",
                self.root.display()
            )));
        }
        Ok(found)
    }

    /// Removes the entries `r` names, and their pins; returns their hashes.
    pub fn remove(&self, r: &ConnectorRef) -> Result<Vec<Sha256Digest>, StoreError> {
        let _lock = self.lock()?;
        let found = self.find(r)?;
        for hash in &found {
            let dir = self.entry_dir(hash);
            // Out of sight at once, then removed: a reader sees the whole
            // entry or none of it.
            let doomed = self.root.join(format!(".remove-{}", hex::encode(hash.0)));
            std::fs::rename(&dir, &doomed).map_err(|e| io(&dir, e))?;
            files::remove_tree(&doomed).map_err(|e| io(&doomed, e))?;
            match std::fs::remove_file(self.pins_path(hash)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io(&self.pins_path(hash), e))
                }
                _ => {}
            }
        }
        files::sync_dir(&self.root).map_err(|e| io(&self.root, e))?;
        Ok(found)
    }

    /// The operator pins of the entry `hash`: the loader the gate calls.
    pub fn pins(&self, hash: &Sha256Digest) -> Result<OperatorPins, StoreError> {
        Ok(pins::load(&self.pins_path(hash), hash)?)
    }

    /// Writes the operator pins of the entry `hash`.
    pub fn write_pins(&self, entry: &Entry, pins: &OperatorPins) -> Result<PathBuf, StoreError> {
        let _lock = self.lock()?;
        let path = self.pins_path(&entry.hash());
        let text = pins.render(
            &entry.manifest.connector.name,
            &entry.manifest.connector.version,
        );
        files::write_atomically(&path, text.as_bytes(), 0o644).map_err(|e| io(&path, e))?;
        Ok(path)
    }

    /// Creates the store's directory if needed; refuses one others could
    /// change.
    fn ensure_root(&self) -> Result<(), StoreError> {
        files::create_dirs(&self.root).map_err(|e| io(&self.root, e))?;
        files::check_owner_and_mode(&self.root).map_err(StoreError::Unsafe)
    }

    /// The store's lock, held while entries are placed or removed.
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, StoreError> {
        self.ensure_root()?;
        let path = self.root.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io(&path, std::io::Error::from(errno)))
    }

    /// Copies the connector's stream files and signature into a new
    /// temporary directory of the store.
    fn stage(&self, source: &Path) -> Result<tempfile::TempDir, InstallError> {
        let unreadable =
            |e: ContentError| InstallRefusal::new(Refusal::ConnectorUnreadable, e.to_string());
        // What the source holds, named and checked before anything is copied.
        super::content::check_connector_dir(source).map_err(unreadable)?;
        let names = super::content::shipped_names(source).map_err(unreadable)?;
        let staged = tempfile::Builder::new()
            .prefix(".install-")
            .tempdir_in(&self.root)
            .map_err(|e| io(&self.root, e))?;
        let copied = copy_stream(source, staged.path(), &names);
        if let Err(e) = copied {
            remove_staged(staged);
            return Err(e);
        }
        Ok(staged)
    }

    /// Refuses a second content hash for a name and version the store holds.
    fn check_version_free(
        &self,
        manifest: &Manifest,
        hash: &Sha256Digest,
    ) -> Result<(), InstallError> {
        let c = &manifest.connector;
        // One content per release: another build of the same version is
        // the same release re-tagged.
        let mut release = c.version.clone();
        release.build = semver::BuildMetadata::EMPTY;
        let r = ConnectorRef::NameVersion(c.name.clone(), release);
        let others: Vec<String> = match self.find(&r) {
            Ok(found) => found
                .iter()
                .filter(|h| *h != hash)
                .map(|h| h.to_string())
                .collect(),
            Err(StoreError::NotFound(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        if others.is_empty() {
            return Ok(());
        }
        Err(InstallRefusal::new(
            Refusal::VersionConflict,
            format!(
                "{}@{} is installed with content {}, and this one's is {hash}: one release has one content (was the release re-tagged?); if this one is right, `spawnd connector remove {}` first",
                c.name,
                c.version,
                others.join(", "),
                others[0]
            ),
        )
        .into())
    }
}

/// The checks an install makes, in order, on the staged copy.
fn check_staged(
    staged: &Path,
    request: &InstallRequest<'_>,
) -> Result<(ConnectorContent, Manifest, SignatureStatus), InstallError> {
    let content = hash_connector(staged)
        .map_err(|e| InstallRefusal::new(Refusal::ConnectorUnreadable, e.to_string()))?;
    check_identity(&content.manifest_text)?;
    let source = request.source.join(MANIFEST_FILE).display().to_string();
    let manifest =
        parse_manifest(&source, &content.manifest_text, request.options).map_err(|e| {
            InstallRefusal::new(
                Refusal::ManifestInvalid,
                format!("{e}\n  (`spawnd manifest lint {source}` shows every problem)"),
            )
        })?;
    check_expected_name(&manifest, request.expect_name.as_ref())?;
    check_expected_hash(&content, request.expect_hash.as_ref())?;
    check_provenance(&manifest, &content)?;
    let file = read_signature(staged).map_err(|e| {
        InstallRefusal::new(Refusal::SignatureInvalid, format!("{SIGNATURE_FILE} {e}"))
    })?;
    let authority = Authority::of(&manifest.connector.name);
    let trusted = request
        .keyring
        .keys_for(&authority)
        .map_err(StoreError::from)?;
    let status = signature::check(
        file.as_deref(),
        &manifest.connector.name,
        &manifest.connector.version,
        &content,
        &trusted,
    );
    check_signature(&status, &manifest)?;
    Ok((content, manifest, status))
}

/// The name's scheme and the version, checked before the rest of the
/// manifest, so each gets its own refusal.
fn check_identity(text: &str) -> Result<(), InstallRefusal> {
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    let connector = table.get("connector").and_then(|c| c.as_table());
    if let Some(name) = connector
        .and_then(|c| c.get("name"))
        .and_then(|n| n.as_str())
    {
        let scheme = name.split_once("://").map_or(name, |(s, _)| s);
        if Fqn::parse(name).is_err() && name.contains("://") && !known_scheme(scheme) {
            return Err(InstallRefusal::new(
                Refusal::SchemeUnknown,
                format!(
                    "the manifest's name `{}` has the scheme `{}`, which spawnd does not know: a connector is published as github://OWNER/REPO, gitlab://OWNER/REPO, or written by the operator as local://OWNER/NAME",
                    crate::printable::printable(name),
                    crate::printable::printable(scheme)
                ),
            ));
        }
    }
    if let Some(version) = connector
        .and_then(|c| c.get("version"))
        .and_then(|v| v.as_str())
    {
        parse_strict_version(version).map_err(|why| {
            InstallRefusal::new(
                Refusal::VersionNotStrict,
                format!("the manifest's version: {why}"),
            )
        })?;
    }
    Ok(())
}

fn check_expected_name(
    manifest: &Manifest,
    expected: Option<&(Fqn, Option<semver::Version>)>,
) -> Result<(), InstallRefusal> {
    let Some((name, version)) = expected else {
        return Ok(());
    };
    let c = &manifest.connector;
    if &c.name != name {
        return Err(InstallRefusal::new(
            Refusal::NameMismatch,
            format!(
                "--name is {name}, but the manifest names {}: a connector is installed under the name its publisher gave it; check where it came from",
                c.name
            ),
        ));
    }
    match version {
        Some(v) if v != &c.version => Err(InstallRefusal::new(
            Refusal::NameMismatch,
            format!(
                "--name asks for version {v}, but the manifest is version {}",
                c.version
            ),
        )),
        _ => Ok(()),
    }
}

fn check_expected_hash(
    content: &ConnectorContent,
    expected: Option<&Sha256Digest>,
) -> Result<(), InstallRefusal> {
    match expected {
        Some(h) if *h != content.content => Err(InstallRefusal::new(
            Refusal::HashMismatch,
            format!(
                "--hash is {h}, but the connector's content hash is {}: these are not the bytes that were pinned; check where they came from",
                content.content
            ),
        )),
        _ => Ok(()),
    }
}

/// `provenance_hash` against the shipped bytes: required when anything is
/// shipped (it fixes where the shipped part ends), and equal.
pub(crate) fn check_provenance(
    manifest: &Manifest,
    content: &ConnectorContent,
) -> Result<(), InstallRefusal> {
    compare_provenance(manifest.connector.provenance_hash, content.shipped)
}

/// For `spawnd run --manifest F` (docs/provenance.md): when the manifest
/// states a `provenance_hash`, what `dir` (F's directory) ships must hash to
/// it, with install's refusals (`provenance_mismatch`, also when nothing is
/// shipped; `connector_unreadable` when `bin/` cannot be hashed). A
/// manifest without one is not checked: only install requires it.
pub(crate) fn check_provenance_beside(
    manifest: &Manifest,
    dir: &Path,
) -> Result<(), InstallRefusal> {
    if manifest.connector.provenance_hash.is_none() {
        return Ok(());
    }
    let shipped = hash_shipped_part(dir).map_err(|e| {
        InstallRefusal::new(
            Refusal::ConnectorUnreadable,
            format!("{e} (the manifest states a provenance_hash, so the files beside it in {SHIPPED_DIR}/ are checked before it runs)"),
        )
    })?;
    compare_provenance(manifest.connector.provenance_hash, shipped)
}

fn compare_provenance(
    declared: Option<Sha256Digest>,
    shipped: Option<Sha256Digest>,
) -> Result<(), InstallRefusal> {
    match (declared, shipped) {
        (None, None) => Ok(()),
        (Some(declared), Some(shipped)) if declared == shipped => Ok(()),
        (None, Some(shipped)) => Err(InstallRefusal::new(
            Refusal::ProvenanceMissing,
            format!(
                "the connector ships files in {SHIPPED_DIR}/, and its manifest has no provenance_hash: the publisher adds `provenance_hash = \"{shipped}\"` to [connector] (`spawnd connector hash DIR` prints it)"
            ),
        )),
        (Some(declared), Some(shipped)) => Err(InstallRefusal::new(
            Refusal::ProvenanceMismatch,
            format!(
                "the manifest's provenance_hash is {declared}, but the shipped files hash to {shipped}: the program is not the one the manifest was published with"
            ),
        )),
        (Some(declared), None) => Err(InstallRefusal::new(
            Refusal::ProvenanceMismatch,
            format!(
                "the manifest's provenance_hash is {declared}, but nothing is shipped in {SHIPPED_DIR}/ to check it against: ship the program in {SHIPPED_DIR}/, or remove provenance_hash"
            ),
        )),
    }
}

fn check_signature(status: &SignatureStatus, manifest: &Manifest) -> Result<(), InstallRefusal> {
    match status {
        SignatureStatus::Unsigned | SignatureStatus::Signed { .. } => Ok(()),
        SignatureStatus::Untrusted { authority, key_id } => Err(InstallRefusal::new(
            Refusal::SignatureUntrusted,
            format!(
                "{} is signed by key {key_id}, which the keyring does not trust for {authority}: if that key is the publisher's (its keys/publisher.pub), `spawnd keyring trust {authority} --key publisher.pub`",
                manifest.connector.name
            ),
        )),
        SignatureStatus::Invalid { why } => Err(InstallRefusal::new(
            Refusal::SignatureInvalid,
            format!("{}'s signature does not hold: {why}", manifest.connector.name),
        )),
    }
}

/// The stream's files and the signature, copied from `source` to `to`.
fn copy_stream(source: &Path, to: &Path, names: &[String]) -> Result<(), InstallError> {
    if !names.is_empty() {
        let bin = to.join(SHIPPED_DIR);
        std::fs::create_dir(&bin).map_err(|e| io(&bin, e))?;
    }
    for name in names {
        let rel = format!("{SHIPPED_DIR}/{name}");
        copy_file(&source.join(&rel), &to.join(&rel))?;
    }
    copy_file(&source.join(MANIFEST_FILE), &to.join(MANIFEST_FILE))?;
    let signature = source.join(SIGNATURE_FILE);
    if std::fs::symlink_metadata(&signature).is_ok() {
        copy_file(&signature, &to.join(SIGNATURE_FILE))?;
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> Result<(), InstallError> {
    let mut src = files::open_regular(from).map_err(|e| {
        InstallRefusal::new(
            Refusal::ConnectorUnreadable,
            format!("cannot read {}: {e}", from.display()),
        )
    })?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| io(to, e))?;
    std::io::copy(&mut src, &mut dst)
        .and_then(|_| dst.flush())
        .and_then(|()| dst.sync_all())
        .map_err(|e| io(to, e))?;
    Ok(())
}

/// An entry's final modes: directories 0555, shipped files 0555, the
/// rest 0444; each directory synced.
fn make_read_only(dir: &Path) -> std::io::Result<()> {
    let bin = dir.join(SHIPPED_DIR);
    if bin.exists() {
        for entry in std::fs::read_dir(&bin)? {
            std::fs::set_permissions(entry?.path(), std::fs::Permissions::from_mode(0o555))?;
        }
        files::sync_dir(&bin)?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o555))?;
    }
    for name in [MANIFEST_FILE, SIGNATURE_FILE] {
        let path = dir.join(name);
        if path.exists() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))?;
        }
    }
    files::sync_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555))
}

/// An entry holds the stream's files and the signature only, and it, its
/// `bin/` and every file are changeable by their owner (root or this
/// user) alone.
fn check_entry_safe(dir: &Path) -> Result<(), StoreError> {
    let bin = dir.join(SHIPPED_DIR);
    let mut paths = vec![dir.to_path_buf()];
    for sub in [dir, bin.as_path()] {
        let entries = match std::fs::read_dir(sub) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && sub == bin => continue,
            Err(e) => return Err(io(sub, e)),
        };
        for e in entries {
            let e = e.map_err(|e| io(sub, e))?;
            let name = e.file_name();
            let expected = sub == bin
                || [MANIFEST_FILE, SHIPPED_DIR, SIGNATURE_FILE]
                    .iter()
                    .any(|n| name == *n);
            if !expected {
                return Err(StoreError::Unsafe(format!(
                    "{} holds {}, which no install puts there: remove the entry and install the connector again",
                    dir.display(),
                    e.path().display()
                )));
            }
            paths.push(e.path());
        }
    }
    for p in paths {
        files::check_owner_and_mode(&p).map_err(StoreError::Unsafe)?;
    }
    Ok(())
}

/// The signature file's bytes, if the directory has one.
fn read_signature(dir: &Path) -> Result<Option<Vec<u8>>, String> {
    let path = dir.join(SIGNATURE_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    files::read_small(&path, MAX_SIGNATURE_BYTES)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// An entry's name and version as its manifest writes them (without a
/// full load: for finding entries by name).
fn identity_of(dir: &Path) -> Option<(String, String)> {
    let bytes =
        files::read_small(&dir.join(MANIFEST_FILE), super::content::MAX_MANIFEST_BYTES).ok()?;
    let table: toml::Table = std::str::from_utf8(&bytes).ok()?.parse().ok()?;
    let c = table.get("connector")?.as_table()?;
    Some((
        c.get("name")?.as_str()?.to_string(),
        semver::Version::parse(c.get("version")?.as_str()?)
            .ok()?
            .to_string(),
    ))
}

/// Removes a staged directory that will not be placed.
fn remove_staged(staged: tempfile::TempDir) {
    let path = staged.keep();
    let _ = files::remove_tree(&path);
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        cause: e.to_string(),
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
