//! Connector provenance through the built binary (docs/provenance.md), as
//! root and as the unprivileged user 65534 wherever it applies: the content
//! hash equals the documented shell recipe; publisher keys made by spawnd
//! or by openssl sign connectors that install once the keyring trusts the
//! key for the name's authority; every refusal is named, exits with its
//! code and installs nothing; unsigned connectors install and are listed
//! as unsigned; a publisher key rotates; versions coexist and are removed
//! one at a time; the operator's pins leave the published bytes alone;
//! an entry edited after install is caught with both hashes named; a
//! program the connector ships, named at `{connector}`, runs from its store
//! entry; `run --manifest` refuses files beside the manifest that do not
//! match its provenance_hash.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

/// Who runs spawnd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum As {
    Root,
    Nobody,
}

impl As {
    fn uid(self) -> u32 {
        match self {
            As::Root => 0,
            As::Nobody => 65534,
        }
    }
}

const BOTH: [As; 2] = [As::Root, As::Nobody];

/// A world-readable scratch directory holding a copy of spawnd (copied by
/// another process: a copy this one wrote would be open for writing while
/// tests fork, and executing it would fail with ETXTBSY).
struct World {
    dir: PathBuf,
    spawnd: PathBuf,
}

fn world() -> &'static World {
    static WORLD: std::sync::OnceLock<World> = std::sync::OnceLock::new();
    WORLD.get_or_init(|| {
        remove_stale_worlds();
        let dir = tempfile::Builder::new()
            .prefix(&format!("spawnd-provenance-{}-", std::process::id()))
            .tempdir_in("/tmp")
            .unwrap()
            .keep();
        chmod(&dir, 0o755);
        let spawnd = dir.join("spawnd");
        let copied = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_spawnd"))
            .arg(&spawnd)
            .status()
            .unwrap();
        assert!(copied.success());
        chmod(&spawnd, 0o755);
        World { dir, spawnd }
    })
}

/// Removes the worlds of earlier test processes that are gone.
fn remove_stale_worlds() {
    for entry in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("spawnd-provenance-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("rm").arg("-rf").arg(entry.path()).status();
        }
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Gives `path` and everything under it to `uid`.
fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

fn at() -> char {
    char::from(64)
}

/// `NAME@VERSION`.
fn nv(name: &str, version: &str) -> String {
    format!("{name}{}{version}", at())
}

/// One test's own directory, store, keyring and config, owned by `who`.
struct Site {
    who: As,
    dir: PathBuf,
    config: PathBuf,
}

impl Site {
    fn new(name: &str, who: As) -> Site {
        let dir = world().dir.join(format!("{name}-{}", who.uid()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o755);
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[audit]\npath = \"{0}/audit/audit.jsonl\"\n\n[connectors]\nstore = \"{0}/store\"\nkeyring = \"{0}/keyring\"\n",
                dir.display()
            ),
        )
        .unwrap();
        chown_tree(&dir, who.uid());
        Site { who, dir, config }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// spawnd as this site's user, with its config.
    fn spawnd(&self, args: &[&str]) -> Output {
        let mut c = match self.who {
            As::Root => Command::new(&world().spawnd),
            As::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(&world().spawnd);
                c
            }
        };
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", "/nonexistent")
            .env("SPAWND_CONFIG", &self.config)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    /// `spawnd --json ARGS`, its envelope and exit code.
    fn json(&self, args: &[&str]) -> (Value, Option<i32>) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.spawnd(&all);
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, out.status.code())
    }

    /// `spawnd ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.spawnd(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} as {:?}: {}{}",
            self.who,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A connector directory `rel` for `name` at `version`; with `program`,
    /// it ships `bin/tool` with those bytes and states its provenance_hash.
    fn connector(&self, rel: &str, name: &str, version: &str, program: Option<&[u8]>) -> PathBuf {
        let dir = self.path(rel);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = format!("[connector]\nname = \"{name}\"\nversion = \"{version}\"\n");
        if let Some(bytes) = program {
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            std::fs::write(dir.join("bin/tool"), bytes).unwrap();
            chmod(&dir.join("bin/tool"), 0o755);
            manifest.push_str(&format!("provenance_hash = \"{}\"\n", sha256_of(bytes)));
        }
        manifest.push_str(
            "\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/git\" }]\n\n[capabilities.spawn.operations.status]\nargv = \"git status\"\n",
        );
        std::fs::write(dir.join("manifest.toml"), manifest).unwrap();
        chown_tree(&dir, self.who.uid());
        dir
    }

    /// A publisher key pair made by `spawnd connector keygen`: the private
    /// key's path (the public key is beside it, `.pub`).
    fn keygen(&self, name: &str) -> PathBuf {
        let prefix = self.path(name);
        self.ok(&["connector", "keygen", "--output", prefix.to_str().unwrap()]);
        prefix
    }

    fn trust(&self, authority: &str, public: &Path) -> String {
        self.ok(&[
            "keyring",
            "trust",
            authority,
            "--key",
            public.to_str().unwrap(),
        ])
    }

    fn sign(&self, dir: &Path, key: &Path) {
        self.ok(&[
            "connector",
            "sign",
            dir.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ]);
    }

    /// `connector list --json`'s entries.
    /// `connector list --json`'s entries; it exits 1 exactly when the
    /// store is not servable.
    fn listed(&self) -> Vec<Value> {
        let (v, code) = self.json(&["connector", "list"]);
        let servable = v["data"]["servable"].as_bool().expect("servable");
        assert_eq!(code, Some(if servable { 0 } else { 1 }), "{v}");
        v["data"]["connectors"].as_array().unwrap().clone()
    }

    /// Installing `dir` (with `extra` flags) is refused for `reason` with
    /// `exit`, and nothing is installed; returns the message.
    fn refused(&self, dir: &Path, extra: &[&str], reason: &str, exit: i32) -> String {
        let before = self.listed().len();
        let mut args = vec!["connector", "install", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (v, code) = self.json(&args);
        assert_eq!(code, Some(exit), "{reason} as {:?}: {v}", self.who);
        assert_eq!(v["error"]["details"]["reason"], reason, "{v}");
        let message = v["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.starts_with(&format!("refused ({reason}): ")),
            "{message}"
        );
        assert_eq!(
            self.listed().len(),
            before,
            "{reason}: something was installed"
        );
        // The text form names the reason too, on stderr.
        let out = self.spawnd(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("refused ({reason})")), "{stderr}");
        message
    }
}

