//! The netlink messages a sandbox's init sends to its own network namespace
//! while it holds CAP_NET_ADMIN over it, each built by hand and sent through
//! `nix` without `unsafe`: `route.rs` (a `local` route to the sandbox's
//! loopback) and `nftables.rs` (a learning sandbox's redirect of the fake
//! pool, a granted sandbox's logged refusal of other egress). Reading the
//! refusals' log (NFLOG) needs `unsafe` and lives in `sys`, which shares
//! [`read_ack`] (so this module sits below `sys` in `tests/layering.rs`).

mod nftables;
mod route;

pub use nftables::{
    log_and_refuse_other_egress, redirect_tcp_to_loopback_port, EGRESS_TABLE, LEARN_TABLE,
    LOGGED_BYTES,
};
pub use route::{add_local_route, read_ack};
