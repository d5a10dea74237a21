//! Command-line syntax (docs/cli.md), declared with clap. Help text teaches by example.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::audit::time_bound::TimeBound;
use crate::audit::Kind;
use crate::manifest::Tier;

const AFTER_HELP: &str = "\
Examples:
  spawnd manifest lint policies/git.toml        validate a manifest
  spawnd manifest explain policies/git.toml     what it lets a program do, in plain words
  spawnd manifest pin policies/git.toml         fill in program sha256 hashes in place
  spawnd check --manifest policies/git.toml --op log --arg since=2026-01-01
                                                the gate's decision and the exact argv
  spawnd run --manifest policies/python3.toml --op eval --arg 'code=print(6*7)'
                                                run it in the sandbox, output live
  spawnd serve --config /etc/spawnd/config.toml the daemon (JSON-RPC over a Unix socket)
  spawnd run --socket /run/spawnd/spawnd.sock --connector local://spawnd/git --op status
                                                the same run, through the daemon
  spawnd connector install ./gitcrawl --hash sha256:…
                                                check and copy a connector into the store
  spawnd audit verify                           check the audit trail's hash chain
  spawnd health --json                          which kernel layers this machine offers

Exit codes: 0 ok, 2 usage, 3 denied, 4 config/manifest/credential, 5 kernel layer or
audit unavailable, 6 not found, 10 internal. Every command takes --json for the
{ok, tool, command, data|error, meta} envelope. Reference: docs/ in the source,
docs/cli.md for commands, exit codes and denial reasons.";

/// spawnd: run local CLIs for untrusted callers, inside what a manifest declares.
#[derive(Debug, Parser)]
#[command(name = "spawnd", version, about, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// Print the JSON envelope instead of human text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The invocation's permission tier: readonly (default), write, full, admin.
    #[arg(long, global = true, value_name = "TIER", value_parser = parse_tier)]
    pub mode: Option<Tier>,
    /// Operator config file (beats $SPAWND_CONFIG).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// More detail on stderr.
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// spawnd's own log lines on stderr: `human` (default) or `json` (one object per line).
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["human", "json"], default_value = "human")]
    pub log_format: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

fn parse_tier(s: &str) -> Result<Tier, String> {
    s.parse()
}