fn sha256_of(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    format!("sha256:{}", &String::from_utf8(out.stdout).unwrap()[..64])
}

/// The documented recipe, run by a shell in `dir`.
fn recipe(dir: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg("if [ -d bin ]; then LC_ALL=C cat bin/* manifest.toml; else cat manifest.toml; fi | sha256sum")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    format!("sha256:{}", &String::from_utf8(out.stdout).unwrap()[..64])
}

#[test]
fn connector_hash_prints_what_the_shell_recipe_computes() {
    for who in BOTH {
        let s = Site::new("hash", who);
        let plain = s.connector("plain", "github://acme/plain", "1.0.0", None);
        assert_eq!(
            s.ok(&["connector", "hash", plain.to_str().unwrap()]).trim(),
            recipe(&plain)
        );
        let shipped = s.connector(
            "shipped",
            "github://acme/tool",
            "1.0.0",
            Some(b"#!/bin/sh\necho one\n"),
        );
        // A second file, named to sort first in byte order.
        std::fs::write(shipped.join("bin/Aux"), "data\n").unwrap();
        let (v, code) = s.json(&["connector", "hash", shipped.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{v}");
        assert_eq!(v["data"]["content"], recipe(&shipped), "{v}");
        let files: Vec<&str> = v["data"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert_eq!(files, ["bin/Aux", "bin/tool", "manifest.toml"]);
        let (v, code) = s.json(&["connector", "hash", s.path("nowhere").to_str().unwrap()]);
        assert_eq!(code, Some(6), "{v}");
    }
}

#[test]
fn a_signed_connector_installs_once_the_keyring_trusts_its_publishers_key() {
    for who in BOTH {
        let s = Site::new("signed", who);
        let dir = s.connector(
            "c",
            "github://acme/tool",
            "1.2.3",
            Some(b"#!/bin/sh\necho hi\n"),
        );
        let key = s.keygen("publisher");
        let meta = std::fs::metadata(&key).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        s.sign(&dir, &key);
        let message = s.refused(&dir, &[], "signature_untrusted", 3);
        assert!(
            message.contains("spawnd keyring trust github://acme"),
            "{message}"
        );
        // A key trusted for another authority does not count.
        s.trust("github://other", &s.path("publisher.pub"));
        s.refused(&dir, &[], "signature_untrusted", 3);
        s.trust("github://acme", &s.path("publisher.pub"));
        let hash = recipe(&dir);
        let (v, code) = s.json(&[
            "connector",
            "install",
            dir.to_str().unwrap(),
            "--hash",
            &hash,
            "--name",
            &nv("github://acme/tool", "1.2.3"),
        ]);
        assert_eq!(code, Some(0), "{v}");
        let listed = s.listed();
        assert_eq!(listed.len(), 1);
        let e = &listed[0];
        assert_eq!(
            (e["name"].as_str(), e["version"].as_str()),
            (Some("github://acme/tool"), Some("1.2.3"))
        );
        assert_eq!(e["hash"], hash.as_str());
        assert_eq!(e["signature"]["status"], "signed", "{e}");
        assert_eq!(e["signature"]["authority"], "github://acme");
        let keys = s.json(&["keyring", "list"]).0;
        let acme_key = keys["data"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["authority"] == "github://acme")
            .unwrap()
            .clone();
        assert_eq!(e["signature"]["key_id"], acme_key["key_id"]);
        // The entry: the stream and the signature, read-only, under the hash.
        let entry = s.path(&format!("store/sha256-{}", &hash[7..]));
        assert_eq!(e["dir"], entry.to_str().unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&entry), 0o555);
        assert_eq!(mode(&entry.join("manifest.toml")), 0o444);
        assert!(entry.join("signature.json").exists());
        assert_eq!(recipe(&entry), hash);
        let text = s.ok(&["connector", "list"]);
        assert!(
            text.contains(&nv("github://acme/tool", "1.2.3"))
                && text.contains("signed by github://acme key"),
            "{text}"
        );
    }
}

#[test]
fn keys_made_by_openssl_are_trusted_and_sign_and_spawnds_keys_read_in_openssl() {
    let s = Site::new("openssl", As::Root);
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&s.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", "ossl.pem"]);
    openssl(&["pkey", "-in", "ossl.pem", "-pubout", "-out", "ossl.pub"]);
    let der = openssl(&["pkey", "-in", "ossl.pem", "-pubout", "-outform", "DER"]);
    let raw = Command::new("base64")
        .arg("-w0")
        .stdin(
            std::fs::File::open({
                let p = s.path("raw.bin");
                std::fs::write(&p, &der[der.len() - 32..]).unwrap();
                p
            })
            .unwrap(),
        )
        .output()
        .unwrap()
        .stdout;
    std::fs::write(s.path("raw.b64"), raw).unwrap();
    let added = s.trust("github://acme", &s.path("ossl.pub"));
    assert!(added.starts_with("trusted key "), "{added}");
    // The same key as raw base64: the same id, trusted already.
    let again = s.trust("github://acme", &s.path("raw.b64"));
    assert!(
        again.contains("trusted for github://acme already"),
        "{again}"
    );
    let (v, _) = s.json(&[
        "keyring",
        "trust",
        "gitlab://team",
        "--key",
        s.path("raw.b64").to_str().unwrap(),
    ]);
    assert_eq!(v["data"]["added"], true, "{v}");
    // An openssl private key signs; the connector installs.
    let dir = s.connector("c", "github://acme/tool", "1.0.0", None);
    s.sign(&dir, &s.path("ossl.pem"));
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    assert_eq!(s.listed()[0]["signature"]["status"], "signed");
    // spawnd's key pair reads in openssl: the same public key, byte for byte.
    let key = s.keygen("spawnd-key");
    let public = openssl(&["pkey", "-in", key.to_str().unwrap(), "-pubout"]);
    assert_eq!(public, std::fs::read(s.path("spawnd-key.pub")).unwrap());
    // A private key is never taken for a publisher's public key.
    let (v, code) = s.json(&["keyring", "trust", "github://acme", "--key", "ossl.pem"]);
    assert_eq!(code, Some(4), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("private key"),
        "{v}"
    );
    // keygen never overwrites.
    let out = s.spawnd(&["connector", "keygen", "--output", key.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn each_refusal_is_named_exits_with_its_code_and_installs_nothing() {
    for who in BOTH {
        let s = Site::new("refusals", who);
        let key = s.keygen("publisher");
        s.trust("github://acme", &s.path("publisher.pub"));

        // A signature edited after signing, and a manifest edited after signing.
        let dir = s.connector("sig", "github://acme/tool", "1.0.0", Some(b"prog"));
        s.sign(&dir, &key);
        let signature = std::fs::read_to_string(dir.join("signature.json")).unwrap();
        let sig_start = signature.find("\"ed25519:").unwrap() + 9;
        let flipped = if &signature[sig_start..sig_start + 1] == "0" {
            "1"
        } else {
            "0"
        };
        let tampered = format!(
            "{}{flipped}{}",
            &signature[..sig_start],
            &signature[sig_start + 1..]
        );
        std::fs::write(dir.join("signature.json"), &tampered).unwrap();
        let m = s.refused(&dir, &[], "signature_invalid", 3);
        assert!(m.contains("does not verify"), "{m}");
        std::fs::write(dir.join("signature.json"), &signature).unwrap();
        let signed_hash = recipe(&dir);
        let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
        std::fs::write(
            dir.join("manifest.toml"),
            manifest.replace("git status", "git status --short"),
        )
        .unwrap();
        let m = s.refused(&dir, &[], "signature_invalid", 3);
        assert!(
            m.contains(&signed_hash) && m.contains(&recipe(&dir)) && m.contains("manifest.toml"),
            "{m}"
        );

        // An untrusted key.
        let stranger = s.keygen("stranger");
        let dir = s.connector("by-stranger", "github://acme/tool", "1.0.0", None);
        s.sign(&dir, &stranger);
        s.refused(&dir, &[], "signature_untrusted", 3);

        // --name and --hash that the connector does not have.
        let dir = s.connector("plain", "github://acme/tool", "1.0.0", None);
        let m = s.refused(&dir, &["--name", "github://evil/tool"], "name_mismatch", 4);
        assert!(
            m.contains("github://evil/tool") && m.contains("github://acme/tool"),
            "{m}"
        );
        s.refused(
            &dir,
            &["--name", &nv("github://acme/tool", "1.0.1")],
            "name_mismatch",
            4,
        );
        let wrong = format!("sha256:{}", "0".repeat(64));
        let m = s.refused(&dir, &["--hash", &wrong], "hash_mismatch", 3);
        assert!(m.contains(&wrong) && m.contains(&recipe(&dir)), "{m}");

        // Versions that are not strict SemVer, an unknown scheme.
        for (version, what) in [
            ("latest", "`latest` is not a version"),
            ("^1.2", "is a version range"),
            ("1.2", "not strict SemVer"),
        ] {
            let dir = s.connector("version", "github://acme/tool", version, None);
            let m = s.refused(&dir, &[], "version_not_strict", 4);
            assert!(m.contains(what), "{version}: {m}");
        }
        let dir = s.connector("scheme", "hub://acme/tool", "1.0.0", None);
        let m = s.refused(&dir, &[], "scheme_unknown", 4);
        assert!(m.contains("`hub`"), "{m}");

        // A shipped program other than the one the manifest recorded.
        let dir = s.connector("prov", "github://acme/tool", "1.0.0", Some(b"prog"));
        std::fs::write(dir.join("bin/tool"), "replaced").unwrap();
        s.refused(&dir, &[], "provenance_mismatch", 3);

        // A release re-tagged with other bytes.
        let one = s.connector("one", "github://acme/tool", "3.0.0", Some(b"one"));
        let two = s.connector("two", "github://acme/tool", "3.0.0", Some(b"two"));
        s.ok(&["connector", "install", one.to_str().unwrap()]);
        let m = s.refused(&two, &[], "version_conflict", 3);
        assert!(
            m.contains(&recipe(&one)) && m.contains(&recipe(&two)),
            "{m}"
        );
        let leftovers: Vec<String> = std::fs::read_dir(s.path("store"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("sha256-") && n != ".lock")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn an_unsigned_connector_installs_and_is_listed_as_unsigned() {
    for who in BOTH {
        let s = Site::new("unsigned", who);
        let dir = s.connector(
            "c",
            "gitlab://team/tool",
            "0.1.0-rc.1",
            Some(b"#!/bin/sh\n"),
        );
        let text = s.ok(&["connector", "install", dir.to_str().unwrap()]);
        assert!(
            text.contains("installed") && text.contains("(unsigned)"),
            "{text}"
        );
        let listed = s.listed();
        assert_eq!(listed[0]["signature"]["status"], "unsigned");
        assert_eq!(listed[0]["hash"], recipe(&dir).as_str());
        // The same bytes again: installed already, nothing changes.
        let again = s.ok(&["connector", "install", dir.to_str().unwrap()]);
        assert!(again.contains("is installed already"), "{again}");
        assert_eq!(s.listed().len(), 1);
    }
}

#[test]
fn a_publisher_rotates_its_key_and_the_operator_follows() {
    for who in BOTH {
        let s = Site::new("rotation", who);
        let old = s.keygen("old");
        s.trust("github://acme", &s.path("old.pub"));
        let v1 = s.connector("v1", "github://acme/tool", "1.0.0", Some(b"one"));
        s.sign(&v1, &old);
        s.ok(&["connector", "install", v1.to_str().unwrap()]);
        // The publisher's new key; the operator trusts it beside the old one.
        let new = s.keygen("new");
        let v2 = s.connector("v2", "github://acme/tool", "2.0.0", Some(b"two"));
        s.sign(&v2, &new);
        s.refused(&v2, &[], "signature_untrusted", 3);
        s.trust("github://acme", &s.path("new.pub"));
        assert_eq!(
            s.json(&["keyring", "list"]).0["data"]["keys"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        s.ok(&["connector", "install", v2.to_str().unwrap()]);
        // Then the old key goes.
        let old_id = s.json(&["connector", "list"]).0["data"]["connectors"][0]["signature"]
            ["key_id"]
            .as_str()
            .unwrap()
            .to_string();
        let removed = s.ok(&["keyring", "remove", "github://acme", "--key", &old_id]);
        assert!(removed.contains(&old_id), "{removed}");
        let listed = s.listed();
        let status = |version: &str| {
            listed.iter().find(|e| e["version"] == version).unwrap()["signature"]["status"].clone()
        };
        assert_eq!(status("1.0.0"), "untrusted");
        assert_eq!(status("2.0.0"), "signed");
        // What the old key signs is no longer installed.
        let v3 = s.connector("v3", "github://acme/tool", "3.0.0", None);
        s.sign(&v3, &old);
        s.refused(&v3, &[], "signature_untrusted", 3);
        let (v, code) = s.json(&["keyring", "remove", "github://acme", "--key", &old_id]);
        assert_eq!(code, Some(6), "{v}");
        let (v, code) = s.json(&["keyring", "trust", "github://acme", "--key", "missing.pub"]);
        assert_eq!(code, Some(6), "{v}");
        let (v, code) = s.json(&["keyring", "trust", "github://acme/tool", "--key", "new.pub"]);
        assert_eq!(code, Some(2), "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("its authority is `github://acme`"),
            "{v}"
        );
    }
}

#[test]
fn two_versions_coexist_and_are_removed_one_at_a_time() {
    for who in BOTH {
        let s = Site::new("versions", who);
        let a = s.connector("a", "github://acme/tool", "1.0.0", Some(b"one"));
        let b = s.connector("b", "github://acme/tool", "1.1.0", Some(b"two"));
        s.ok(&["connector", "install", a.to_str().unwrap()]);
        s.ok(&["connector", "install", b.to_str().unwrap()]);
        let versions: Vec<Value> = s.listed().iter().map(|e| e["version"].clone()).collect();
        assert_eq!(versions, ["1.0.0", "1.1.0"]);
        s.ok(&["connector", "remove", &nv("github://acme/tool", "1.0.0")]);
        let listed = s.listed();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["version"], "1.1.0");
        s.ok(&["connector", "remove", &recipe(&b)]);
        assert!(s.listed().is_empty());
        let (v, code) = s.json(&["connector", "remove", &nv("github://acme/tool", "1.0.0")]);
        assert_eq!(code, Some(6), "{v}");
        let (v, code) = s.json(&["connector", "remove", "github://acme/tool"]);
        assert_eq!(code, Some(2), "{v}");
    }
}

#[test]
fn operator_pins_live_beside_the_entry_and_leave_the_signed_bytes_alone() {
    for who in BOTH {
        let s = Site::new("pins", who);
        let key = s.keygen("publisher");
        s.trust("github://acme", &s.path("publisher.pub"));
        let dir = s.connector("c", "github://acme/tool", "1.0.0", None);
        s.sign(&dir, &key);
        s.ok(&["connector", "install", dir.to_str().unwrap()]);
        let hash = recipe(&dir);
        let target = nv("github://acme/tool", "1.0.0");
        let out = s.spawnd(&["connector", "pin", "--check", &target]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let text = s.ok(&["connector", "pin", &target]);
        assert!(text.contains("pinned /usr/bin/git sha256:"), "{text}");
        let pins = s.path(&format!("store/sha256-{}.pins.toml", &hash[7..]));
        let written = std::fs::read_to_string(&pins).unwrap();
        let git = sha256_of(&std::fs::read("/usr/bin/git").unwrap());
        assert!(
            written.contains(&format!("connector = \"{hash}\"")) && written.contains(&git),
            "{written}"
        );
        // The entry is the publisher's bytes still, its signature holding.
        let entry = s.path(&format!("store/sha256-{}", &hash[7..]));
        assert_eq!(recipe(&entry), hash);
        assert_eq!(
            std::fs::read(entry.join("manifest.toml")).unwrap(),
            std::fs::read(dir.join("manifest.toml")).unwrap()
        );
        let listed = s.listed();
        assert_eq!(listed[0]["signature"]["status"], "signed");
        assert_eq!(listed[0]["operator_pins"], 1);
        s.ok(&["connector", "pin", "--check", &target]);
        // A stale pin is caught.
        std::fs::write(
            &pins,
            written.replace(&git, &format!("sha256:{}", "1".repeat(64))),
        )
        .unwrap();
        let out = s.spawnd(&["connector", "pin", "--check", &target]);
        assert_eq!(out.status.code(), Some(1));
        // --check writes nothing, and says what pinning would do.
        assert!(String::from_utf8_lossy(&out.stdout).contains("would update /usr/bin/git"));
        assert_ne!(std::fs::read_to_string(&pins).unwrap(), written);
        s.ok(&["connector", "remove", &target]);
        assert!(!pins.exists());
    }
}

#[test]
fn an_entry_edited_after_install_is_listed_with_both_hashes() {
    let s = Site::new("tampered", As::Root);
    let dir = s.connector("c", "github://acme/tool", "1.0.0", Some(b"prog"));
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    let hash = recipe(&dir);
    let entry = s.path(&format!("store/sha256-{}", &hash[7..]));
    let manifest = entry.join("manifest.toml");
    chmod(&entry, 0o755);
    chmod(&manifest, 0o644);
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("git status", "git push")).unwrap();
    chmod(&manifest, 0o444);
    chmod(&entry, 0o555);
    let listed = s.listed();
    let problem = listed[0]["problem"].as_str().unwrap();
    assert!(
        problem.contains(&hash) && problem.contains(&recipe(&entry)),
        "{problem}"
    );
    assert!(problem.contains("changed after install"), "{problem}");
    // A script sees it from the exit code: the daemon would not load this.
    let (v, code) = s.json(&["connector", "list"]);
    assert_eq!(
        (code, &v["data"]["servable"]),
        (Some(1), &Value::Bool(false))
    );
    // `manifest explain` of the entry refuses it too, with the same problem.
    let (v, code) = s.json(&["manifest", "explain", &hash]);
    assert_ne!(code, Some(0), "{v}");
}

/// A `spawnd serve` for a site, run by the site's user: its store and
/// keyring, an empty manifests directory, its own socket; killed when
/// dropped.
struct Served {
    child: std::process::Child,
    socket: PathBuf,
    audit: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Site {
    /// An installable connector `rel` for `name` at `version` whose
    /// operation `hello` runs `/usr/bin/echo` with `word`.
    fn echo_connector(&self, rel: &str, name: &str, version: &str, word: &str) -> PathBuf {
        let dir = self.path(rel);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("manifest.toml"),
            format!("[connector]\nname = \"{name}\"\nversion = \"{version}\"\n\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/echo\" }}]\n\n[capabilities.spawn.operations.hello]\nargv = \"echo {word}\"\n"),
        )
        .unwrap();
        chown_tree(&dir, self.who.uid());
        dir
    }

    fn serve(&self) -> Served {
        let manifests = self.path("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let socket = self.path("spawnd.sock");
        let audit = self.path("audit/audit.jsonl");
        let config = self.path("serve.toml");
        std::fs::write(
            &config,
            format!(
                "{}\n[server]\nsocket = \"{}\"\nsocket_mode = \"0666\"\nmanifests = [\"{}\"]\n",
                std::fs::read_to_string(&self.config).unwrap(),
                socket.display(),
                manifests.display()
            ),
        )
        .unwrap();
        let mut command = match self.who {
            As::Root => Command::new(&world().spawnd),
            As::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(&world().spawnd);
                c
            }
        };
        let child = command
            .args(["--config", config.to_str().unwrap(), "serve"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", "/nonexistent")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(start.elapsed().as_secs() < 30, "the daemon did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Served {
            child,
            socket,
            audit,
        }
    }
}

impl Served {
    /// One JSON-RPC call on a new connection: the answer.
    fn call(&self, method: &str, params: Value) -> Value {
        use std::io::{BufRead, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        stream.write_all(format!("{request}\n").as_bytes()).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut line)
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// `spawn_op` of `op` with `pins` merged in, waited for: its stdout, or
    /// the error.
    fn run(&self, connector: &str, op: &str, pins: Value) -> Result<String, Value> {
        use std::io::{BufRead, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
        let mut ask = |id: u32, method: &str, params: Value| -> Value {
            let request =
                serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            stream.write_all(format!("{request}\n").as_bytes()).unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            serde_json::from_str(&line).unwrap()
        };
        let mut params = serde_json::json!({"connector": connector, "op": op, "args": {}});
        for (k, v) in pins.as_object().unwrap() {
            params[k] = v.clone();
        }
        let started = ask(1, "spawn_op", params);
        if let Some(e) = started.get("error") {
            return Err(e.clone());
        }
        let handle = started["result"]["handle"].clone();
        let status = ask(
            2,
            "spawn_status",
            serde_json::json!({"handle": handle, "wait_ms": 20000}),
        );
        assert_eq!(status["result"]["exit_code"], 0, "{status}");
        Ok(status["result"]["stdout"]["text"]
            .as_str()
            .unwrap()
            .to_string())
    }

    /// The audit records that hold `needle`.
    fn records_with(&self, needle: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Each installed version's content hash, by version.
fn installed_hashes(s: &Site) -> std::collections::BTreeMap<String, String> {
    s.listed()
        .iter()
        .map(|e| {
            (
                e["version"].as_str().unwrap().to_string(),
                e["hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_daemon_serves_installed_connectors_pinned_by_version_and_hash() {
    for who in BOTH {
        serving_installed_connectors_pinned_by_version_and_hash_as(who);
    }
}

fn serving_installed_connectors_pinned_by_version_and_hash_as(who: As) {
    let s = Site::new("serve-pins", who);
    let name = "github://acme/hello";
    let key = s.keygen("acme");
    s.trust("github://acme", &s.path("acme.pub"));
    for (version, word) in [("1.0.0", "one"), ("2.0.0", "two")] {
        let dir = s.echo_connector(&format!("hello-{version}"), name, version, word);
        s.sign(&dir, &key);
        s.ok(&["connector", "install", dir.to_str().unwrap()]);
    }
    let hashes = installed_hashes(&s);
    // `spawnd connectors` shows each installed version with its hash.
    let (v, code) = s.json(&["connectors"]);
    assert_eq!(code, Some(0), "{v}");
    let listed = &v["data"]["connectors"][format!("{name}@2.0.0")];
    assert_eq!(
        (&listed["hash"], &listed["signature"], &listed["status"]),
        (
            &json!(hashes["2.0.0"]),
            &json!("signed"),
            &json!("connected")
        ),
        "{v}"
    );
    // `manifest explain` names an installed connector's hash and signer.
    let explained = s.ok(&["manifest", "explain", &nv(name, "1.0.0")]);
    assert!(
        explained.contains(&hashes["1.0.0"]) && explained.contains("signed by key"),
        "{explained}"
    );
    let daemon = s.serve();
    // Two versions served: an unpinned request must pin one.
    let e = daemon
        .run(name, "hello", serde_json::json!({}))
        .unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_version_required", "{e}");
    // Each version by its pin, and by its hash.
    assert_eq!(
        daemon.run(name, "hello", serde_json::json!({"version": "1.0.0"})),
        Ok("one\n".to_string())
    );
    assert_eq!(
        daemon.run(name, "hello", serde_json::json!({"hash": hashes["2.0.0"]})),
        Ok("two\n".to_string())
    );
    // A pin no served version has: refused, the served ones named.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let e = daemon
        .run(
            name,
            "hello",
            serde_json::json!({"version": "1.0.0", "hash": wrong}),
        )
        .unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_pin_mismatch", "{e}");
    let granted = e["data"]["granted"].to_string();
    assert!(
        granted.contains(&hashes["1.0.0"]) && granted.contains(&hashes["2.0.0"]),
        "{e}"
    );
    let e = daemon
        .run(name, "hello", serde_json::json!({"version": "3.0.0"}))
        .unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_pin_mismatch", "{e}");
    // connectors_status names each version, its hash and signer.
    let status = daemon.call("connectors_status", serde_json::json!({}));
    let one = &status["result"]["connectors"][format!("{name}@1.0.0")];
    assert_eq!(one["hash"], hashes["1.0.0"], "{status}");
    assert_eq!(one["signature"], "signed", "{status}");
    assert!(one["signer"].as_str().is_some(), "{status}");
    // Every decision and denial names (name, version, hash, signer).
    let allowed = daemon.records_with("\"decision\":\"allowed\"");
    assert_eq!(allowed.len(), 2);
    for r in &allowed {
        let version = r["connector_version"].as_str().unwrap();
        assert_eq!(r["connector_hash"], hashes[version], "{r}");
        assert_eq!(r["connector_signature"], "signed", "{r}");
        assert_eq!(r["connector_signer"], one["signer"], "{r}");
    }
    let denied = daemon.records_with("connector_pin_mismatch");
    assert!(!denied.is_empty());
    if who == As::Root {
        // A peer the access rules refuse learns nothing of the versions, and
        // its refusal record names none: none was chosen.
        let ask = format!(
            "import socket, json\ns = socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.sendall(json.dumps({{'jsonrpc': '2.0', 'id': 1, 'method': 'spawn_op', 'params': {{'connector': {:?}, 'op': 'hello', 'args': {{}}}}}}).encode() + b'\\n')\nprint(s.makefile().readline())",
            daemon.socket.display().to_string(),
            name
        );
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                &ask,
            ])
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            answer["error"]["data"]["reason"], "caller_not_allowed",
            "{answer}"
        );
        assert!(!answer.to_string().contains(&hashes["1.0.0"]), "{answer}");
        let refused = daemon.records_with("caller_not_allowed");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(
            (
                &refused[0]["connector_version"],
                &refused[0]["connector_hash"]
            ),
            (&Value::Null, &Value::Null),
            "{:?}",
            refused[0]
        );
    }
    assert!(daemon.records_with("connector_version_required").len() == 1);
    // A version installed while the daemon runs is served after a reload,
    // and the reload record names it.
    let dir = s.echo_connector("hello-3.0.0", name, "3.0.0", "three");
    s.sign(&dir, &key);
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let start = std::time::Instant::now();
    while daemon.records_with("\"event\":\"reload\"").is_empty() {
        assert!(start.elapsed().as_secs() < 20, "no reload record");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let reload = &daemon.records_with("\"event\":\"reload\"")[0];
    assert_eq!(reload["added"][0]["version"], "3.0.0", "{reload}");
    assert_eq!(
        daemon.run(name, "hello", serde_json::json!({"version": "3.0.0"})),
        Ok("three\n".to_string())
    );
}

#[test]
fn a_stored_manifest_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes() {
    for who in BOTH {
        a_stored_manifest_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes_as(who);
    }
}

fn a_stored_manifest_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes_as(who: As) {
    let s = Site::new("serve-tamper", who);
    let name = "github://acme/tampered";
    let dir = s.echo_connector("tampered", name, "1.0.0", "fine");
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    let installed = installed_hashes(&s)["1.0.0"].clone();
    let daemon = s.serve();
    assert_eq!(
        daemon.run(name, "hello", serde_json::json!({})),
        Ok("fine\n".to_string())
    );
    // Root widens the stored manifest in place (an extra operation).
    let entry = s.path(&format!("store/sha256-{}", &installed["sha256:".len()..]));
    let manifest = entry.join("manifest.toml");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str("\n[capabilities.spawn.operations.more]\nargv = \"echo more\"\n");
    chmod(&manifest, 0o644);
    std::fs::write(&manifest, &text).unwrap();
    let found = recipe(&entry);
    let e = daemon
        .run(name, "hello", serde_json::json!({}))
        .unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_hash_mismatch", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains(&installed) && message.contains(&found),
        "{message}"
    );
    // The widened operation was never served: the daemon enforces what it
    // verified at load.
    let records = daemon.records_with("connector_hash_mismatch");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["connector_hash"], installed);
    assert!(records[0]["requested"].as_str().unwrap().contains(&found));
    // A reload refuses the tampered entry and keeps refusing the spawn.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let health = daemon.call("health", serde_json::json!({}));
    assert!(
        health["result"]["stale_manifests"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("changed after install"),
        "{health}"
    );
    let e = daemon
        .run(name, "hello", serde_json::json!({}))
        .unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_hash_mismatch", "{e}");
}

/// A shell script a connector ships as its program.
const TOOL_SCRIPT: &[u8] = b"#!/bin/sh\necho \"shipped tool says $1\"\n";

impl Site {
    /// A connector directory `rel` whose program is the script it ships,
    /// `bin/tool`, named at `{connector}` as docs/manifest.md shows, with
    /// its provenance_hash.
    fn shipping(&self, rel: &str, script: &[u8]) -> PathBuf {
        let dir = self.path(rel);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/tool"), script).unwrap();
        chmod(&dir.join("bin/tool"), 0o755);
        let manifest = format!(
            "[connector]\nname = \"github://acme/shipped\"\nversion = \"1.0.0\"\nprovenance_hash = \"{}\"\n\n[capabilities.spawn]\nprograms = [{{ path = \"{{connector}}/bin/tool\" }}]\nfs_exec = [\"{{connector}}/bin\"]\n\n[capabilities.spawn.operations.hello]\nargv = \"tool {{word}}\"\n",
            sha256_of(script)
        );
        std::fs::write(dir.join("manifest.toml"), manifest).unwrap();
        chown_tree(&dir, self.who.uid());
        dir
    }

    /// `spawnd --json run --manifest FILE --op hello --arg word=WORD`.
    fn run_hello(&self, manifest: &Path, word: &str) -> (Value, Option<i32>) {
        let arg = format!("word={word}");
        self.json(&[
            "run",
            "--manifest",
            manifest.to_str().unwrap(),
            "--op",
            "hello",
            "--arg",
            &arg,
        ])
    }
}

#[test]
fn a_shipped_program_named_at_the_connector_runs_from_its_store_entry() {
    for who in BOTH {
        let s = Site::new("anchored", who);
        let dir = s.shipping("c", TOOL_SCRIPT);
        s.ok(&[
            "manifest",
            "lint",
            dir.join("manifest.toml").to_str().unwrap(),
        ]);
        s.ok(&["connector", "install", dir.to_str().unwrap()]);
        // The store entry's directory, as `connector list --json` gives it.
        let listed = s.listed();
        let entry = PathBuf::from(listed[0]["dir"].as_str().unwrap());
        assert!(entry.starts_with(s.path("store")), "{entry:?}");
        let manifest = entry.join("manifest.toml");
        let (v, code) = s.run_hello(&manifest, "hi");
        assert_eq!(code, Some(0), "as {who:?}: {v}");
        assert_eq!(
            v["data"]["stdout"]["text"], "shipped tool says hi\n",
            "as {who:?}: {v}"
        );
        // The program is the entry's own file, resolved from `{connector}`.
        let explained = s.ok(&["manifest", "explain", manifest.to_str().unwrap()]);
        assert!(
            explained.contains(&format!("here {}", entry.display())),
            "{explained}"
        );
    }
}

#[test]
fn run_checks_the_provenance_hash_against_the_files_beside_the_manifest() {
    let s = Site::new("run-provenance", As::Root);
    let dir = s.shipping("c", TOOL_SCRIPT);
    let manifest = dir.join("manifest.toml");
    // `manifest pin` pins the `{connector}` program by the file beside it.
    s.ok(&["manifest", "pin", manifest.to_str().unwrap()]);
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        pinned.contains(&format!(
            "{{ path = \"{{connector}}/bin/tool\", hash = \"{}\" }}",
            sha256_of(TOOL_SCRIPT)
        )),
        "{pinned}"
    );
    let (v, code) = s.run_hello(&manifest, "ok");
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "shipped tool says ok\n", "{v}");

    // A shipped file edited after the hash was taken: refused, naming both
    // hashes, before anything runs.
    let edited = b"#!/bin/sh\necho \"edited tool says $1\"\n";
    std::fs::write(dir.join("bin/tool"), edited).unwrap();
    let (v, code) = s.run_hello(&manifest, "no");
    assert_eq!(code, Some(3), "{v}");
    assert_eq!(
        v["error"]["details"]["reason"], "provenance_mismatch",
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("refused (provenance_mismatch): ")
            && message.contains(&sha256_of(TOOL_SCRIPT))
            && message.contains(&sha256_of(edited)),
        "{message}"
    );
    assert!(v.get("data").is_none_or(Value::is_null), "{v}");
    // The text form says so on stderr, and nothing ran.
    let out = s.spawnd(&[
        "run",
        "--manifest",
        manifest.to_str().unwrap(),
        "--op",
        "hello",
        "--arg",
        "word=no",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refused (provenance_mismatch)"), "{stderr}");

    // A provenance_hash with nothing shipped beside it.
    std::fs::remove_dir_all(dir.join("bin")).unwrap();
    let (v, code) = s.run_hello(&manifest, "none");
    assert_eq!(code, Some(3), "{v}");
    assert_eq!(
        v["error"]["details"]["reason"], "provenance_mismatch",
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing is shipped"), "{message}");
}

#[test]
fn a_shipped_program_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes() {
    for who in BOTH {
        a_shipped_program_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes_as(who);
    }
}

fn a_shipped_program_edited_under_the_daemon_refuses_the_next_spawn_naming_both_hashes_as(who: As) {
    let s = Site::new("serve-shipped", who);
    let name = "github://acme/shipped";
    let dir = s.shipping("shipped", TOOL_SCRIPT);
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    let installed = installed_hashes(&s)["1.0.0"].clone();
    let daemon = s.serve();
    let word = serde_json::json!({"args": {"word": "hi"}});
    assert_eq!(
        daemon.run(name, "hello", word.clone()),
        Ok("shipped tool says hi\n".to_string())
    );
    // Root rewrites the shipped program in place.
    let entry = s.path(&format!("store/sha256-{}", &installed["sha256:".len()..]));
    let tool = entry.join("bin/tool");
    chmod(&tool, 0o755);
    std::fs::write(&tool, b"#!/bin/sh\necho \"exfiltrated $1\"\n").unwrap();
    let found = recipe(&entry);
    assert_ne!(found, installed);
    let e = daemon.run(name, "hello", word).unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_hash_mismatch", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains(&installed) && message.contains(&found) && message.contains("bin/tool"),
        "{message}"
    );
    let records = daemon.records_with("connector_hash_mismatch");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["connector_hash"], installed);
    // Nothing the rewritten program would print was ever produced.
    assert!(!std::fs::read_to_string(&daemon.audit)
        .unwrap()
        .contains("exfiltrated"));
}

/// A `[server] manifests` file that ships its program at `{connector}` and
/// states a provenance_hash: `spawnd run --manifest` checks the files beside
/// it, and so must the daemon, or the daemon runs for every caller what
/// `run` refuses (docs/manifest.md: the shipped files are pinned by
/// provenance_hash, so a `{connector}` program needs no hash of its own).
#[test]
fn a_served_manifest_files_shipped_program_is_checked_against_its_provenance_hash() {
    let s = Site::new("serve-file-shipped", As::Root);
    let name = "github://acme/shipped";
    // The manifests directory the daemon serves is the connector's own.
    let dir = s.shipping("manifests", TOOL_SCRIPT);
    let daemon = s.serve();
    let word = serde_json::json!({"args": {"word": "hi"}});
    assert_eq!(
        daemon.run(name, "hello", word.clone()),
        Ok("shipped tool says hi\n".to_string())
    );
    let edited = b"#!/bin/sh\necho \"edited tool says $1\"\n";
    std::fs::write(dir.join("bin/tool"), edited).unwrap();
    // `run --manifest` refuses the edited program...
    let (v, code) = s.run_hello(&dir.join("manifest.toml"), "hi");
    assert_eq!(code, Some(3), "{v}");
    assert_eq!(
        v["error"]["details"]["reason"], "provenance_mismatch",
        "{v}"
    );
    // ...and the daemon must not run it either.
    let ran = daemon.run(name, "hello", word);
    assert_ne!(ran, Ok("edited tool says hi\n".to_string()));
    let e = ran.unwrap_err();
    assert_eq!(e["data"]["reason"], "connector_hash_mismatch", "{e}");
    assert!(e["message"].as_str().unwrap().contains("bin/tool"), "{e}");
    drop(daemon);
    // A daemon started now refuses to load it, naming both hashes.
    let config = s.path("serve.toml");
    let out = Command::new(&world().spawnd)
        .args(["--config", config.to_str().unwrap(), "serve"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("provenance_hash") && stderr.contains(&sha256_of(edited)),
        "{stderr}"
    );
}

impl Site {
    /// Names the store through a link: `[connectors] store` becomes
    /// DIR/via/store, `via` a link to DIR/real. Returns both.
    fn store_through_link(&self) -> (PathBuf, PathBuf) {
        let real = self.path("real");
        std::fs::create_dir_all(&real).unwrap();
        chmod(&real, 0o755);
        let link = self.path("via");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let config = std::fs::read_to_string(&self.config).unwrap().replace(
            &format!("{}/store", self.dir.display()),
            &format!("{}/store", link.display()),
        );
        std::fs::write(&self.config, config).unwrap();
        (real, link)
    }
}

/// The store named through a symbolic link (`[connectors] store` at a link
/// to the real directory): `{connector}` must expand at the entry's
/// resolved directory, the one the per-spawn check reads, so the program
/// that is executed is the one checked. Retargeting the link after load
/// makes the program open from another tree; the check must see it.
#[test]
fn a_store_named_through_a_link_retargeted_after_load_is_caught_before_the_spawn() {
    let s = Site::new("serve-store-link", As::Root);
    let name = "github://acme/shipped";
    let (real, link) = s.store_through_link();
    // Without fs_exec the program runs from the descriptor the gate opened.
    let dir = s.shipping("shipped", TOOL_SCRIPT);
    let m = std::fs::read_to_string(dir.join("manifest.toml"))
        .unwrap()
        .replace("fs_exec = [\"{connector}/bin\"]\n", "");
    std::fs::write(dir.join("manifest.toml"), m).unwrap();
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    let installed = installed_hashes(&s)["1.0.0"].clone();
    let daemon = s.serve();
    let word = serde_json::json!({"args": {"word": "hi"}});
    assert_eq!(
        daemon.run(name, "hello", word.clone()),
        Ok("shipped tool says hi\n".to_string())
    );
    // A second tree with the same entry name and another program; the link
    // now points there. The entry the daemon verified is untouched.
    let other = s.path("other-store");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&real)
        .arg(&other)
        .status()
        .unwrap();
    assert!(copied.success());
    let tool = other
        .join("store")
        .join(format!("sha256-{}", &installed["sha256:".len()..]))
        .join("bin/tool");
    chmod(tool.parent().unwrap(), 0o755);
    chmod(&tool, 0o755);
    std::fs::write(&tool, b"#!/bin/sh\necho \"swapped $1\"\n").unwrap();
    chmod(&tool, 0o555);
    chmod(tool.parent().unwrap(), 0o555);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&other, &link).unwrap();
    let ran = daemon.run(name, "hello", word);
    assert_ne!(ran, Ok("swapped hi\n".to_string()));
}

/// An installed connector whose program and fs_exec are at `{connector}`
/// runs when the store is named through a link: `{connector}` is the
/// entry's resolved directory, which the sandbox mounts.
#[test]
fn a_shipped_program_runs_from_a_store_named_through_a_link() {
    let s = Site::new("serve-store-via", As::Root);
    s.store_through_link();
    let dir = s.shipping("shipped", TOOL_SCRIPT);
    s.ok(&["connector", "install", dir.to_str().unwrap()]);
    let daemon = s.serve();
    assert_eq!(
        daemon.run(
            "github://acme/shipped",
            "hello",
            serde_json::json!({"args": {"word": "hi"}})
        ),
        Ok("shipped tool says hi\n".to_string())
    );
}
