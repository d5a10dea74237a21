//! Whether a write scope reaches what decides what runs and what records
//! it: the manifest, the config and the audit log's directory. A program
//! that could write them would rewrite its own policy for the next run (a
//! manifest carried in the checkout it builds, say), or the trail.
//!
//! Places are compared as the kernel identifies them, by device and inode,
//! never by path: a bind mount of a directory has its source's device and
//! inode, so a scope that is, or holds a mount of, a directory above a
//! policy file is found whatever path names it. A file with more than one
//! link can be written through a link nobody sees, so a manifest or config
//! with several links is refused when a write scope reaches its
//! filesystem. Nothing inside a scope is walked: the scope itself and the
//! mounts the mount table shows beneath it are all that is looked at.
//!
//! [`policy_exposure`] decides over the facts; [`policy_facts_on_host`]
//! gathers them (every `stat` and the mount table read) in one place.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file or directory as the kernel identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Inode {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl Inode {
    fn of(meta: &std::fs::Metadata) -> Inode {
        Inode {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// A policy file or directory no write scope may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Guarded {
    /// What it is, for the message: "the manifest", "the config", "the
    /// audit log's directory".
    pub what: &'static str,
    /// Its real path.
    pub path: PathBuf,
    /// For a file: its device and `st_nlink`.
    pub links: Option<Links>,
    /// It and every directory above it, along each path the mount table
    /// shows to it: a scope that is one of these holds it.
    pub holders: BTreeSet<Inode>,
}

/// A file's filesystem and its number of links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Links {
    /// `st_dev`: where another link can be.
    pub dev: u64,
    /// `st_nlink`.
    pub count: u64,
}

/// What a write scope reaches: the scope itself, then each mount beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScopeReach {
    /// The scope as the plan names it.
    pub scope: PathBuf,
    /// The scope's own inode.
    pub inode: Inode,
    /// Each mount beneath the scope: where it is, and the inode of its root.
    pub mounts: Vec<(PathBuf, Inode)>,
}

/// Why a write scope may not run: it reaches a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Exposure {
    /// The scope holds the file (or directory): it is, or lies beneath,
    /// the scope or a mount beneath it.
    Holds {
        scope: PathBuf,
        what: &'static str,
        path: PathBuf,
        /// The mount beneath the scope that holds it; `None`: the scope itself.
        through: Option<PathBuf>,
    },
    /// The file has other links, and the scope reaches its filesystem.
    Linked {
        scope: PathBuf,
        what: &'static str,
        path: PathBuf,
        links: u64,
        /// The mount beneath the scope on that filesystem; `None`: the scope itself.
        through: Option<PathBuf>,
    },
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exposure::Holds {
                scope,
                what,
                path,
                through,
            } => {
                write!(
                    f,
                    "fs_write {} holds {what} ({})",
                    scope.display(),
                    path.display()
                )?;
                match through {
                    Some(mount) => write!(f, " through the mount at {}", mount.display())?,
                    None if !path.starts_with(scope) => f.write_str(
                        " by another path (the scope is a bind mount of a directory above it)",
                    )?,
                    None => {}
                }
                write!(f, ": the program could rewrite it for the next run; keep it outside the write scopes (a manifest carried in a checkout, say, beside the scopes it names rather than inside them")?;
                if through.is_some() {
                    f.write_str(", and no mount of it inside them")?;
                }
                f.write_str("); nothing was run")
            }
            Exposure::Linked {
                scope,
                what,
                path,
                links,
                through,
            } => {
                write!(
                    f,
                    "{what} {} has {links} links and the write scope {} is on its filesystem",
                    path.display(),
                    scope.display()
                )?;
                if let Some(mount) = through {
                    write!(f, " (through the mount at {})", mount.display())?;
                }
                let short = what.trim_start_matches("the ");
                write!(f, ": a link inside the scope would let the program rewrite its policy; keep the {short} outside and unlinked (a copy, not a hard link: one link, `stat -c %h` says 1); nothing was run")
            }
        }
    }
}