/// The subcommands.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum Command {
    /// Run an operation (or a raw envelope) in the sandbox; exits with the child's code.
    #[command(
        after_help = "Examples:\n  spawnd run --manifest policies/git.toml --op status --cwd ~/code/project\n  spawnd run --manifest policies/python3.toml --op eval --arg 'code=print(6*7)'\n  spawnd run --json --manifest policies/tar.toml --op list --arg archive=a.tar\n  spawnd run --socket /run/spawnd/spawnd.sock --connector local://spawnd/git --op status --cwd .\n\nThe child's stdout and stderr stream live; spawnd's own messages go to stderr\nprefixed `spawnd:`. Exit: the child's code, 128+N after signal N, 124 after the\nwall time, 3 denied, 5 when a kernel layer, the sandbox setup or the daemon\n(with --socket) is unavailable."
    )]
    Run(RunArgs),
    /// Run a command once under observation and write a draft manifest that runs it.
    #[command(
        after_help = "Examples:\n  spawnd learn --output ../tar.toml -- tar czf out.tgz src\n  spawnd learn --output ../tests.toml --name local://ci/tests -- python3 -m unittest -v\n  spawnd learn --output ../build.toml --env CC -- make\n\nThe command runs in the sandbox spawnd would use, but with the host's\ndirectories readable and executable, the workspace (the current directory\nunless --workspace) writable, and any name resolvable (--net). Every path it opens, writes or\nexecutes and every host:port it connects to is recorded; the draft grants those, collapsed into scopes, and marks\nwhat a person must review (sensitive paths stay commented out). Then:\n  spawnd manifest lint DRAFT\n  spawnd run --manifest DRAFT --op NAME --workspace DIR --mode write\nThe draft reruns the same command with no --arg: each input is a\nplaceholder whose default is the value observed.\n\nLearning lets the command read the host: run only what you would run in your\nown shell. Keep the draft outside the directories it may write."
    )]
    Learn(LearnArgs),
    /// Run the gate alone: print the decision and the exact argv (exit 0 allowed, 3 denied).
    #[command(
        after_help = "Examples:\n  spawnd check --manifest policies/git.toml --op log --arg since=2026-01-01\n  spawnd check --manifest policies/git.toml --envelope request.json\n  spawnd check --manifest policies/coreutils.toml --op list --arg dir=/tmp --cwd /tmp\n  spawnd check --socket /run/spawnd/spawnd.sock --connector local://spawnd/git --op status\n\nWith --socket the daemon's gate decides (its loaded manifest, config and\n[[access]]). Nothing runs and nothing is recorded in the audit trail."
    )]
    Check(RunArgs),
    /// Validate, explain or pin manifests.
    #[command(subcommand)]
    Manifest(ManifestCommand),
    /// Print `sha256:<hex>` of a file (what a manifest's program hash must be).
    #[command(after_help = "Example:\n  spawnd hash /usr/bin/git")]
    Hash {
        /// The file.
        file: PathBuf,
    },
    /// Describe this tool: version, modes, commands, denial reasons (connector contract).
    #[command(after_help = "Example:\n  spawnd capabilities --json | jq '.data.denial_reasons'")]
    Capabilities,
    /// Probe the kernel: user namespaces, Landlock ABI, seccomp, cgroups, audit location.
    #[command(
        after_help = "Examples:\n  spawnd health\n  spawnd health --json --config /etc/spawnd/config.toml\n\nStatus: healthy, needs_setup, degraded or error, with the reasons. Exits 5 unless healthy."
    )]
    Health,
    /// Operator configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The audit trail.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// What each connector can do now: the `<connector_status>` block for agents.
    #[command(
        after_help = "Examples:\n  spawnd connectors --json\n  spawnd connectors --manifest policies/git.toml --manifest policies/tar.toml\n  spawnd connectors --socket /run/spawnd/spawnd.sock\n  spawnd connectors --tools mcp --socket /run/spawnd/spawnd.sock\n\nStatuses: connected, not_configured (no credential binding, or a program\nmissing or not matching its pin), invalid_credentials (binding unreadable or\nempty), disabled_by_admin ([[disable]]). Without --manifest, the config's\n[server] manifests are read from disk. With --socket, the daemon answers\n(`connectors_status`) for the manifests it has loaded, which differ from the\nfiles on disk until it reloads them (SIGHUP)."
    )]
    Connectors {
        /// A manifest file (repeatable); default: `[server] manifests`.
        #[arg(long, value_name = "FILE")]
        manifest: Vec<PathBuf>,
        /// Ask the daemon listening here (`spawnd serve`) what it has loaded,
        /// instead of reading the manifests in this process.
        #[arg(long, value_name = "PATH", conflicts_with = "manifest")]
        socket: Option<PathBuf>,
        /// Print tool definitions for agents instead, one per operation:
        /// `json-schema` (a JSON Schema per operation's args) or `mcp`
        /// (MCP's `{name, description, inputSchema}` tools).
        #[arg(long, value_name = "FORMAT", value_parser = ["json-schema", "mcp"])]
        tools: Option<String>,
    },
    /// Connectors as published artifacts: hash, sign, install into the
    /// content-addressed store, list, pin, remove (docs/provenance.md).
    #[command(subcommand)]
    Connector(ConnectorCommand),
    /// The publisher keys trusted to sign connectors, per authority (`github://acme`).
    #[command(subcommand)]
    Keyring(KeyringCommand),
    /// Run the supervisor daemon: JSON-RPC 2.0 over a Unix socket (docs/daemon.md).
    #[command(
        after_help = "Examples:\n  spawnd serve --config /etc/spawnd/config.toml\n  spawnd serve --socket /tmp/spawnd.sock\n  printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"health\"}' | socat - UNIX-CONNECT:/run/spawnd/spawnd.sock\n\nThe socket is systemd's (LISTEN_FDS) or `[server] socket` (mode `socket_mode`,\ngroup `socket_group`). SIGTERM or SIGINT stops accepting and lets open\nconnections finish (up to 10 s)."
    )]
    Serve {
        /// Listen here instead of `[server] socket`.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Internal: create a user namespace and exit (used by `health`).
    #[command(name = "__probe-userns", hide = true)]
    ProbeUserns,
    /// Internal: set up a granted sandbox's network (routes, listeners,
    /// the logged refusal of other egress) in fresh user and network
    /// namespaces and exit (used by `health`).
    #[command(name = "__probe-network", hide = true)]
    ProbeNetwork,
    /// Internal: serve as the daemon's spawner on descriptor 3 (a restart
    /// after the first spawner died).
    #[command(name = "__spawner", hide = true)]
    Spawner {
        /// The daemon's pid: the spawner leaves if it is no longer its parent.
        #[arg(long)]
        parent: u32,
    },
}

