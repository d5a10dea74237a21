//! Test harness for the gate: a program table standing in for the file
//! system, the reference manifest M0, and helpers to decide and assert.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::*;
use crate::manifest::{parse_manifest, LoadOptions, Manifest, Sha256Digest};

pub(super) const GIT_SHA: [u8; 32] = [7; 32];

pub(super) const M0: &str = r#"
[connector]
name = "github://aileron-test/gitcrawl"
version = "0.1.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/git" }]
env_passthrough = ["GIT_AUTHOR_NAME", "GH_TOKEN"]
fs_read = ["~/code/"]
fs_write = ["~/.cache/aileron/gitcrawl/"]

[capabilities.spawn.operations.log]
argv = "git log --since={since}"

[capabilities.spawn.operations.status]
argv = "git status"
"#;

pub(super) const EMPTY: &str =
    "[connector]\nname = \"github://aileron-test/gitcrawl\"\nversion = \"0.1.0\"\n";

/// A program table standing in for the file system; counts lookups.
#[derive(Default)]
pub(super) struct FakePrograms {
    pub files: BTreeMap<PathBuf, ProgramFacts>,
    pub calls: Cell<usize>,
    /// What `recheck_verified` finds changed (nothing by default), and
    /// the digests it was handed.
    pub installed_change: Option<ContentChanged>,
    pub rechecked: Vec<(PathBuf, Sha256Digest)>,
}

impl FakePrograms {
    pub(super) fn standard() -> FakePrograms {
        let mut f = FakePrograms::default();
        for p in [
            "/usr/bin/git",
            "/usr/bin/cat",
            "/usr/bin/curl",
            "/usr/bin/tool",
        ] {
            f.files.insert(
                p.into(),
                ProgramFacts {
                    resolved: p.into(),
                    regular: true,
                    setid: false,
                    file_caps: false,
                    sha256: Sha256Digest(GIT_SHA),
                    interpreter: None,
                    file: Default::default(),
                },
            );
        }
        f
    }
}

impl ProgramInspector for FakePrograms {
    fn inspect(&mut self, path: &Path) -> Result<ProgramFacts, ProgramFault> {
        self.calls.set(self.calls.get() + 1);
        self.files
            .get(path)
            .cloned()
            .ok_or(ProgramFault::Missing { path: path.into() })
    }

    fn recheck_verified(
        &mut self,
        _installed: &crate::manifest::Verified,
        hashed: &[(PathBuf, Sha256Digest)],
    ) -> Result<(), ContentChanged> {
        self.rechecked = hashed.to_vec();
        self.installed_change.clone().map_or(Ok(()), Err)
    }
}

pub(super) fn manifest(text: &str) -> Manifest {
    parse_manifest("m.toml", text, LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn caller() -> Caller {
    Caller {
        uid: 1000,
        gid: 1000,
        pid: Some(42),
        home: "/home/alr".into(),
        workspace: None,
        other_user_namespace: false,
        label: None,
        origin: std::sync::Arc::new(crate::origin::Origin::via(crate::origin::Via::Cli)),
    }
}

/// Operator side of a test decision.
pub(super) struct Operator {
    pub bound: BTreeSet<String>,
    pub access: Access,
    pub disabled: bool,
    pub require_pin: bool,
}

impl Default for Operator {
    fn default() -> Self {
        Operator {
            bound: BTreeSet::new(),
            access: Access::Local,
            disabled: false,
            require_pin: false,
        }
    }
}

pub(super) fn decide_full(
    m: &Manifest,
    req: &Request,
    op: &Operator,
    programs: &mut FakePrograms,
) -> Decision {
    let name = m.connector.name.to_string();
    let ctx = GateContext {
        connector: &name,
        manifest: Some(m),
        disabled: op.disabled,
        access: &op.access,
        bound_credentials: &op.bound,
        require_program_hash: op.require_pin,
        network_enabled: true,
    };
    decide(&ctx, &caller(), req, programs)
}

pub(super) fn decide_m(text: &str, req: &Request) -> Decision {
    decide_full(
        &manifest(text),
        req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    )
}

pub(super) fn denied(d: &Decision) -> &Denial {
    d.denial()
        .unwrap_or_else(|| panic!("expected a denial, got {d:?}"))
}

pub(super) fn allowed(d: &Decision) -> &crate::plan::SpawnPlan {
    d.plan()
        .unwrap_or_else(|| panic!("expected allowed, got {:?}", d.denial()))
}

pub(super) fn assert_reason(d: &Decision, reason: Reason, detail: &str) {
    let denial = denied(d);
    assert_eq!(
        (denial.reason, denial.boundary_detail),
        (reason, detail),
        "{denial:?}"
    );
    assert_eq!(denial.boundary, "sandbox");
}

pub(super) fn with_env(mut r: Request, env: &[(&str, &str)]) -> Request {
    r.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    r
}

pub(super) fn with_cwd(mut r: Request, cwd: &str) -> Request {
    r.cwd = Some(cwd.into());
    r
}
