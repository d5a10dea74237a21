//! The command-line front end: parse arguments, load what a command needs,
//! run it, and hand the outcome to `output::emit`, the one place that maps
//! outcomes to text, JSON and exit codes. `main` returns the exit code.

mod args;
mod audit_cmd;
pub(crate) mod check;
mod connector_cmd;
pub(crate) mod context;
mod explain;
mod info;
mod keyring_cmd;
mod learn;
mod logging;
mod manifest_cmd;
pub(crate) mod output;
mod remote;
pub(crate) mod run;
pub(crate) use std::time::Instant;

use clap::Parser;

pub(crate) use args::{
    AuditCommand, Cli, Command, ConfigCommand, ConnectorCommand, KeyringCommand, ManifestCommand,
};
pub(crate) use output::{Failure, Success};

/// When this process's `main` began: `spawnd run` reports its whole wall
/// time from here (`timings.process_us`).
static PROCESS_STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Runs the CLI with the process arguments; returns the exit code.
pub fn main() -> i32 {
    let started = *PROCESS_STARTED.get_or_init(Instant::now);
    let raw_args: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(&raw_args) {
        Ok(cli) => cli,
        Err(e) => return report_usage_error(e, &raw_args, started),
    };
    logging::init(
        cli.verbose,
        cli.log_format == "json",
        matches!(cli.command, Command::Serve { .. }),
    );
    if let Command::Spawner { parent } = cli.command {
        return crate::spawner::serve_on_fd3(parent);
    }
    let command = command_name(&cli.command);
    let mode = cli.mode.unwrap_or_default().to_string();
    let result = dispatch(&cli);
    output::emit(
        result,
        cli.json,
        &output::Meta {
            command,
            mode: &mode,
            started,
        },
    )
}

fn report_usage_error(e: clap::Error, raw_args: &[String], started: Instant) -> i32 {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            2
        } else {
            0
        };
    }
    if raw_args.iter().any(|a| a == "--json") {
        return output::emit(
            Err(Failure::usage(usage_message(&e.render().to_string()))),
            true,
            &output::Meta {
                command: "usage",
                mode: "readonly",
                started,
            },
        );
    }
    let _ = e.print();
    2
}

/// A usage error on one line, for the JSON envelope: clap's first
/// paragraph (what is wrong, and the arguments it names), without the
/// usage and the hint that follow it.
fn usage_message(rendered: &str) -> String {
    let message = rendered
        .trim_start_matches("error: ")
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    match message.is_empty() {
        true => "invalid usage".to_string(),
        false => message,
    }
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Check(_) => "check",
        Command::Run(_) => "run",
        Command::Learn(_) => "learn",
        Command::Manifest(ManifestCommand::Init { .. }) => "manifest.init",
        Command::Manifest(ManifestCommand::Lint { .. }) => "manifest.lint",
        Command::Manifest(ManifestCommand::Explain { .. }) => "manifest.explain",
        Command::Manifest(ManifestCommand::Pin { .. }) => "manifest.pin",
        Command::Hash { .. } => "hash",
        Command::Capabilities => "capabilities",
        Command::Health => "health",
        Command::Config(ConfigCommand::Show) => "config.show",
        Command::Audit(AuditCommand::Verify(_)) => "audit.verify",
        Command::Audit(AuditCommand::Checkpoint { .. }) => "audit.checkpoint",
        Command::Audit(AuditCommand::Tail { .. }) => "audit.tail",
        Command::Audit(AuditCommand::Query { .. }) => "audit.query",
        Command::Audit(AuditCommand::Export { .. }) => "audit.export",
        Command::Audit(AuditCommand::Keygen { .. }) => "audit.keygen",
        Command::ProbeUserns => "probe-userns",
        Command::ProbeNetwork => "probe-network",
        Command::Spawner { .. } => "spawner",
        Command::Serve { .. } => "serve",
        Command::Connectors { .. } => "connectors",
        Command::Connector(c) => match c {
            ConnectorCommand::Hash { .. } => "connector.hash",
            ConnectorCommand::Keygen { .. } => "connector.keygen",
            ConnectorCommand::Sign { .. } => "connector.sign",
            ConnectorCommand::Install { .. } => "connector.install",
            ConnectorCommand::List => "connector.list",
            ConnectorCommand::Remove { .. } => "connector.remove",
            ConnectorCommand::Pin { .. } => "connector.pin",
        },
        Command::Keyring(k) => match k {
            KeyringCommand::Trust { .. } => "keyring.trust",
            KeyringCommand::List => "keyring.list",
            KeyringCommand::Remove { .. } => "keyring.remove",
        },
    }
}