/// `spawnd manifest …`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ManifestCommand {
    /// Write a starting manifest: each program pinned, one operation per
    /// program, workspace scopes, and every other key commented with what
    /// it does.
    #[command(
        after_help = "Examples:\n  spawnd manifest init --name local://ci/build --program /usr/bin/make --program /usr/bin/cc --output ci/build.toml\n  spawnd manifest init --name local://me/tool --program /usr/bin/jq\n\nThe draft passes `spawnd manifest lint`; edit its argv templates to the commands you run."
    )]
    Init {
        /// The connector's name (`scheme://owner/name`).
        #[arg(long, value_name = "FQN")]
        name: String,
        /// A program it runs (absolute path); repeat for more.
        #[arg(long = "program", value_name = "PATH", required = true)]
        programs: Vec<PathBuf>,
        /// Write here (never over an existing file) instead of stdout.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Validate a manifest: errors with file:line:column and a fix; warnings for weak spots.
    #[command(
        after_help = "Example:\n  spawnd manifest lint policies/git.toml\n\nExit 0 when valid (warnings allowed), 4 when not."
    )]
    Lint {
        /// Manifest file.
        file: PathBuf,
    },
    /// Say in plain words what a manifest lets a program do (for a security reviewer).
    #[command(
        after_help = "Examples:\n  spawnd manifest explain policies/git.toml\n  spawnd manifest explain github://acme/gitcrawl@1.2.3   # an installed connector\n  spawnd manifest explain sha256:3b6a…                 # by content hash"
    )]
    Explain {
        /// Manifest file, or an installed connector (`NAME@VERSION` or its
        /// content hash, as `spawnd connector list` shows them).
        file: PathBuf,
    },
    /// Fill in or update each program's `hash` in place, keeping comments and layout.
    #[command(
        after_help = "Examples:\n  spawnd manifest pin policies/git.toml\n  spawnd manifest pin ci/*.toml          # re-pin every manifest after a runner image update\n  spawnd manifest pin --check ci/*.toml  # exit 1 when a pin is missing or stale, writing nothing\n\nEach program is reported as pinned, unchanged, or updated (old -> new hash).\nPrograms given as `~/` paths are hashed for the invoking user."
    )]
    Pin {
        /// Manifest files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write nothing; exit 1 when any pin is missing or differs from the
        /// program's bytes.
        #[arg(long)]
        check: bool,
    },
}

/// `spawnd connector …`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ConnectorCommand {
    /// Print a connector directory's content hash: the SHA-256 of its
    /// shipped files (bin/*, in name order) followed by its manifest.toml.
    #[command(
        after_help = "Examples:\n  spawnd connector hash ./gitcrawl\n  spawnd connector hash --json ./gitcrawl | jq -r .data.shipped   # the manifest's provenance_hash\n\nA connector directory holds manifest.toml and, in bin/, the files it ships;\nnothing else in it is hashed. The same hash from a shell:\n  (cd ./gitcrawl && LC_ALL=C cat bin/* manifest.toml | sha256sum)\n  sha256sum ./gitcrawl/manifest.toml          # when nothing is shipped\nActions pin connectors by (name, version, this hash); `spawnd connector install\n--hash` refuses other bytes."
    )]
    Hash {
        /// The connector directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Write a new ed25519 publisher key pair: the private key PREFIX
    /// (PKCS#8 PEM, mode 0600) and the public key PREFIX.pub (PEM, as
    /// `openssl pkey -pubout` prints it); never over an existing file.
    #[command(
        after_help = "Examples:\n  spawnd connector keygen --output ~/.config/acme/publisher\n  # publish ~/.config/acme/publisher.pub as keys/publisher.pub in the connector's repository\n\nThe same pair from openssl works too:\n  openssl genpkey -algorithm ed25519 -out publisher && openssl pkey -in publisher -pubout -out publisher.pub\nKeep the private key off the hosts that install connectors; operators trust\nthe .pub with `spawnd keyring trust github://OWNER --key publisher.pub`."
    )]
    Keygen {
        /// Where to write the private key; the public key goes to PREFIX.pub.
        #[arg(long, short = 'o', value_name = "PREFIX")]
        output: PathBuf,
    },
    /// Sign a connector directory: write DIR/signature.json, an ed25519
    /// signature over its name, version, content hash and files.
    #[command(
        after_help = "Examples:\n  spawnd connector sign ./gitcrawl --key ~/.config/acme/publisher\n  spawnd connector sign ./gitcrawl --key publisher.pem   # a key from `openssl genpkey -algorithm ed25519`\n\nThe manifest must load, and when bin/ ships files its provenance_hash must be\ntheir hash (`spawnd connector hash --json DIR` prints it as `shipped`).\nsignature.json is outside the hashed bytes; signing again (a rotated key)\nreplaces it. Any edit to bin/ or manifest.toml afterwards voids it."
    )]
    Sign {
        /// The connector directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The publisher's private key (PKCS#8 PEM).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// Copy a connector into the content-addressed store, after checking
    /// its name, version, provenance hash and signature.
    #[command(
        after_help = "Examples:\n  sudo spawnd connector install ./gitcrawl\n  sudo spawnd connector install ./gitcrawl --name github://acme/gitcrawl@1.2.3 --hash sha256:3b6a…\n\nRefused (exit 3 or 4, with the reason): a name whose scheme is not github://,\ngitlab:// or local://; a version that is not strict SemVer (`latest`, `^1.2`,\n`1.2`); a --name or --hash the connector does not have; a provenance_hash that\nis missing or not the shipped files' hash; a signature that does not verify,\nor by a key the keyring does not trust for the name's authority; another\ncontent under a name and version already installed. An unsigned connector\ninstalls and is listed as unsigned. The entry is STORE/sha256-<hex>/, read-only."
    )]
    Install {
        /// The connector directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The content hash it must have (`sha256:` and 64 hex digits).
        #[arg(long, value_name = "sha256:HEX", value_parser = parse_digest)]
        hash: Option<crate::manifest::Sha256Digest>,
        /// The name it must have, optionally with the version: FQN or FQN@VERSION.
        #[arg(long, value_name = "FQN[@VERSION]")]
        name: Option<String>,
    },
    /// The installed connectors: name, version, content hash, signature
    /// status and signer, each re-checked against its bytes and the keyring.
    #[command(
        after_help = "Examples:\n  spawnd connector list\n  spawnd connector list --json | jq '.data.connectors[] | select(.signature.status != \"signed\")'\n\nSignature status: signed (by a key the keyring trusts for the name's\nauthority; the key id is shown), unsigned, untrusted (its key is not, or no\nlonger, trusted), invalid. An entry whose bytes changed since install, or\nthat others could change, is listed with its problem. Exit 1 when an entry has\na problem or an untrusted or invalid signature: `spawnd serve` would refuse to\nload the store (`servable` in --json)."
    )]
    List,
    /// Remove an installed connector (and its operator pins).
    #[command(
        after_help = "Examples:\n  sudo spawnd connector remove github://acme/gitcrawl@1.2.3\n  sudo spawnd connector remove sha256:3b6a…"
    )]
    Remove {
        /// NAME@VERSION, or the content hash.
        #[arg(value_name = "NAME@VERSION|sha256:HEX")]
        target: String,
    },
    /// Pin the system programs an installed connector declares (e.g.
    /// /usr/bin/git) to this host's bytes, in a file beside the stored
    /// connector: its manifest and signature stay as published.
    #[command(
        after_help = "Examples:\n  sudo spawnd connector pin github://acme/gitcrawl@1.2.3\n  sudo spawnd connector pin --check github://acme/gitcrawl@1.2.3   # exit 1 when a pin is missing or stale\n\nThe pins go to STORE/sha256-<hex>.pins.toml. A program the publisher pinned\nkeeps the publisher's pin (reported as matching this host or not); `~/`\nprograms are each caller's own and are not pinned."
    )]
    Pin {
        /// NAME@VERSION, or the content hash.
        #[arg(value_name = "NAME@VERSION|sha256:HEX")]
        target: String,
        /// Write nothing; exit 1 when a pin is missing or differs from the
        /// program's bytes.
        #[arg(long)]
        check: bool,
    },
}

