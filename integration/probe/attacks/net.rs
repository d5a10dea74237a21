//! N: IPC and network: TCP/UDP egress and host loopback,
//! UNIX and abstract sockets, socket families a sandbox never needs, signals
//! to host pids, SysV shared memory and the UTS hostname.

use std::ffi::CStr;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::time::Duration;

use libc::{
    EACCES, EADDRNOTAVAIL, EAFNOSUPPORT, ECONNREFUSED, EHOSTUNREACH, EIDRM, EINVAL, ENETUNREACH,
    ENOENT, ENOSYS, ENOTDIR, EPERM, EPROTONOSUPPORT, ESRCH,
};

use crate::child::kill;
use crate::consts::EXTERNAL_TARGETS;
use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{self, cvt, owned, Errno};

/// Refusals of creating a socket of a forbidden family.
const FAMILY_DENIED: &[i32] = &[EPERM, EACCES, EAFNOSUPPORT, EPROTONOSUPPORT, ENOSYS];
/// Refusals of a connect: nobody listening in this netns, no route, no
/// source address, or denied (Landlock, seccomp).
const CONNECT_REFUSED: &[i32] = &[
    ECONNREFUSED,
    ENETUNREACH,
    EHOSTUNREACH,
    EADDRNOTAVAIL,
    EPERM,
    EACCES,
    EAFNOSUPPORT,
];
/// Refusals that prove no packet left the namespace.
const EGRESS_REFUSED: &[i32] = &[ENETUNREACH, EADDRNOTAVAIL, EPERM, EACCES, EAFNOSUPPORT];
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn address(args: &Args<'_>) -> Result<SocketAddr, UsageError> {
    args.at_most(1)?;
    args.parsed(0, "IP:PORT (an IP literal, e.g. 127.0.0.1:80 or [::1]:80)")
}

/// TCP connect to IP:PORT.
pub fn tcp_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let target = address(args)?;
    let result = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
        .map(|s| format!("connected from {:?}", s.local_addr().ok()))
        .map_err(Errno::from);
    Ok(judge(
        &format!("connect({target})"),
        result,
        CONNECT_REFUSED,
    ))
}

/// TCP connect to two well-known external addresses.
pub fn tcp_connect_external(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for text in EXTERNAL_TARGETS {
        let Ok(target) = text.parse::<SocketAddr>() else {
            continue;
        };
        let what = format!("connect({target})");
        match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT).map_err(Errno::from) {
            Ok(_) => findings.escaped(format!("{what}: connected")),
            Err(e) if e.is_one_of(EGRESS_REFUSED) => findings.refused(format!("{what}: {e}")),
            Err(e) => findings.escaped(format!(
                "{what}: {e} (not a local refusal: packets left the namespace)"
            )),
        }
    }
    Ok(findings.verdict())
}

/// The sandbox's loopback is its own: bind 127.0.0.1:PORT (a port a host
/// listener holds), listen, connect to it and read back a nonce through
/// the accepted connection.
pub fn loopback_own(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let port: u16 = args.parsed(0, "PORT")?;
    let mut findings = Findings::new();
    let what = format!("bind+listen(127.0.0.1:{port})");
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            findings.escaped(format!(
                "{what}: {} (the host's port is taken here: its loopback is shared)",
                Errno::from(e)
            ));
            return Ok(findings.verdict());
        }
        Err(e) => {
            findings.escaped(format!(
                "{what}: its own loopback failed: {}",
                Errno::from(e)
            ));
            return Ok(findings.verdict());
        }
    };
    let nonce = format!("nonce-{}", std::process::id());
    let echoed = (|| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut client = TcpStream::connect_timeout(&listener.local_addr()?, CONNECT_TIMEOUT)?;
        client.set_read_timeout(Some(CONNECT_TIMEOUT))?;
        let (mut served, _) = listener.accept()?;
        served.write_all(nonce.as_bytes())?;
        let mut got = vec![0u8; nonce.len()];
        client.read_exact(&mut got)?;
        Ok(String::from_utf8_lossy(&got).into_owned())
    })();
    match echoed {
        Ok(got) if got == nonce => findings.refused(format!(
            "{what}: its own server answered its own client; the host's listener is not here"
        )),
        Ok(got) => findings.escaped(format!("{what}: read {got:?}, not its own nonce")),
        // Its own loopback does not work: nothing escaped, but this probe
        // cannot judge (the suite's positive control fails).
        Err(e) => findings.escaped(format!("{what}: its own loopback failed: {e}")),
    }
    Ok(findings.verdict())
}