/// How long this process has run, from the start of [`main`] (from the
/// first call, when `main` did not run: a test calling in).
pub(crate) fn process_elapsed() -> std::time::Duration {
    PROCESS_STARTED.get_or_init(Instant::now).elapsed()
}

fn dispatch(cli: &Cli) -> Result<Success, Failure> {
    match &cli.command {
        Command::Check(args) => check::run_check(cli, args),
        Command::Run(args) => run::run(cli, args),
        Command::Learn(args) => learn::learn(cli, args),
        Command::Manifest(command) => manifest_cmd::dispatch(cli, command),
        Command::Hash { file } => info::hash(file),
        Command::Capabilities => Ok(info::capabilities()),
        Command::Health => info::health(cli),
        Command::Config(ConfigCommand::Show) => info::config_show(cli),
        Command::Audit(command) => audit_cmd::dispatch(cli, command),
        Command::Connector(command) => connector_cmd::dispatch(cli, command),
        Command::Keyring(command) => keyring_cmd::dispatch(cli, command),
        Command::Connectors {
            socket: Some(socket),
            tools,
            ..
        } => shown_with_tools(remote::connectors_remote(socket)?, tools.as_deref()),
        Command::Connectors {
            manifest, tools, ..
        } => {
            let mut config = context::load_config(cli)?;
            if !manifest.is_empty() {
                // Those files only, not the store's connectors too.
                config.server.manifests = manifest.clone();
                config.connectors.store = None;
            }
            let manifests =
                crate::config::manifests::load_manifests(&config).map_err(Failure::config)?;
            let caller = context::current_caller()?;
            let status = crate::connectors::status(&config, &manifests, &caller.home, &|_| true);
            shown_with_tools(status, tools.as_deref())
        }
        Command::Serve { socket } => serve(cli, socket.clone()),
        Command::Spawner { .. } => Err(Failure::usage("__spawner is started by spawnd serve")),
        Command::ProbeUserns => match crate::kernel_features::userns_probe_helper() {
            Ok(()) => Ok(Success::new(serde_json::Value::Null, "")),
            Err(e) => Err(Failure::sandbox_unavailable(e)),
        },
        Command::ProbeNetwork => match crate::sandbox::network::network_probe_helper() {
            Ok(()) => Ok(Success::new(serde_json::Value::Null, "")),
            Err(e) => Err(Failure::sandbox_unavailable(e)),
        },
    }
}

/// `spawnd serve`: the daemon, with the operator's config and manifests.
fn serve(cli: &Cli, socket: Option<std::path::PathBuf>) -> Result<Success, Failure> {
    let config = context::load_config(cli)?;
    // `[server] manifests` is the operator's config: a missing or
    // invalid entry is a config problem (exit 4), told apart from
    // what keeps the daemon itself from running (exit 5).
    let manifests = crate::config::manifests::load_manifests(&config)
        .map_err(|e| Failure::config(format!("serve: manifests: {e}")))?;
    let path = context::config_path(cli);
    let reload: crate::daemon::Reload =
        Box::new(move || context::load_config_from(path.as_deref()).map_err(|f| f.message));
    crate::daemon::serve(config, manifests, reload, socket)
        .map(|()| Success::new(serde_json::Value::Null, ""))
        .map_err(|e| {
            Failure::new(
                crate::failure::FailureKind::DaemonUnavailable,
                format!("serve: {e}"),
            )
        })
}

/// `connectors`: the status as it is (its block for a person), or with
/// `--tools FORMAT` the tool definitions of every operation in it, as
/// `{tools}` and as pretty JSON for a person.
fn shown_with_tools(
    status: crate::connectors::ConnectorsStatus,
    format: Option<&str>,
) -> Result<Success, Failure> {
    let Some(format) = format else {
        let data = serde_json::to_value(&status)
            .map_err(|e| Failure::internal(format!("the connectors' status: {e}")))?;
        return Ok(Success::new(data, status.block));
    };
    let format = format
        .parse::<crate::connectors::tools::ToolFormat>()
        .map_err(Failure::usage)?;
    let tools = crate::connectors::tools::tools(&status.connectors, format);
    let text = serde_json::to_string_pretty(&tools).unwrap_or_default();
    Ok(Success::new(serde_json::json!({ "tools": tools }), text))
}