/// `--hash`: a content hash, `sha256:` and 64 lowercase hex digits.
fn parse_digest(text: &str) -> Result<crate::manifest::Sha256Digest, String> {
    text.parse()
}

/// `spawnd keyring …`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum KeyringCommand {
    /// Trust a publisher's public key for an authority (`github://acme`):
    /// its signatures are accepted on that authority's connectors
    /// (`github://acme/…`, not `github://acmecorp/…`).
    #[command(
        after_help = "Examples:\n  sudo spawnd keyring trust github://acme --key publisher.pub\n  curl -fsSL https://raw.githubusercontent.com/acme/gitcrawl/main/keys/publisher.pub > acme.pub\n  sudo spawnd keyring trust github://acme --key acme.pub\n\nFILE is the publisher's keys/publisher.pub: PEM (`openssl pkey -pubout`) or the\nraw 32-byte key in base64. An authority may have several keys: to follow a\nrotation, trust the new key, then remove the old one."
    )]
    Trust {
        /// The publisher: scheme and owner, e.g. `github://acme`.
        #[arg(value_name = "AUTHORITY")]
        authority: String,
        /// The public key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// The trusted keys: authority, key id, file.
    #[command(after_help = "Examples:\n  spawnd keyring list\n  spawnd keyring list --json")]
    List,
    /// Stop trusting one key of an authority (--key ID), or all of them.
    #[command(
        after_help = "Examples:\n  sudo spawnd keyring remove github://acme --key 0123456789abcdef\n  sudo spawnd keyring remove github://acme\n\nInstalled connectors signed by a removed key stay installed; `spawnd connector\nlist` shows them as untrusted, and a new install of one is refused."
    )]
    Remove {
        /// The publisher: scheme and owner, e.g. `github://acme`.
        #[arg(value_name = "AUTHORITY")]
        authority: String,
        /// The key id (`spawnd keyring list` shows it).
        #[arg(long, value_name = "ID")]
        key: Option<String>,
    },
}

