use super::*;

struct Table(Vec<(&'static str, bool)>);

impl Host for Table {
    fn exists(&self, path: &Path) -> bool {
        self.0.iter().any(|(p, _)| Path::new(p) == path)
    }
    /// `/etc/os-release` is a link to `/usr/lib/os-release`, as on Debian.
    fn real_path(&self, path: &Path) -> Option<PathBuf> {
        match path == Path::new("/etc/os-release") {
            true => Some("/usr/lib/os-release".into()),
            false => Some(path.to_path_buf()),
        }
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.0.iter().any(|(p, dir)| Path::new(p) == path && *dir)
    }
}

fn observed() -> Observed {
    Observed {
        name: "local://learned/tar".into(),
        op: "run".into(),
        program: "/usr/bin/tar".into(),
        program_hash: format!("sha256:{}", "0".repeat(64)),
        argv: vec![
            "tar".into(),
            "czf".into(),
            "out dir/a.tgz".into(),
            "src".into(),
            "--owner=0".into(),
        ],
        cwd: "/w/proj".into(),
        workspace: "/w/proj".into(),
        writable: vec!["/w/proj".into()],
        visible: vec![],
        exec_dirs: vec![],
        home: Some("/home/u".into()),
        paths: vec![
            ("/w/proj/src".into(), Use::List),
            ("/w/proj/src/a.c".into(), Use::Read),
            ("/w/proj/out dir/a.tgz".into(), Use::Write),
            ("/usr/lib/x.so".into(), Use::Read),
            ("/etc/passwd".into(), Use::Read),
            ("/home/u/.ssh/id_rsa".into(), Use::Read),
            ("/home/u/.config/tool.conf".into(), Use::Read),
            ("/opt/data/missing".into(), Use::Read),
            ("/tmp/x".into(), Use::Write),
            ("/var/spool/cron/crontabs/x".into(), Use::Write),
        ],
        executed: vec![
            ("/usr/bin/tar".into(), Some("sha256:00".into())),
            (
                "/usr/bin/gzip".into(),
                Some(format!("sha256:{}", "1".repeat(64))),
            ),
            ("/w/proj/out dir/tool".into(), None),
            ("/etc/shadow".into(), None),
            ("/w/proj/gone".into(), None),
            ("/w/proj/x\nnetwork = [\"evil.example:443\"]".into(), None),
        ],
        env_keys: vec!["CI".into(), "API_TOKEN".into()],
        network: vec!["example.com:443".into()],
        system_paths: vec!["/usr".into(), "/lib".into()],
        duration_ms: 100,
        exit_code: Some(0),
        refused: vec!["refused by seccomp (EPERM): ptrace (1 call); no key".into()],
    }
}

fn host() -> Table {
    Table(vec![
        ("/w/proj/src", true),
        ("/w/proj/src/a.c", false),
        ("/w/proj/out dir", true),
        ("/w/proj/out dir/a.tgz", false),
        ("/home/u/.ssh/id_rsa", false),
        ("/home/u/.config/tool.conf", false),
        ("/w/proj/src", true),
        ("/w/proj/out dir/tool", false),
        ("/etc/shadow", false),
        ("/usr/bin/gzip", false),
    ])
}

/// Each commented line that is a TOML key line (a suggestion), taken
/// alone: uncommented in place of its table's line of that key, the
/// draft still parses as a manifest. Returns the suggestions.
fn every_suggestion_parses(text: &str) -> Vec<String> {
    assert!(!text.contains("+="), "not TOML: {text}");
    let lines: Vec<&str> = text.lines().collect();
    let mut suggestions = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((key, _)) = rest.split_once(" = ") else {
            continue;
        };
        if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            || toml::from_str::<toml::Table>(rest).is_err()
        {
            continue;
        }
        let table_start = lines[..i]
            .iter()
            .rposition(|l| l.starts_with('['))
            .unwrap_or(0);
        let table_end = lines[i..]
            .iter()
            .position(|l| l.starts_with('['))
            .map_or(lines.len(), |n| i + n);
        let uncommented: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(j, l)| {
                !(*j > table_start
                    && *j < table_end
                    && *j != i
                    && l.starts_with(&format!("{key} = ")))
            })
            .map(|(j, l)| if j == i { rest } else { *l })
            .collect();
        let variant = uncommented.join("\n");
        crate::manifest::parse_manifest(
            "(draft)",
            &variant,
            crate::manifest::LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{rest}: {e}\n{variant}"));
        suggestions.push(rest.to_string());
    }
    suggestions
}

#[test]
fn a_draft_grants_what_was_used_and_marks_what_needs_review() {
    let draft = observed().draft(&host());
    let t = &draft.text;
    crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{t}"));
    assert!(t.contains("fs_write = [\"{workspace}/out dir\"]"), "{t}");
    assert!(t.contains("fs_exec = [\"{workspace}/out dir\"]"), "{t}");
    assert!(
        t.contains("fs_read = [\"~/.config/tool.conf\", \"{workspace}\"]"),
        "{t}"
    );
    let suggestions = every_suggestion_parses(t);
    assert!(
        suggestions.contains(
            &"fs_read = [\"~/.config/tool.conf\", \"~/.ssh\", \"{workspace}\"]".to_string()
        ),
        "{suggestions:?}\n{t}"
    );
    assert!(
        !t.contains("/usr/lib/x.so") && !t.contains("\"/etc/passwd\"") && !t.contains("/tmp/x"),
        "{t}"
    );
    assert!(!t.contains("missing"), "{t}");
    assert!(
        t.contains("argv = [\"tar\", \"czf\", \"{arg2}\", \"{arg3}\", \"--owner={owner}\"]"),
        "{t}"
    );
    assert!(
        t.contains("default = \"out dir/a.tgz\"\nkind = \"path\""),
        "{t}"
    );
    assert!(
        t.contains("env_passthrough = [\"CI\", \"API_TOKEN\"]")
            && t.contains("# credential_env_keys = [\"API_TOKEN\"]"),
        "{t}"
    );
    assert!(t.contains("network = [\"example.com:443\"]"), "{t}");
    // What it ran besides is pinned; what it ran from where it writes
    // cannot be, so exec = "declared" is offered, not set.
    assert!(
        t.contains(&format!(
            "also_runs = [\n  {{ path = \"/usr/bin/gzip\", hash = \"sha256:{}\" }},\n]",
            "1".repeat(64)
        )),
        "{t}"
    );
    assert!(t.contains("\n# exec = \"declared\"\n"), "{t}");
    assert!(!t.lines().any(|l| l.starts_with("exec")), "{t}");
    assert!(draft
        .review
        .iter()
        .any(|r| r.contains("exec = \"declared\" left off")));
    assert!(draft.review.iter().any(|r| r.contains(".ssh")));
    // An attempt outside what learning let it write is shown, not granted.
    assert!(
        suggestions.contains(
            &"fs_write = [\"/var/spool/cron/crontabs\", \"{workspace}/out dir\"]".to_string()
        ),
        "{suggestions:?}\n{t}"
    );
    assert!(
        !t.lines().any(|l| l.starts_with("fs_write = [\"/var")),
        "{t}"
    );
    // Secrets are never made executable; nothing is granted for an
    // execution that found no file; a file name cannot end a comment.
    assert!(!t.contains("fs_exec = [\"/etc/shadow"), "{t}");
    assert!(!t.contains("{workspace}/gone"), "{t}");
    assert!(
        !t.lines().any(|l| l.starts_with("network = [\"evil")),
        "{t}"
    );
    assert!(draft.review.iter().any(|r| r.contains("--owner=")));
}

#[test]
fn a_run_whose_programs_all_pin_drafts_exec_declared_with_also_runs() {
    let mut o = observed();
    let pin = |d: &str| Some(format!("sha256:{}", d.repeat(64)));
    o.executed = vec![
        ("/usr/bin/tar".into(), pin("0")),
        // A search along PATH: nothing there, nothing granted.
        ("/usr/local/bin/gzip".into(), None),
        ("/usr/bin/gzip".into(), pin("1")),
        ("/proc/self/exe".into(), None),
    ];
    let draft = o.draft(&host());
    let t = &draft.text;
    let m = crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{t}"));
    let spawn = m.spawn.unwrap();
    assert_eq!(spawn.exec, crate::manifest::ExecPolicy::Declared, "{t}");
    assert_eq!(
        spawn.also_runs,
        vec![crate::manifest::model::AlsoRuns {
            path: crate::manifest::ScopePath::Absolute("/usr/bin/gzip".into()),
            hash: format!("sha256:{}", "1".repeat(64)).parse().unwrap()
        }],
        "{t}"
    );
    // Something it made in its own /tmp and ran: no pin, no declared.
    o.executed.push(("/tmp/built".into(), None));
    let t = o.draft(&host()).text;
    assert!(!t.lines().any(|l| l.starts_with("exec")), "{t}");
    assert!(t.contains("#   /tmp/built"), "{t}");
}

#[test]
fn a_directory_holding_secrets_is_not_collapsed_into_and_a_listed_one_is_flagged() {
    let mut o = observed();
    o.paths = (0..9)
        .map(|i| (PathBuf::from(format!("/home/u/.config/f{i}")), Use::Read))
        .chain([(PathBuf::from("/var/lib"), Use::List)])
        .collect();
    o.executed.clear();
    let mut files: Vec<(&'static str, bool)> = (0..9)
        .map(|i| &*Box::leak(format!("/home/u/.config/f{i}").into_boxed_str()))
        .map(|p| (p, false))
        .collect();
    files.extend([
        ("/home/u/.config/gcloud", true),
        ("/var/lib", true),
        ("/var/lib/spawnd", true),
    ]);
    let draft = o.draft(&Table(files));
    let t = &draft.text;
    assert!(!t.contains("\"~/.config\""), "{t}");
    assert!(t.contains("\"~/.config/f0\""), "{t}");
    assert!(
        t.contains("# REVIEW: /var/lib holds /var/lib/spawnd"),
        "{t}"
    );
}

/// A run that lists a directory and reads the secret inside it (`find
/// DIR`, `cp -r DIR`): the secret is left out, so the draft must not
/// grant it through the directory either. A review note alone leaves
/// the secret granted in the manifest as written.
#[test]
fn a_secret_the_run_read_is_not_granted_through_the_directory_it_listed() {
    let mut o = observed();
    o.paths = vec![
        (PathBuf::from("/srv/h"), Use::List),
        (PathBuf::from("/srv/h/src/a"), Use::Read),
        (PathBuf::from("/srv/h/.ssh/id_ed25519"), Use::Read),
    ];
    o.executed.clear();
    let draft = o.draft(&Table(vec![
        ("/srv/h", true),
        ("/srv/h/src", true),
        ("/srv/h/src/a", false),
        ("/srv/h/.ssh", true),
        ("/srv/h/.ssh/id_ed25519", false),
    ]));
    let granted: Vec<&str> = draft
        .text
        .lines()
        .filter(|l| l.starts_with("fs_"))
        .collect();
    for line in &granted {
        assert!(
            !line.contains("\"/srv/h\"") && !line.contains("/srv/h/.ssh"),
            "{line} grants /srv/h/.ssh:\n{}",
            draft.text
        );
    }
}

#[test]
fn placeholder_names_never_collide_and_reserved_characters_are_not_scopes() {
    let mut o = observed();
    o.argv = ["tar", "--y", "./a", "--y_6", "./b", "--y", "./c"]
        .map(String::from)
        .to_vec();
    o.paths = vec![(PathBuf::from("/w/proj/out[1]/f"), Use::Create)];
    o.executed.clear();
    let draft = o.draft(&Table(vec![]));
    crate::manifest::parse_manifest(
        "(draft)",
        &draft.text,
        crate::manifest::LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", draft.text));
    assert!(draft
        .review
        .iter()
        .any(|r| r.contains("cannot be written as a scope")));
}

/// A table host from paths: those ending in `/` are directories.
fn table(paths: &[&str]) -> Table {
    Table(
        paths
            .iter()
            .map(|p| {
                let p: &'static str =
                    Box::leak(p.trim_end_matches('/').to_string().into_boxed_str());
                (p, false)
            })
            .zip(paths.iter().map(|p| p.ends_with('/')))
            .map(|((p, _), dir)| (p, dir))
            .collect(),
    )
}

#[test]
fn reads_inside_a_repository_collapse_to_its_root() {
    let mut o = observed();
    o.executed.clear();
    o.paths = [
        // git clone /srv/origin: a working tree outside the workspace.
        "/srv/origin/.git/HEAD",
        "/srv/origin/.git/config",
        "/srv/origin/.git/objects/ab/cdef",
        "/srv/origin/.git/refs/heads/main",
        // A bare repository.
        "/srv/bare.git/HEAD",
        "/srv/bare.git/packed-refs",
        // The workspace's own repository lies above it.
        "/w/.git/HEAD",
    ]
    .iter()
    .map(|p| (PathBuf::from(p), Use::Read))
    .chain([(PathBuf::from("/srv/origin/.git/objects"), Use::List)])
    .collect();
    o.workspace = "/w/proj".into();
    o.cwd = "/w/proj".into();
    let host = table(&[
        "/srv/origin/",
        "/srv/origin/.git/",
        "/srv/origin/.git/HEAD",
        "/srv/origin/.git/config",
        "/srv/origin/.git/objects/",
        "/srv/origin/.git/objects/ab/",
        "/srv/origin/.git/objects/ab/cdef",
        "/srv/origin/.git/refs/",
        "/srv/origin/.git/refs/heads/",
        "/srv/origin/.git/refs/heads/main",
        "/srv/bare.git/",
        "/srv/bare.git/HEAD",
        "/srv/bare.git/packed-refs",
        "/srv/bare.git/objects/",
        "/srv/bare.git/refs/",
        "/w/",
        "/w/.git/",
        "/w/.git/HEAD",
    ]);
    let t = o.draft(&host).text;
    assert!(
        t.contains("fs_read = [\"/srv/bare.git\", \"/srv/origin\", \"/w/.git\", \"{workspace}\"]"),
        "{t}"
    );
    assert!(
        t.contains("# /srv/origin is a repository, granted whole"),
        "{t}"
    );
    every_suggestion_parses(&t);
}

#[test]
fn etc_is_granted_file_by_file_without_the_sandboxs_own_files_and_noise() {
    let mut o = observed();
    o.executed.clear();
    let mut read: Vec<&str> = vec![
        "/etc/passwd",
        "/etc/group",
        "/etc/hosts",
        "/etc/nsswitch.conf",
        "/etc/resolv.conf",
        "/etc/host.conf",
        "/etc/gai.conf",
        "/etc/ld.so.preload",
    ];
    let many: Vec<String> = (0..9).map(|i| format!("/etc/tool{i}.conf")).collect();
    read.extend(many.iter().map(String::as_str));
    o.paths = read
        .iter()
        .map(|p| (PathBuf::from(p), Use::Read))
        .chain([(PathBuf::from("/etc"), Use::List)])
        .collect();
    let mut on_host = read.clone();
    on_host.extend(["/etc/", "/etc/shadow"]);
    let t = o.draft(&table(&on_host)).text;
    let fs_read = t
        .lines()
        .find(|l| l.starts_with("fs_read = "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(!fs_read.contains("\"/etc\""), "{t}");
    assert!(fs_read.contains("\"/etc/tool0.conf\""), "{t}");
    for noise in &read[..8] {
        assert!(!fs_read.contains(&format!("\"{noise}\"")), "{noise}: {t}");
    }
    assert!(
        t.contains("# Under /etc only the files it read are granted"),
        "{t}"
    );
    every_suggestion_parses(&t);
}

#[test]
fn a_path_read_through_a_link_is_granted_as_what_it_resolves_to() {
    let mut o = observed();
    o.executed.clear();
    o.system_paths = vec!["/usr".into()];
    o.paths = vec![
        ("/etc/os-release".into(), Use::Read),
        ("/etc/tool.conf".into(), Use::Read),
    ];
    let t = o
        .draft(&table(&[
            "/etc/os-release",
            "/etc/tool.conf",
            "/usr/lib/os-release",
        ]))
        .text;
    let fs_read = t
        .lines()
        .find(|l| l.starts_with("fs_read = "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(!fs_read.contains("os-release"), "{t}");
    assert!(fs_read.contains("\"/etc/tool.conf\""), "{t}");
    assert!(
        t.contains("#   /etc/os-release -> /usr/lib/os-release"),
        "{t}"
    );
    every_suggestion_parses(&t);
}

#[test]
fn a_secret_read_by_root_is_offered_as_a_whole_valid_line() {
    let mut o = observed();
    o.executed.clear();
    o.home = Some("/root".into());
    o.workspace = "/root/proj".into();
    o.cwd = "/root/proj".into();
    o.writable = vec!["/root/proj".into()];
    o.paths = vec![
        ("/root/.bashrc".into(), Use::Read),
        ("/root/proj/out".into(), Use::Write),
    ];
    let t = o
        .draft(&table(&["/root/", "/root/.bashrc", "/root/proj/"]))
        .text;
    let suggestions = every_suggestion_parses(&t);
    assert_eq!(suggestions[0], "fs_read = [\"/root\"]", "{t}");
    assert!(!t.lines().any(|l| l.starts_with("fs_read")), "{t}");
    assert!(t.contains("\nfs_write = [\"{workspace}\"]\n"), "{t}");
}

#[test]
fn host_paths_shown_under_tmp_are_granted_not_taken_for_the_sandboxs_own() {
    let mut o = observed();
    o.argv = vec!["tool".into(), "/tmp/src".into()];
    o.program = "/tmp/tc/bin/tool".into();
    o.visible = vec!["/tmp/src".into(), "/tmp/tc".into()];
    o.exec_dirs = vec!["/tmp/tc".into()];
    o.paths = vec![
        ("/tmp/src".into(), Use::List),
        ("/tmp/src/a/b.txt".into(), Use::Read),
        ("/tmp/tc/lib/x.so".into(), Use::Read),
        ("/tmp/own".into(), Use::Write),
    ];
    let pin = format!("sha256:{}", "2".repeat(64));
    o.executed = vec![
        ("/tmp/tc/bin/tool".into(), None),
        ("/tmp/tc/libexec/helper".into(), Some(pin.clone())),
    ];
    let draft = o.draft(&Table(vec![
        ("/tmp/src", true),
        ("/tmp/src/a/b.txt", false),
        ("/tmp/tc/lib/x.so", false),
        ("/tmp/tc/libexec/helper", false),
    ]));
    let t = &draft.text;
    crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{t}"));
    assert!(
        t.contains("fs_read = [\"/tmp/src\", \"{workspace}\"]"),
        "{t}"
    );
    assert!(t.contains("fs_exec = [\"/tmp/tc\"]"), "{t}");
    assert!(
        t.contains(&format!(
            "path = \"/tmp/tc/libexec/helper\", hash = \"{pin}\""
        )),
        "{t}"
    );
    assert!(t.lines().any(|l| l == "exec = \"declared\""), "{t}");
    assert!(!t.contains("tmp_exec") && !t.contains("/tmp/own"), "{t}");
}

#[test]
fn many_written_directories_collapse_and_shells_are_flagged() {
    let mut o = observed();
    o.program = "/bin/sh".into();
    o.paths = (0..5)
        .map(|i| (PathBuf::from(format!("/w/proj/b/d{i}/f")), Use::Create))
        .collect();
    let draft = o.draft(&Table(vec![]));
    assert!(
        draft.text.contains("fs_write = [\"{workspace}/b\"]"),
        "{}",
        draft.text
    );
    assert!(draft.review.iter().any(|r| r.contains("shell")));
}