/// connect to a UNIX socket path.
pub fn unix_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "PATH")?;
    let result = UnixStream::connect(path)
        .map(|_| "connected".to_string())
        .map_err(Errno::from);
    Ok(judge(
        &format!("connect(unix:{path})"),
        result,
        &[ENOENT, EACCES, EPERM, ECONNREFUSED, ENOTDIR],
    ))
}

/// connect to an abstract UNIX socket.
pub fn abstract_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let name = args.required(0, "NAME")?;
    let what = format!("connect(unix:@{name})");
    let result = UnixAddr::from_abstract_name(name.as_bytes())
        .and_then(|addr| UnixStream::connect_addr(&addr))
        .map(|_| "connected".to_string())
        .map_err(Errno::from);
    Ok(judge(&what, result, &[ECONNREFUSED, EPERM, EACCES]))
}

fn socket_of(what: &str, domain: i32, kind: i32, protocol: i32) -> Verdict {
    // SAFETY: socket takes plain integers.
    let result =
        cvt(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) }).map(|fd| {
            drop(owned(fd as i32));
            format!("fd {fd} (closed)")
        });
    judge(what, result, FAMILY_DENIED)
}

/// socket(AF_NETLINK).
pub fn netlink_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(socket_of(
        "socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)",
        libc::AF_NETLINK,
        libc::SOCK_RAW,
        libc::NETLINK_ROUTE,
    ))
}

/// socket(AF_PACKET).
pub fn packet_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let all = i32::from((libc::ETH_P_ALL as u16).to_be());
    Ok(socket_of(
        "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)",
        libc::AF_PACKET,
        libc::SOCK_RAW,
        all,
    ))
}

/// socket(AF_VSOCK), never connected.
pub fn vsock_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(socket_of(
        "socket(AF_VSOCK, SOCK_STREAM)",
        libc::AF_VSOCK,
        libc::SOCK_STREAM,
        0,
    ))
}

/// One UDP datagram to IP:PORT.
pub fn udp_send(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let target = address(args)?;
    let what = format!("send(udp {target})");
    let local = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sent = UdpSocket::bind(local).and_then(|s| {
        s.connect(target)?;
        let n = s.send(b"spawnd-probe")?;
        Ok((s, n))
    });
    let refusals = CONNECT_REFUSED;
    let (socket, n) = match sent {
        Ok(pair) => pair,
        Err(e) => return Ok(judge(&what, Err(e.into()), refusals)),
    };
    if !target.ip().is_loopback() {
        return Ok(Verdict::escaped(format!(
            "{what} = {n} bytes to a non-loopback address"
        )));
    }
    // On loopback, a missing listener answers at once with ICMP port
    // unreachable, which the connected socket reports as ECONNREFUSED.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(300)));
    let mut buf = [0u8; 64];
    Ok(match socket.recv(&mut buf) {
        Err(e) if e.raw_os_error() == Some(ECONNREFUSED) => Verdict::blocked(format!(
            "{what} = {n} bytes, then ECONNREFUSED: no listener got it"
        )),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Verdict::escaped(format!(
                "{what} = {n} bytes, no port-unreachable: a listener got it"
            ))
        }
        Ok(len) => Verdict::escaped(format!("{what} = {n} bytes, and {len} bytes came back")),
        Err(e) => Verdict::unclear(format!("{what} = {n} bytes, then recv: {}", Errno::from(e))),
    })
}

/// kill(PID, 0).
pub fn kill_host_pid(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let pid: i32 = args.parsed(0, "PID")?;
    if pid <= 0 {
        return Err(UsageError(format!("PID must be positive, got {pid}")));
    }
    if pid == sys::getpid() {
        return Ok(Verdict::blocked(format!(
            "pid {pid} is the probe itself here: the host pid is not visible"
        )));
    }
    let result = kill(pid, 0).map(|_| "0 (the process can be signalled)".to_string());
    Ok(judge(&format!("kill({pid}, 0)"), result, &[ESRCH, EPERM]))
}