/// `spawnd audit …`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum AuditCommand {
    /// Check the hash chain end to end; name every edited, deleted, reordered, inserted, truncated or rewritten record.
    #[command(
        after_help = "Examples:\n  spawnd audit verify\n  spawnd audit verify /var/log/spawnd/audit.jsonl\n  spawnd audit verify --key old.key --key audit.key audit.jsonl\n  spawnd audit verify --checkpoint checkpoints.jsonl --public-key ed25519:3b6a… audit.jsonl\n  spawnd audit verify --from-seq 5501 --anchor 5500:hmac-sha256:9f… audit.jsonl.12\n\nExit 0 when intact (a torn last line left by a crash is a warning), 1 when\ntampered: every break is listed (the first 100; the rest counted), and the walk\ngoes on after each. The keyring is the config's hmac_key_file and\nprevious_hmac_key_files plus each --key: the chain may change keys only at a\nkey rotation note vouched for by both. A checkpoint (`spawnd audit checkpoint`)\nor an anchor says which hash the record at a seq must have; a log that no longer\nreaches that seq was cut. Off the host, give the files, the public key and\n(for a keyed chain) the HMAC keys, with --config /dev/null so that nothing of\nthat host is read."
    )]
    Verify(VerifyArgs),
    /// The last records as one-liners (`--json`: the raw records); `-f` follows new ones.
    #[command(
        after_help = "Examples:\n  spawnd audit tail -n 20\n  spawnd audit tail -f\n  spawnd audit tail -f --from-seq 4242 --json\n\nRecords come from the whole chain: the rotated files (<log>.N, oldest first),\nthen the live file. -f follows the log across rotations: it finishes the file\nthat was renamed before it goes on with the new one, and prints each record\nonce. --from-seq resumes after an interruption: every record from that seq on\n(the first is the one after the last a follower printed)."
    )]
    Tail {
        /// How many records.
        #[arg(short = 'n', long, default_value_t = 10)]
        lines: usize,
        /// Keep printing records as they are appended.
        #[arg(short, long)]
        follow: bool,
        /// Print every record from this seq on (instead of the last N).
        #[arg(long, value_name = "SEQ")]
        from_seq: Option<u64>,
        /// The log (default: the config's `[audit]` path).
        file: Option<PathBuf>,
    },
    /// Records matching every filter given.
    #[command(
        after_help = "Examples:\n  spawnd audit query --kind denial --reason option_injection\n  spawnd audit query --kind net --since 2h\n  spawnd audit query --label ci-job-41\n  spawnd audit query --connector local://spawnd/git --since 2026-11-01T00:00:00Z --until 2026-11-02T00:00:00+01:00 --json\n\n--label finds the spawns a caller labelled (`run --label`, the daemon's `label`\nparam): their decision, attach and exit records. Each line shows the label,\nwho took a detached spawn up, and who ended a program from outside\n(`spawn_kill by uid 1000 gid 1000 pid 4242`, `lease ran out`, `shutdown`)."
    )]
    Query {
        /// Which records.
        #[command(flatten)]
        filter: AuditFilter,
        /// The log (default: the config's `[audit]` path).
        file: Option<PathBuf>,
    },
    /// Write a new HMAC key for `[audit] hmac_key_file` (256 random bits as
    /// 64 hex digits), or with --signing an ed25519 key for checkpoints;
    /// mode 0600, an existing file is never overwritten.
    #[command(
        after_help = "Examples:\n  sudo spawnd audit keygen /etc/spawnd/audit.key\n  # then in /etc/spawnd/config.toml:\n  #   [audit]\n  #   hmac_key_file = \"/etc/spawnd/audit.key\"\n  sudo spawnd audit keygen --signing /etc/spawnd/checkpoint.key\n  spawnd audit keygen --public /etc/spawnd/checkpoint.key   # its public key again\n\nspawnd refuses HMAC keys shorter than 32 bytes. A new HMAC key starts a keyed\nchain; to replace one, move the old file's path to [audit]\nprevious_hmac_key_files and set the new one: the next append writes a key\nrotation note sealed by both. --signing prints the public key that verifiers\ngive to `spawnd audit verify --public-key`."
    )]
    Keygen {
        /// Where to write the key (with --public: the signing key to read).
        file: PathBuf,
        /// Write an ed25519 signing key for `spawnd audit checkpoint`
        /// (`[audit] checkpoint_key_file`) and print its public key.
        #[arg(long)]
        signing: bool,
        /// Print the public key of the signing key in FILE (writes nothing).
        #[arg(long, conflicts_with = "signing")]
        public: bool,
    },
    /// Sign the head of the verified chain (seq, hash, time, host) with an ed25519 key, for shipping off the host.
    #[command(
        after_help = "Examples:\n  sudo spawnd audit checkpoint --signing-key /etc/spawnd/checkpoint.key\n  sudo spawnd audit checkpoint -o /var/lib/spawnd/checkpoints.jsonl   # key from [audit] checkpoint_key_file\n\nThe chain is verified first; a chain that does not verify is not signed (exit 1).\nPrints one JSON line {v, seq, hash, ts, host {name, machine_id, boot_id}, log,\npublic_key, signature}; -o also appends it to OUT. Copy the lines off the host\n(a timer, a log shipper): there, `spawnd audit verify --checkpoint FILE\n--public-key KEY` catches a log rewritten, cut or replaced since, even by root\nholding the HMAC key."
    )]
    Checkpoint {
        /// The ed25519 signing key (default: `[audit] checkpoint_key_file`).
        #[arg(long, value_name = "FILE")]
        signing_key: Option<PathBuf>,
        /// Append the line to this file too.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: Option<PathBuf>,
        /// The log (default: the config's `[audit]` path).
        file: Option<PathBuf>,
    },
    /// Export as OCSF 1.5.0 events, one JSON object per line, one per record.
    #[command(
        after_help = "Examples:\n  spawnd audit export --format ocsf > spawnd-ocsf.jsonl\n  spawnd audit export --format ocsf --follow --since 1h | shipper\n\nA spawn's decision, denial, attach and exit are Process Activity (1007), its\nnet records Network Activity (4001) or DNS Activity (4003), a note about the\nlog Event Log Activity (1008), the daemon's lifecycle and heartbeat records\nApplication Lifecycle (6002); what OCSF has no attribute for is in `unmapped`\n(docs/audit.md, \"OCSF mapping\"). Events come from the whole chain (rotated\nfiles, then the live one), and filters choose which are printed: a spawn's\ndecision still fills the process and caller of its later events. --follow\ngoes on with records as they are appended, across rotations, each once.\nscripts/validate-ocsf checks an export against the OCSF 1.5.0 schema."
    )]
    Export {
        /// Output format (only `ocsf`).
        #[arg(long, value_parser = ["ocsf"])]
        format: String,
        /// Keep exporting records as they are appended.
        #[arg(short, long)]
        follow: bool,
        /// Which records.
        #[command(flatten)]
        filter: AuditFilter,
        /// The log (default: the config's `[audit]` path).
        file: Option<PathBuf>,
    },
}