/// The first write scope that reaches a guarded file, in the plan's order:
/// one that holds it, or, for a file with several links, one on its
/// filesystem.
pub(super) fn policy_exposure(guarded: &[Guarded], scopes: &[ScopeReach]) -> Option<Exposure> {
    for reach in scopes {
        let places = std::iter::once((None, reach.inode))
            .chain(reach.mounts.iter().map(|(at, inode)| (Some(at), *inode)));
        for g in guarded {
            let held = places.clone().find(|(_, inode)| g.holders.contains(inode));
            if let Some((through, _)) = held {
                return Some(Exposure::Holds {
                    scope: reach.scope.clone(),
                    what: g.what,
                    path: g.path.clone(),
                    through: through.cloned(),
                });
            }
            let Some(links) = g.links.filter(|l| l.count > 1) else {
                continue;
            };
            if let Some((through, _)) = places.clone().find(|(_, inode)| inode.dev == links.dev) {
                return Some(Exposure::Linked {
                    scope: reach.scope.clone(),
                    what: g.what,
                    path: g.path.clone(),
                    links: links.count,
                    through: through.cloned(),
                });
            }
        }
    }
    None
}

/// One line of `/proc/self/mountinfo`: what it mounts and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    /// The filesystem's `major:minor`.
    pub device: String,
    /// The directory of that filesystem mounted (`/` for its root; a bind
    /// mount's source).
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
}

/// The mounts of a `mountinfo` text, in its order (a later mount at the
/// same point lies over an earlier one).
pub(super) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (_id, _parent) = (fields.next()?, fields.next()?);
            let device = fields.next()?.to_string();
            let root = unescape(fields.next()?);
            let point = unescape(fields.next()?);
            Some(Mount {
                device,
                root,
                point,
            })
        })
        .collect()
}

/// A mountinfo path: the kernel writes space, tab, newline and backslash
/// as `\ooo` octal escapes.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Every path by which `real` (a real path) and the directories above it
/// can be reached: its own ancestors, and, for each mount of the same
/// filesystem whose root lies above it inside that filesystem, the same
/// directories as seen through that mount (a bind mount of a directory
/// above it elsewhere).
pub(super) fn holder_paths(real: &Path, mounts: &[Mount]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = real.ancestors().map(Path::to_path_buf).collect();
    let Some(home) = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| real.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)
    else {
        return out;
    };
    let Ok(rest) = real.strip_prefix(&home.point) else {
        return out;
    };
    let inside = home.root.join(rest);
    for m in mounts.iter().filter(|m| m.device == home.device) {
        for dir in inside.ancestors() {
            let Ok(below_root) = dir.strip_prefix(&m.root) else {
                break;
            };
            let seen = m.point.join(below_root);
            if !out.contains(&seen) {
                out.push(seen);
            }
        }
    }
    out
}

/// The mount points strictly beneath `scope` (a real path).
pub(super) fn mounts_beneath<'m>(scope: &Path, mounts: &'m [Mount]) -> Vec<&'m Path> {
    let mut out: Vec<&Path> = Vec::new();
    for m in mounts {
        if m.point != scope && m.point.starts_with(scope) && !out.contains(&m.point.as_path()) {
            out.push(&m.point);
        }
    }
    out
}