/// shmctl(IPC_STAT) and shmat on a host segment id.
pub fn sysv_shm(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let id: i32 = args.parsed(0, "SHMID")?;
    let refusals = &[EINVAL, EACCES, EPERM, EIDRM, ENOSYS];
    let mut findings = Findings::new();
    // SAFETY: an all-zero shmid_ds is a valid out-buffer.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: `ds` is a valid out-pointer for IPC_STAT.
    let stat = cvt(unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) });
    let stat = stat.map(|_| format!("0 (size {}, creator pid {})", ds.shm_segsz, ds.shm_cpid));
    findings.check(&format!("shmctl({id}, IPC_STAT)"), stat, refusals);
    // SAFETY: a NULL address lets the kernel choose; read-only attach.
    let addr = unsafe { libc::shmat(id, std::ptr::null(), libc::SHM_RDONLY) };
    let attach = if addr as isize == -1 {
        Err(Errno::last())
    } else {
        // SAFETY: `addr` was just returned by shmat.
        unsafe { libc::shmdt(addr) };
        Ok(format!("{addr:?} (detached)"))
    };
    findings.check(&format!("shmat({id}, SHM_RDONLY)"), attach, refusals);
    Ok(findings.verdict())
}

/// Compares the UTS hostname with the host's.
pub fn hostname(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let host = args.required(0, "HOST_HOSTNAME")?;
    // SAFETY: an all-zero utsname is a valid out-buffer.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid out-pointer.
    if let Err(e) = cvt(unsafe { libc::uname(&mut uts) }) {
        return Ok(Verdict::unclear(format!("uname: {e}")));
    }
    // SAFETY: uname NUL-terminates nodename within its array.
    let mine = unsafe { CStr::from_ptr(uts.nodename.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(if mine == host {
        Verdict::escaped(format!("hostname {mine:?} is the host's"))
    } else {
        Verdict::blocked(format!(
            "hostname {mine:?} differs from the host's {host:?}"
        ))
    })
}

/// A `sockaddr_in`/`sockaddr_in6` for `target`, with its length.
fn raw_sockaddr(target: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid and large enough for
    // both address families.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match target {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Connects an MPTCP socket to `target` within CONNECT_TIMEOUT.
fn mptcp_connect_to(target: &SocketAddr) -> Result<String, Errno> {
    let domain = if target.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: socket takes plain integers.
    let fd = owned(cvt(unsafe { libc::socket(domain, kind, libc::IPPROTO_MPTCP) })? as i32);
    let (addr, len) = raw_sockaddr(target);
    // SAFETY: `addr` holds a valid socket address of `len` bytes.
    let ret = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    match cvt(ret) {
        Ok(_) => return Ok("connected".into()),
        Err(e) if e.0 != libc::EINPROGRESS => return Err(e),
        Err(_) => {}
    }
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `poll` is one valid pollfd.
    if unsafe { libc::poll(&mut poll, 1, CONNECT_TIMEOUT.as_millis() as i32) } == 0 {
        return Err(Errno(libc::ETIMEDOUT));
    }
    let mut error: libc::c_int = 0;
    let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `error` and `size` are valid out-pointers for SO_ERROR.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut error as *mut libc::c_int).cast(),
            &mut size,
        )
    };
    cvt(ret)?;
    if error == 0 {
        Ok("connected".into())
    } else {
        Err(Errno(error))
    }
}

/// MPTCP connect to IP:PORT (Landlock's TCP rules did not cover MPTCP).
pub fn mptcp_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let target = address(args)?;
    let mut refusals = CONNECT_REFUSED.to_vec();
    // The kernel has no MPTCP, or net.mptcp.enabled=0.
    refusals.extend([EPROTONOSUPPORT, libc::ENOPROTOOPT]);
    Ok(judge(
        &format!("connect(mptcp {target})"),
        mptcp_connect_to(&target),
        &refusals,
    ))
}