// `spawnd audit verify`'s arguments.
// (A comment, not a doc comment: clap would take it for the
// subcommand's description, over the variant's.)
#[derive(Debug, Args, Default)]
pub(crate) struct VerifyArgs {
    /// The log (default: the config's `[audit]` path).
    pub file: Option<PathBuf>,
    /// An HMAC key the chain may be sealed with, in a 0600 file
    /// (repeatable; added to the config's keys).
    #[arg(long = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    /// A file of checkpoint lines (`spawnd audit checkpoint`), each checked
    /// against --public-key and then against the log (repeatable).
    #[arg(long = "checkpoint", value_name = "FILE")]
    pub checkpoints: Vec<PathBuf>,
    /// A public key checkpoints may be signed with: `ed25519:` and 64 hex
    /// digits, or a file holding it (repeatable).
    #[arg(long = "public-key", value_name = "KEY")]
    pub public_keys: Vec<String>,
    /// The record at SEQ must have exactly HASH (repeatable).
    #[arg(long = "anchor", value_name = "SEQ:HASH", value_parser = parse_anchor)]
    pub anchors: Vec<(u64, String)>,
    /// Verify a segment from this seq on (records before it are skipped);
    /// its start is vouched for by an anchor or checkpoint at SEQ-1, or
    /// reported as unanchored.
    #[arg(long, value_name = "SEQ")]
    pub from_seq: Option<u64>,
}

/// `--anchor SEQ:HASH`: a seq, a colon, and a record hash as records
/// write it (`sha256:` or `hmac-sha256:` and 64 hex digits).
pub(super) fn parse_anchor(text: &str) -> Result<(u64, String), String> {
    let usage = "give SEQ:HASH, e.g. 5500:sha256:<64 hex> (the seq and hash of a record, as `spawnd audit tail --json` shows them)";
    let (seq, hash) = text.split_once(':').ok_or_else(|| usage.to_string())?;
    let seq: u64 = seq
        .parse()
        .map_err(|_| format!("{seq:?} is not a seq: {usage}"))?;
    let hex = hash
        .strip_prefix("sha256:")
        .or_else(|| hash.strip_prefix("hmac-sha256:"))
        .ok_or_else(|| format!("{hash:?} is not a record hash: {usage}"))?;
    if seq == 0 || hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("{text:?}: {usage}"));
    }
    Ok((seq, hash.to_string()))
}