/// The facts [`policy_exposure`] decides over, from the host as it is now:
/// each guarded path's links and holders, each write scope's reach. A
/// guarded path that cannot be resolved (a manifest given as text) guards
/// nothing. A scope that cannot be stat'ed is left out: a missing one is
/// made empty at launch, and one spawnd cannot stat it cannot bind either.
pub(super) fn policy_facts_on_host(
    guarded: &[(&'static str, PathBuf)],
    scopes: &[PathBuf],
) -> std::io::Result<(Vec<Guarded>, Vec<ScopeReach>)> {
    if scopes.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let table = "/proc/self/mountinfo";
    let mounts = parse_mountinfo(
        &std::fs::read_to_string(table)
            .map_err(|e| std::io::Error::new(e.kind(), format!("read {table}: {e}")))?,
    );
    let mut facts = Vec::new();
    for (what, path) in guarded {
        let Ok(real) = std::fs::canonicalize(path) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&real) else {
            continue;
        };
        let holders = holder_paths(&real, &mounts)
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| Inode::of(&m))
            .collect();
        facts.push(Guarded {
            what,
            links: meta.is_file().then(|| Links {
                dev: meta.dev(),
                count: meta.nlink(),
            }),
            path: real,
            holders,
        });
    }
    let mut reaches = Vec::new();
    for scope in scopes {
        let Ok(meta) = std::fs::metadata(scope) else {
            continue;
        };
        let real = std::fs::canonicalize(scope).unwrap_or_else(|_| scope.clone());
        let mounts = mounts_beneath(&real, &mounts)
            .into_iter()
            .filter_map(|at| {
                std::fs::metadata(at)
                    .ok()
                    .map(|m| (at.to_path_buf(), Inode::of(&m)))
            })
            .collect();
        reaches.push(ScopeReach {
            scope: scope.clone(),
            inode: Inode::of(&meta),
            mounts,
        });
    }
    Ok((facts, reaches))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ino(dev: u64, ino: u64) -> Inode {
        Inode { dev, ino }
    }

    /// The manifest /cfg/m.toml (dev 1, inode 10) under /cfg (1, 5) and /
    /// (1, 2), with `links` links.
    fn manifest(links: u64) -> Guarded {
        Guarded {
            what: "the manifest",
            path: PathBuf::from("/cfg/m.toml"),
            links: Some(Links {
                dev: 1,
                count: links,
            }),
            holders: [ino(1, 10), ino(1, 5), ino(1, 2)].into_iter().collect(),
        }
    }

    fn scope(path: &str, inode: Inode, mounts: &[(&str, Inode)]) -> ScopeReach {
        ScopeReach {
            scope: PathBuf::from(path),
            inode,
            mounts: mounts.iter().map(|(p, i)| (PathBuf::from(p), *i)).collect(),
        }
    }

    #[test]
    fn a_scope_on_another_filesystem_or_beside_a_file_with_one_link_passes() {
        let elsewhere = scope("/w", ino(2, 7), &[]);
        let beside = scope("/build", ino(1, 30), &[]);
        assert_eq!(
            policy_exposure(&[manifest(1)], &[elsewhere.clone(), beside]),
            None
        );
        assert_eq!(policy_exposure(&[manifest(3)], &[elsewhere]), None);
    }

    #[test]
    fn a_file_with_several_links_is_refused_beside_a_scope_on_its_filesystem() {
        let beside = scope("/build", ino(1, 30), &[]);
        assert_eq!(
            policy_exposure(&[manifest(2)], &[beside]),
            Some(Exposure::Linked {
                scope: PathBuf::from("/build"),
                what: "the manifest",
                path: PathBuf::from("/cfg/m.toml"),
                links: 2,
                through: None,
            })
        );
    }

    #[test]
    fn a_mount_beneath_a_scope_brings_its_filesystem_into_the_scope() {
        let reaching = scope("/w", ino(2, 7), &[("/w/data", ino(1, 40))]);
        assert_eq!(
            policy_exposure(&[manifest(2)], &[reaching]),
            Some(Exposure::Linked {
                scope: PathBuf::from("/w"),
                what: "the manifest",
                path: PathBuf::from("/cfg/m.toml"),
                links: 2,
                through: Some(PathBuf::from("/w/data")),
            })
        );
    }

    #[test]
    fn a_scope_that_is_a_directory_above_the_file_holds_it_whatever_its_path() {
        // /srv/alias is a bind mount of /cfg: the same device and inode.
        let alias = scope("/srv/alias", ino(1, 5), &[]);
        let exposure = policy_exposure(&[manifest(1)], &[alias]);
        assert_eq!(
            exposure,
            Some(Exposure::Holds {
                scope: PathBuf::from("/srv/alias"),
                what: "the manifest",
                path: PathBuf::from("/cfg/m.toml"),
                through: None,
            })
        );
        let message = exposure.unwrap().to_string();
        assert!(
            message.starts_with(
                "fs_write /srv/alias holds the manifest (/cfg/m.toml) by another path"
            ),
            "{message}"
        );
        assert!(message.ends_with("nothing was run"), "{message}");
    }

    #[test]
    fn a_mount_of_a_directory_above_the_file_beneath_a_scope_holds_it() {
        let holding = scope(
            "/w",
            ino(2, 7),
            &[("/w/other", ino(3, 1)), ("/w/policy", ino(1, 5))],
        );
        assert_eq!(
            policy_exposure(&[manifest(1)], &[holding]),
            Some(Exposure::Holds {
                scope: PathBuf::from("/w"),
                what: "the manifest",
                path: PathBuf::from("/cfg/m.toml"),
                through: Some(PathBuf::from("/w/policy")),
            })
        );
    }

    #[test]
    fn scopes_are_judged_in_the_plans_order() {
        let first = scope("/a", ino(1, 30), &[]);
        let second = scope("/", ino(1, 2), &[]);
        let audit_dir = Guarded {
            what: "the audit log's directory",
            path: PathBuf::from("/var/log/spawnd"),
            links: None,
            holders: [ino(1, 50), ino(1, 2)].into_iter().collect(),
        };
        let found = policy_exposure(&[audit_dir, manifest(2)], &[first, second]);
        assert!(
            matches!(&found, Some(Exposure::Linked { scope, .. }) if scope == Path::new("/a")),
            "{found:?}"
        );
        let only_second = policy_exposure(&[manifest(1)], &[scope("/", ino(1, 2), &[])]);
        assert!(
            matches!(&only_second, Some(Exposure::Holds { through: None, .. })),
            "{only_second:?}"
        );
    }

    #[test]
    fn a_directory_has_no_links_to_judge() {
        let audit_dir = Guarded {
            what: "the audit log's directory",
            path: PathBuf::from("/var/log/spawnd"),
            links: None,
            holders: [ino(1, 50), ino(1, 2)].into_iter().collect(),
        };
        assert_eq!(
            policy_exposure(&[audit_dir], &[scope("/build", ino(1, 30), &[])]),
            None
        );
    }

    #[test]
    fn the_linked_message_names_the_file_the_scope_and_the_fix() {
        let message = policy_exposure(&[manifest(2)], &[scope("/w", ino(1, 30), &[])])
            .unwrap()
            .to_string();
        assert!(
            message.starts_with("the manifest /cfg/m.toml has 2 links and the write scope /w is on its filesystem: a link inside the scope would let the program rewrite its policy; keep the manifest outside and unlinked"),
            "{message}"
        );
        assert!(message.ends_with("nothing was run"), "{message}");
    }

    #[test]
    fn mountinfo_lines_give_device_root_and_point_unescaped() {
        let text = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    40 22 8:1 /srv/cfg /etc/spawnd rw shared:1 - ext4 /dev/sda1 rw\n\
                    41 22 0:30 / /mnt/with\\040space\\134 rw - tmpfs tmpfs rw\n";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                Mount {
                    device: "8:1".into(),
                    root: "/".into(),
                    point: "/".into()
                },
                Mount {
                    device: "8:1".into(),
                    root: "/srv/cfg".into(),
                    point: "/etc/spawnd".into()
                },
                Mount {
                    device: "0:30".into(),
                    root: "/".into(),
                    point: "/mnt/with space\\".into()
                },
            ]
        );
    }

    #[test]
    fn holders_include_the_directories_above_a_bind_mount_source() {
        // /etc/spawnd is a bind mount of /srv/cfg on the root filesystem:
        // a scope at /srv holds the manifest though no path shows it there.
        let mounts = parse_mountinfo(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             40 22 8:1 /srv/cfg /etc/spawnd rw - ext4 /dev/sda1 rw\n\
             41 22 0:30 / /tmp rw - tmpfs tmpfs rw\n",
        );
        let paths = holder_paths(Path::new("/etc/spawnd/m.toml"), &mounts);
        for p in [
            "/etc/spawnd/m.toml",
            "/etc/spawnd",
            "/etc",
            "/",
            "/srv/cfg/m.toml",
            "/srv/cfg",
            "/srv",
        ] {
            assert!(paths.contains(&PathBuf::from(p)), "{p} in {paths:?}");
        }
        assert!(!paths.iter().any(|p| p.starts_with("/tmp")), "{paths:?}");
    }

    #[test]
    fn mounts_beneath_a_scope_are_those_strictly_inside_it() {
        let mounts = parse_mountinfo(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             30 22 8:2 / /w rw - ext4 /dev/sdb1 rw\n\
             31 30 8:1 /cfg /w/policy rw - ext4 /dev/sda1 rw\n\
             32 22 0:30 / /wide rw - tmpfs tmpfs rw\n",
        );
        assert_eq!(
            mounts_beneath(Path::new("/w"), &mounts),
            vec![Path::new("/w/policy")]
        );
        assert!(mounts_beneath(Path::new("/w/policy"), &mounts).is_empty());
    }
}