// Filters a security team uses; every one given must match.
// (A comment, not a doc comment: clap would take it for the
// subcommand's description, over the variant's.)
#[derive(Debug, Args, Default)]
pub(crate) struct AuditFilter {
    /// Connector FQN.
    #[arg(long)]
    pub connector: Option<String>,
    /// Operation name.
    #[arg(long)]
    pub op: Option<String>,
    /// Record kind: decision, denial, exit, attach, net, note, lifecycle or heartbeat.
    #[arg(long, value_name = "KIND", value_parser = parse_kind)]
    pub kind: Option<Kind>,
    /// The label a caller gave its spawns (`run --label`, the daemon's
    /// `label` param), exactly: their decision, attach and exit records.
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// Denial reason, e.g. option_injection.
    #[arg(long)]
    pub reason: Option<String>,
    /// Caller uid.
    #[arg(long)]
    pub uid: Option<u32>,
    /// Caller pid.
    #[arg(long)]
    pub pid: Option<u32>,
    /// One spawn's records: its decision (or denial), attach, net and exit.
    #[arg(long, value_name = "ID")]
    pub audit_id: Option<String>,
    /// Program hash: `sha256:` and 64 hex digits (the prefix may be left out).
    #[arg(long, value_name = "HASH", value_parser = parse_sha256)]
    pub program_sha256: Option<String>,
    /// Exit records of programs ended by this signal (9 for a kill).
    #[arg(long, value_name = "N")]
    pub signal: Option<i64>,
    /// Exit records of programs that ran out of their wall time.
    #[arg(long)]
    pub timed_out: bool,
    /// Exit records of programs ended from outside for this reason
    /// (`spawn_kill`, `lease_expired`, `shutdown`, `network_violation`…).
    #[arg(long, value_name = "WHY")]
    pub interrupted_by: Option<String>,
    /// Records at or after this time: RFC 3339 (`2026-11-26T10:00:00Z`,
    /// `2026-11-26T11:00:00+01:00`) or back from now (`90s`, `15m`, `2h`, `3d`).
    #[arg(long, value_name = "TIME", value_parser = TimeBound::parse)]
    pub since: Option<TimeBound>,
    /// Records before this time, in the same forms as --since.
    #[arg(long, value_name = "TIME", value_parser = TimeBound::parse)]
    pub until: Option<TimeBound>,
}

/// `--program-sha256`: `sha256:` and 64 hex digits, the prefix optional,
/// as records write it (lowercase).
pub(super) fn parse_sha256(text: &str) -> Result<String, String> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
    } else {
        Err("not a sha256: give `sha256:` and 64 hex digits (as `spawnd hash FILE` prints)".into())
    }
}

/// `--kind`: a record kind's wire name; the message lists them all.
fn parse_kind(text: &str) -> Result<Kind, String> {
    Kind::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        format!("not a record kind: give one of {}", names.join(", "))
    })
}

/// `spawnd config …`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ConfigCommand {
    /// Show the effective operator config (credential sources shown, secret values never).
    #[command(
        after_help = "Examples:\n  spawnd config show\n  spawnd config show --json --config /etc/spawnd/config.toml"
    )]
    Show,
}

// The request arguments shared by `run` and `check`.
// (A comment, not a doc comment: clap would take it for the
// subcommand's description, over the variant's.)
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The connector manifest (with `--socket`: where the connector's name and
    /// env passthrough keys are read; the daemon's loaded copy applies).
    #[arg(long, value_name = "FILE", required_unless_present = "connector")]
    pub manifest: Option<PathBuf>,
    /// Go through the daemon listening here (`spawnd serve`) instead of
    /// running in this process; output and exit codes are the same.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// With `--socket`: the connector's FQN, instead of reading it from
    /// `--manifest`; `FQN@VERSION` pins the version the daemon must serve
    /// (an action's `[[requires.connectors]]` entry).
    #[arg(
        long,
        value_name = "FQN[@VERSION]",
        requires = "socket",
        conflicts_with = "manifest"
    )]
    pub connector: Option<String>,
    /// With `--socket`: the content hash the daemon's installed connector
    /// must have (`sha256:…`, as `spawnd connector list` shows it).
    #[arg(long, value_name = "SHA256", requires = "socket")]
    pub connector_hash: Option<String>,
    /// The operation to run.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "envelope",
        required_unless_present = "envelope"
    )]
    pub op: Option<String>,
    /// A raw envelope: JSON {program, argv, env?, cwd?, stdin? | stdin_b64?}.
    #[arg(long, value_name = "FILE")]
    pub envelope: Option<PathBuf>,
    /// A placeholder value, `key=value` (split on the first `=`); repeat for each.
    #[arg(long = "arg", value_name = "K=V", conflicts_with = "envelope")]
    pub args: Vec<String>,
    /// Pass an env key: `K=V`, or `K` to take it from this environment.
    #[arg(long = "env", value_name = "K[=V]")]
    pub env: Vec<String>,
    /// The child's working directory (inside fs_read or fs_write).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Feed this file (or `-` for spawnd's stdin) to the child; /dev/null otherwise.
    #[arg(long, value_name = "FILE")]
    pub stdin_file: Option<PathBuf>,
    /// Testing aid: launch through a forked spawner process, as `spawnd serve` does.
    #[arg(long, hide = true)]
    pub via_spawner: bool,
    /// Tighten the wall time, e.g. `500ms`, `10s`, `2m` (never loosens the manifest's).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub timeout: Option<u64>,
    /// The directory `{workspace}/` scopes and cwd expand against (a
    /// checkout, say); else the operator's `[sandbox] workspace`.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// With --json, stream the program's stdout and stderr live to spawnd's
    /// stderr as well, as they arrive; the JSON result still goes to stdout
    /// (without --json, output is always live).
    #[arg(long)]
    pub live: bool,
    /// Watch the program's file calls and the calls the seccomp filter
    /// refuses, and say after the run what the sandbox refused, which layer
    /// refused it, and what manifest key would grant it (`trace` in --json)
    #[arg(long, conflicts_with = "socket")]
    pub trace: bool,
    /// A label recorded with the spawn in every audit record (a CI job id,
    /// say): at most 128 bytes, no control characters; `audit query` shows it
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// `run`: exit 7 when the program succeeded but spawnd refused any of
    /// its network egress (each refusal is listed on stderr as `spawnd:
    /// network: HOST:PORT refused ×N (reason; what would grant it)`), so a
    /// CI step fails where a tool swallowed the refusal; a program that
    /// failed keeps its own exit code
    #[arg(long)]
    pub fail_on_refusal: bool,
}

// `spawnd learn`'s arguments.
// (A comment, not a doc comment: clap would take it for the
// subcommand's description, over the variant's.)
#[derive(Args, Debug)]
pub(crate) struct LearnArgs {
    /// Write the draft manifest here (never over an existing file unless --force).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
    /// The connector's name in the draft (`scheme://owner/name`); default
    /// `local://learned/<program>`.
    #[arg(long, value_name = "FQN")]
    pub name: Option<String>,
    /// The operation's name in the draft.
    #[arg(long, value_name = "NAME", default_value = "run")]
    pub op: String,
    /// The writable directory `{workspace}` names (default: the current
    /// directory); the draft's scopes under it are written `{workspace}/…`.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Another directory the command may write while learning; repeat for more.
    #[arg(long = "write", value_name = "DIR")]
    pub write: Vec<PathBuf>,
    /// Another directory (or file) the command may read while learning, even
    /// under the host's /tmp; the draft grants what it read there. Repeat for more.
    #[arg(long = "read", value_name = "DIR")]
    pub read: Vec<PathBuf>,
    /// A directory the command may read and execute from while learning (a
    /// toolchain's prefix: `~/.pyenv/versions/3.12.1`, `~/.rustup/toolchains/…`);
    /// the draft grants it in `fs_exec` when the run used it. Repeat for more.
    #[arg(long = "exec", value_name = "DIR")]
    pub exec: Vec<PathBuf>,
    /// Pass an env key: `K=V`, or `K` to take it from this environment; the
    /// draft lists it in `env_passthrough`.
    #[arg(long, value_name = "K[=V]")]
    pub env: Vec<String>,
    /// Stop the command after this long (default 10m).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub timeout: Option<u64>,
    /// The network while learning: `record` (default) lets the command
    /// resolve any name and records each host:port it connects to, then
    /// refuses the connection, so nothing leaves the machine; `forward`
    /// relays each one under the checks a grant gets (the operator's
    /// `[network]` must be enabled); `none` gives it no network at all.
    #[arg(long, value_name = "MODE", default_value = "record", value_parser = ["record", "forward", "none"])]
    pub net: String,
    /// Overwrite the output file.
    #[arg(long)]
    pub force: bool,
    /// The command: the program (a path, or a name looked up in PATH) and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    pub command: Vec<String>,
}

/// Parses a positive duration ([`crate::duration::parse_or_seconds`]:
/// `500ms`, `10s`, `2m`, `1h`, `3d` or a bare number of seconds) into
/// milliseconds.
pub(crate) fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let duration = crate::duration::parse_or_seconds(text).map_err(|e| e.to_string())?;
    u64::try_from(duration.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| format!("`{text}` must be a positive duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("10s"), Ok(10_000));
        assert_eq!(parse_duration_ms("3"), Ok(3_000));
        assert_eq!(parse_duration_ms("2m"), Ok(120_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert!(parse_duration_ms("0s").is_err());
        assert!(parse_duration_ms("0").is_err());
        assert!(parse_duration_ms("18446744073709551615s").is_err());
        assert!(parse_duration_ms("5 weeks").is_err());
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Subcommands' arguments are built when one is parsed (`defer`); what
    /// a built subcommand describes itself as stays its variant's words.
    #[test]
    fn a_deferred_subcommand_keeps_its_description_once_built() {
        use clap::CommandFactory;
        fn descriptions(command: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
            for sub in command.get_subcommands() {
                let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
                let path = format!("{path} {}", sub.get_name());
                out.push((path.clone(), about));
                descriptions(sub, &path, out);
            }
        }
        let mut eager = Vec::new();
        descriptions(&Cli::command(), "spawnd", &mut eager);
        let mut built_command = Cli::command();
        built_command.build();
        let mut built = Vec::new();
        descriptions(&built_command, "spawnd", &mut built);
        for (path, about) in &eager {
            let after = built.iter().find(|(p, _)| p == path).map(|(_, a)| a);
            assert_eq!(
                Some(about),
                after,
                "{path}'s description changed once built"
            );
        }
        assert!(eager.len() > 20, "{eager:?}");
    }
}
